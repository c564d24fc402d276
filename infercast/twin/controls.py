"""Controls the twin can be run under.  Pure: an observation and a time in, a list of actions out.

- `none`: the fleet as it was (seed 000's: its token bucket, a static 200 ms breaker, blind failover to a hot
  v3.5 pool, no admission control).
- `basic`: the token bucket alone, set as `protections.rate_limit` says (seed 004's 基础限流).
- `reactive`: every fix the seeds ask for that needs no foresight, done as a competent operator would, on the
  protected layout (`layout.py`: pools isolated by context length, v3.5 kept cold): requests checked at the gateway
  (payload, > 24k tokens refused), a quota lane per stream that has one (the flash-sale customer's 专用配额通道)
  beside everyone's token bucket, seed 004's tiers (urgent at once, normal queued, low when idle), admission gated
  per request on the GPU memory it would bring (80%), the batch released at 25% fragmentation, the dynamic timeout
  `200 ms x max(1, ctx/4000) x min(3, qps/3000)`, failover only to a pool with headroom, and an autoscaler on
  current metrics with Kubernetes HPA's defaults.  It acts on what *is*, never on what is coming.
- `oracle`: `reactive` plus the one lever that needs foresight here: it reads the offered load a cold start ahead
  from the traffic itself and starts standby nodes so they are up when the load lands.

Actions are applied by the fleet through the router's admin API — the same calls an operator or the actuator
makes on a real router.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from infercast.config import Autoscaler, FleetConfig, LengthDistribution
from infercast.twin.layout import protected_layout
from infercast.twin.traffic import LONG_CONTEXT_TOKENS, sample_lengths


@dataclass(frozen=True)
class Action:
    # set_policy | set_node_control | set_tiers | set_rate_limit | set_quota_lane | prewarm | scale | set_weight |
    # set_breaker_threshold
    kind: str
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
    kv_usage: float = 0.0  # mean over the nodes that are up
    waiting: int = 0  # requests waiting on the pool's nodes
    weight: float = 1.0
    min_context_tokens: int = 0
    max_context_tokens: int | None = None

    @property
    def replicas(self) -> int:
        return self.nodes_up + self.nodes_starting


@dataclass(frozen=True)
class Observation:
    now: float
    pools: tuple[PoolView, ...]
    prefill_tokens_per_second: float
    cold_start_seconds: float

    def pool(self, name: str) -> PoolView:
        return next(p for p in self.pools if p.name == name)


class Control(Protocol):
    name: str

    def layout(self, cfg: FleetConfig) -> FleetConfig: ...

    def decide(self, obs: Observation) -> list[Action]: ...


class NoControl:
    name = "none"

    def layout(self, cfg: FleetConfig) -> FleetConfig:
        return cfg

    def decide(self, obs: Observation) -> list[Action]:
        return []


class _SetOnce:
    """Applies `settings()` at the first decision, then nothing more."""

    def __init__(self) -> None:
        self._done = False

    def settings(self) -> list[Action]:
        return []

    def decide(self, obs: Observation) -> list[Action]:
        if self._done:
            return []
        self._done = True
        return self.settings()


class BasicControl(_SetOnce):
    """Seed 004's basic rate limiting: the gateway's token bucket, and nothing else."""

    name = "basic"

    def __init__(self, cfg: FleetConfig) -> None:
        super().__init__()
        self.bucket = cfg.protections.rate_limit
        if self.bucket is None:
            raise ValueError("control 'basic' needs protections.rate_limit in the fleet file")

    def layout(self, cfg: FleetConfig) -> FleetConfig:
        return cfg

    def settings(self) -> list[Action]:
        b = self.bucket
        return [Action("set_rate_limit", args={"rps": b.rps, "burst": b.depth, "queue_seconds": b.queue_seconds})]


class Hpa:
    """Kubernetes' HorizontalPodAutoscaler on current metrics, per pool (pure).

    Every `sync_seconds`: desired = ceil(sum of the metric over ready nodes / target) for each metric (mean KV-cache
    usage, waiting requests per node), the larger wins (HPA's multi-metric rule; a node still starting counts as
    0, so scale-up does not double count it); no change within the 10% tolerance; scale-up at once, scale-down to
    the highest recommendation of the stabilisation window.  Bounds: the pool's own nodes to those plus the
    reservoir's."""

    def __init__(self, a: Autoscaler, min_nodes: dict[str, int], max_nodes: dict[str, int]) -> None:
        self.a = a
        self.min_nodes, self.max_nodes = min_nodes, max_nodes
        self.next_sync = 0.0
        self.recommendations: dict[str, deque[tuple[float, int]]] = {p: deque() for p in a.pools}

    def desired(self, p: PoolView) -> int:
        a = self.a
        current = p.replicas
        if p.nodes_up == 0 or current == 0:
            return current
        wants = []
        for total, target in ((p.kv_usage * p.nodes_up, a.kv_target), (float(p.waiting), a.waiting_target)):
            ratio = total / (target * current)  # the metric's mean over all replicas / its target
            wants.append(current if abs(ratio - 1.0) <= a.tolerance else math.ceil(total / target - 1e-9))
        return max(wants)

    def due(self, now: float) -> bool:
        return now >= self.next_sync - 1e-9

    def decide(self, obs: Observation, floors: dict[str, int] | None = None) -> dict[str, int]:
        """Replica counts to set now (only pools whose count changes); `floors` are lower bounds another policy
        asks for (AIBrix's `max(reactive, predicted)`), which the stabilisation window remembers like its own."""
        if not self.due(obs.now):
            return {}
        self.next_sync = obs.now + self.a.sync_seconds
        wants = {}
        for name in self.a.pools:
            p = obs.pool(name)
            want = max(self.desired(p), (floors or {}).get(name, 0))
            wants[name] = int(min(self.max_nodes[name], max(self.min_nodes[name], want)))
        # the reservoir's spare nodes, shared in proportion to what each pool asks beyond what it has
        spare = obs.pool(self.a.reservoir).nodes
        asks = {n: max(0, w - obs.pool(n).replicas) for n, w in wants.items()}
        if sum(asks.values()) > spare:
            total = sum(asks.values())
            grant = {n: int(spare * a // total) for n, a in asks.items()}
            for n in sorted(asks, key=lambda n: -(spare * asks[n] / total - grant[n]))[: spare - sum(grant.values())]:
                grant[n] += 1
            wants = {n: w - asks[n] + grant[n] for n, w in wants.items()}
        out = {}
        for name in self.a.pools:
            p = obs.pool(name)
            rec = self.recommendations[name]
            want = wants[name]
            rec.append((obs.now, want))
            while rec and rec[0][0] < obs.now - self.a.scale_down_stabilization_seconds:
                rec.popleft()
            current = p.replicas
            # no scale-up stabilisation; a scale-down goes only as low as the window's highest recommendation
            target = want if want > current else min(current, max(r for _, r in rec))
            if target != current:
                out[name] = target
        return out


class ReactiveControl(_SetOnce):
    """The seeds' fixes with no foresight: settings applied at the start, then the autoscaler on current metrics."""

    name = "reactive"

    def __init__(self, cfg: FleetConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.th = cfg.thresholds
        self.pr = cfg.protections
        laid = protected_layout(cfg)
        a = self.pr.autoscaler
        self.hpa = None
        if a is not None:
            spare = laid.pools[a.reservoir].nodes
            self.hpa = Hpa(
                a, {p: laid.pools[p].nodes for p in a.pools}, {p: laid.pools[p].nodes + spare for p in a.pools}
            )

    def layout(self, cfg: FleetConfig) -> FleetConfig:
        return protected_layout(cfg)

    def settings(self) -> list[Action]:
        th, pr = self.th, self.pr
        tiers = pr.tiers
        actions = [
            Action(
                "set_policy",
                args={
                    "reject_context_tokens": th.context_reject_tokens,
                    "validate_requests": pr.validate_requests,
                    "dynamic_timeout": True,
                    "memory_pressure_limit": th.memory_breaker,
                    "failover_headroom": pr.failover_headroom,
                    "tier_queue_seconds": (0.0, tiers.normal_queue_seconds, tiers.low_queue_seconds),
                    "cold_standby": frozenset(pr.cold_standby),
                    "flow_control_waiting": pr.flow_control_waiting,
                },
            ),
            Action(
                "set_node_control",
                args={"stop_admit_memory": th.memory_breaker, "release_fragmentation": th.fragmentation_release},
            ),
            Action("set_tiers", args={"low_idle_memory": tiers.low_idle_memory}),
        ]
        if pr.rate_limit is not None:
            b = pr.rate_limit
            actions.append(
                Action("set_rate_limit", args={"rps": b.rps, "burst": b.depth, "queue_seconds": b.queue_seconds})
            )
        for stream, b in pr.quota_lanes.items():
            actions.append(
                Action(
                    "set_quota_lane",
                    args={"stream": stream, "rps": b.rps, "burst": b.depth, "queue_seconds": b.queue_seconds},
                )
            )
        return actions

    def floors(self, obs: Observation) -> dict[str, int]:
        """Lower bounds for the autoscaler (none: it acts on current metrics only)."""
        return {}

    def scale(self, obs: Observation) -> list[Action]:
        if self.hpa is None or not self.hpa.due(obs.now):
            return []
        return [
            Action("scale", pool=p, args={"replicas": n}) for p, n in self.hpa.decide(obs, self.floors(obs)).items()
        ]

    def decide(self, obs: Observation) -> list[Action]:
        return super().decide(obs) + self.scale(obs)


class OracleControl(ReactiveControl):
    """`reactive`, plus standby nodes started a cold start ahead of the load, read from the traffic's future."""

    name = "oracle"
    utilisation_target = 0.80  # plan for this share of a node's prefill throughput
    margin_seconds = 30.0  # start a little more than a cold start ahead

    def __init__(self, cfg: FleetConfig, traffic, lengths: LengthDistribution, seed: int = 0) -> None:
        super().__init__(cfg)
        self.traffic = traffic
        rng = np.random.default_rng(seed + 7919)
        short, _ = sample_lengths(20_000, 0.0, lengths, rng)
        long, _ = sample_lengths(20_000, 1.0, lengths, rng)
        self.mean_short, self.mean_long = float(short.mean()), float(long.mean())

    def demand_nodes(self, p: PoolView, obs: Observation, t: float) -> float:
        """Nodes of this pool the offered load at t needs, from the rate and long-context share the traffic will
        have then; only pools that take traffic (enabled, weight > 0) share it."""
        rate, share = self.traffic.rate_at(t), self.traffic.long_share_at(t)
        takes_short = p.min_context_tokens <= LONG_CONTEXT_TOKENS
        takes_long = p.max_context_tokens is None or p.max_context_tokens > LONG_CONTEXT_TOKENS
        siblings = [
            q
            for q in obs.pools
            if q.enabled and q.weight > 0 and not q.standby and q.speed > 0
            and (q.min_context_tokens <= LONG_CONTEXT_TOKENS) == takes_short
            and (q.max_context_tokens is None or q.max_context_tokens > LONG_CONTEXT_TOKENS) == takes_long
        ]  # fmt: skip
        tokens = rate * ((1 - share) * self.mean_short * takes_short + share * self.mean_long * takes_long)
        per_node = self.utilisation_target * obs.prefill_tokens_per_second * p.speed
        return tokens / per_node / max(1, len(siblings))

    def floors(self, obs: Observation) -> dict[str, int]:
        """Nodes each autoscaled pool will need a cold start (and a margin) from now."""
        ahead = obs.now + obs.cold_start_seconds + self.margin_seconds
        return {name: math.ceil(self.demand_nodes(obs.pool(name), obs, ahead)) for name in self.hpa.a.pools}


def make_control(name: str, cfg: FleetConfig, traffic, seed: int = 0) -> Control:
    if name == "none":
        return NoControl()
    if name == "basic":
        return BasicControl(cfg)
    if name == "reactive":
        return ReactiveControl(cfg)
    if name == "oracle":
        lengths = cfg.scenario.lengths if cfg.scenario else LengthDistribution()
        return OracleControl(cfg, traffic, lengths, seed)
    raise ValueError(f"unknown control {name!r}; use none, basic, reactive or oracle")
