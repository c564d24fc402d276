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

from infercast.config import Autoscaler, FleetConfig
from infercast.twin.layout import protected_layout
from infercast.twin.traffic import LONG_CONTEXT_TOKENS


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
    kv_usage_max: float = 0.0  # the fullest node that is up
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
    fleet: Any = None  # a callable giving the fleet's control-plane state (`actuators.admin.Observation`)

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
    """`reactive`, plus infercast's predictive policy (`actuators.policy`) fed the true future instead of forecasts,
    a horizon ahead: the KV usage the same seed realises under `reactive` (the fullest instance of each pool: the
    world the policy sets out to change) and the load the traffic will offer each pool (prompt tokens per second
    over what its ready replicas prefill, the share of its capacity).  So `oracle - predictive` is the value of
    better forecasts."""

    name = "oracle"

    def __init__(self, cfg: FleetConfig, traffic, reference: dict[str, tuple[np.ndarray, np.ndarray]]) -> None:
        from actuators.policy import PredictivePolicy

        super().__init__(cfg)
        self.policy = PredictivePolicy(cfg)
        self.traffic = traffic
        self.reference = reference  # pool -> (t, fullest instance's KV usage) of the reactive run
        self.horizon = cfg.predictor.horizon_seconds
        self.trigger = cfg.thresholds.kv_forecast_trigger
        self.step = 5.0

    @staticmethod
    def _serves(p: PoolView) -> tuple[bool, bool]:
        return p.min_context_tokens <= LONG_CONTEXT_TOKENS, (
            p.max_context_tokens is None or p.max_context_tokens > LONG_CONTEXT_TOKENS
        )

    def load(self, p: PoolView, obs: Observation, t: float) -> float:
        """The share of its prefill capacity the traffic at t offers this pool (the pools taking traffic of the
        same prompt lengths share it; only pools that take traffic count: enabled, weight > 0)."""
        kind = self._serves(p)
        siblings = [q for q in obs.pools if q.enabled and q.weight > 0 and not q.standby and self._serves(q) == kind]
        capacity = sum(max(q.nodes_up, 1) * q.speed for q in siblings) * obs.prefill_tokens_per_second
        return self.traffic.token_rate_at(t, *kind) / capacity if capacity > 0 else 0.0

    def outlook(self, obs: Observation) -> dict:
        from actuators.policy import Outlook

        out = {}
        ahead = obs.now + np.arange(self.step, self.horizon + 1e-9, self.step)
        for p in obs.pools:
            if p.standby or not p.enabled:
                continue
            load = np.array([self.load(p, obs, t) for t in ahead])
            t, kv = self.reference.get(p.name, (np.empty(0), np.empty(0)))
            kv_ahead = np.interp(ahead, t, kv) if len(t) else np.zeros(len(ahead))
            pressure = np.maximum(load, np.nan_to_num(kv_ahead))
            over = np.flatnonzero(pressure >= self.trigger)
            eta = float(ahead[over[0]] - obs.now) if len(over) else math.inf
            out[p.name] = Outlook(p.name, p.kv_usage_max, float(pressure.max()), eta)
        return out

    def decide(self, obs: Observation) -> list[Action]:
        actions = super().decide(obs)
        if obs.fleet is None:
            return actions
        return actions + [d.action for d in self.policy.decide(obs.now, obs.fleet(), self.outlook(obs))]


def reference_series(timeseries) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """pool -> (t, fullest instance's KV usage) from a run's time series (what the oracle reads the future from)."""
    out = {}
    for pool, df in timeseries.groupby("pool"):
        df = df.sort_values("t")
        out[str(pool)] = (df["t"].to_numpy(dtype=float), df["kv_usage_max"].to_numpy(dtype=float))
    return out


def make_control(name: str, cfg: FleetConfig, traffic, seed: int = 0, reference=None) -> Control:
    if name == "none":
        return NoControl()
    if name == "basic":
        return BasicControl(cfg)
    if name == "reactive":
        return ReactiveControl(cfg)
    if name == "oracle":
        if reference is None:
            raise ValueError("control 'oracle' needs the reference run's series (run_scenario builds it)")
        return OracleControl(cfg, traffic, reference)
    raise ValueError(f"unknown control {name!r}; use none, basic, reactive or oracle")
