"""Controls the twin can be run under.  Pure: an observation and a time in, a list of actions out.

- `none`: the seed's fleet as it was: a static 200 ms breaker, blind failover, no admission control.
- `reactive`: the seed's fixes (seed 000 "修复方案"): reject prompts over 24k tokens, stop admitting at 80% GPU
  memory, release the batch at 25% fragmentation, and the dynamic timeout
  `200 ms x max(1, ctx/4000) x min(3, qps/3000)`.  They act on what *is*, never on what is coming.
- `oracle`: everything `reactive` does, plus what only a controller that knows the future load can do in time:
  pre-warm standby pools a cold start ahead of the surge, admit no more than the fleet can serve (urgent first),
  and fail over only to pools with headroom.  It reads the future from the traffic itself: an upper bound for
  any forecaster, including infercast's own (`predictive`, driven by the predictors, comes with the actuator).

Actions are applied by the fleet through the router's admin API — the same calls an operator or the actuator
makes on a real router.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from infercast.config import FleetConfig, LengthDistribution
from infercast.twin.traffic import sample_lengths


@dataclass(frozen=True)
class Action:
    kind: str  # set_policy | set_node_control | set_rate_limit | prewarm | set_weight | set_breaker_threshold
    pool: str | None = None
    args: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class PoolView:
    name: str
    nodes: int
    nodes_up: int
    nodes_starting: int
    standby: bool
    enabled: bool
    speed: float
    memory_usage: float


@dataclass(frozen=True)
class Observation:
    now: float
    pools: tuple[PoolView, ...]
    prefill_tokens_per_second: float
    cold_start_seconds: float


class Control(Protocol):
    name: str

    def decide(self, obs: Observation) -> list[Action]: ...


class NoControl:
    name = "none"

    def decide(self, obs: Observation) -> list[Action]:
        return []


class ReactiveControl:
    """The seed's static fixes, set once at start."""

    name = "reactive"

    def __init__(self, cfg: FleetConfig) -> None:
        self.th = cfg.thresholds
        self._done = False

    def settings(self) -> list[Action]:
        th = self.th
        return [
            Action(
                "set_policy",
                args={
                    "reject_context_tokens": th.context_reject_tokens,
                    "dynamic_timeout": True,
                    "memory_pressure_limit": th.memory_breaker,
                },
            ),
            Action(
                "set_node_control",
                args={"stop_admit_memory": th.memory_breaker, "release_fragmentation": th.fragmentation_release},
            ),
        ]

    def decide(self, obs: Observation) -> list[Action]:
        if self._done:
            return []
        self._done = True
        return self.settings()


class OracleControl(ReactiveControl):
    """Knows the offered load ahead (`rate_at`, `long_share_at` of the traffic) and acts a cold start early."""

    name = "oracle"
    utilisation_target = 0.80  # admit up to this share of the prefill capacity (KV headroom above it)
    headroom = 0.70  # fail over only to pools whose memory is below this

    def __init__(self, cfg: FleetConfig, traffic, lengths: LengthDistribution, seed: int = 0) -> None:
        super().__init__(cfg)
        self.traffic = traffic
        rng = np.random.default_rng(seed + 7919)
        short, _ = sample_lengths(20_000, 0.0, lengths, rng)
        long, _ = sample_lengths(20_000, 1.0, lengths, rng)
        self.mean_short, self.mean_long = float(short.mean()), float(long.mean())
        self._prewarmed: set[str] = set()
        self._rate: float | None = None

    def capacity_rps(self, obs: Observation, t: float) -> float:
        """Requests/s the routable pools can prefill at the long-context share expected at t."""
        share = self.traffic.long_share_at(t)
        mean_prompt = (1 - share) * self.mean_short + share * self.mean_long
        tokens = sum(p.nodes_up * p.speed for p in obs.pools if p.enabled) * obs.prefill_tokens_per_second
        return self.utilisation_target * tokens / mean_prompt

    def decide(self, obs: Observation) -> list[Action]:
        actions = super().decide(obs)
        if actions:
            # urgent first; over capacity, answer 429 at once rather than queueing (clients retry after backoff)
            actions.append(
                Action(
                    "set_policy",
                    args={"priority_admission": True, "failover_headroom": self.headroom, "gateway_queue_seconds": 0.0},
                )
            )
        lead = obs.cold_start_seconds + 60.0
        future_peak = max(self.traffic.rate_at(obs.now + dt) for dt in np.linspace(0, lead, 13))
        if future_peak > self.capacity_rps(obs, obs.now + lead):
            for p in obs.pools:
                if p.standby and p.name not in self._prewarmed:
                    self._prewarmed.add(p.name)
                    actions.append(Action("prewarm", pool=p.name))
        rate = self.capacity_rps(obs, obs.now + 5.0)
        if self._rate is None or abs(rate - self._rate) > 0.02 * self._rate:  # act on real changes only
            self._rate = rate
            actions.append(Action("set_rate_limit", args={"rps": rate}))
        return actions


def make_control(name: str, cfg: FleetConfig, traffic, seed: int = 0) -> Control:
    if name == "none":
        return NoControl()
    if name == "reactive":
        return ReactiveControl(cfg)
    if name == "oracle":
        lengths = cfg.scenario.lengths if cfg.scenario else LengthDistribution()
        return OracleControl(cfg, traffic, lengths, seed)
    if name == "predictive":
        raise ValueError(
            "control 'predictive' is driven by the predictors through the actuator, which is not built yet; "
            "use none, reactive or oracle"
        )
    raise ValueError(f"unknown control {name!r}; use none, reactive or oracle")
