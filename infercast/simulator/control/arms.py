"""The arms the twin compares, differing only in the controller (and, for the seeds' fixes, the layout they ask for).

- `none`: the fleet as the file has it (seed 000's: its token bucket, a static 200 ms breaker, blind failover to a
  hot v3.5 pool, no admission control).
- `basic`: the token bucket alone, as `protections.rate_limit` says (seed 004's 基础限流).
- `reactive`: every fix the seeds ask for that needs no foresight, done as a competent operator would, on the
  protected layout (`infercast/simulator/twin/layout.py`): `Fleet.protect()` (requests checked at the gateway, > 24k
  tokens refused, quota lanes, seed 004's tiers, flow control, admission gated per request on the GPU memory it would
  bring, the batch released at 25% fragmentation, the dynamic timeout, failover only to a pool with headroom) and
  an autoscaler on current metrics with Kubernetes HPA's defaults (`Hpa`).  It acts on what *is*.
- `predictive`: `reactive` plus infercast's control loop (`controller.py`: policy and guardrails) on infercast's
  own forecasts, through the whole pipeline (twin -> exporter -> store -> predictors -> control loop), `driver.py`.
- `perfect-forecast`: `reactive` plus the same control loop fed the true future in place of the forecasts
  (`futures.TruthOverlay` over `inputs.TruthInputs`).  So `perfect-forecast - predictive` is the value of better
  forecasts (the forecast gap); `hindsight - perfect-forecast` what a better policy could add (the policy gap;
  `plans.py`).

Every arm acts through the twin's admin API (`backends/twin.py`) every `step_seconds` of simulated time.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable

from infercast.actuators.actions import ScalePool
from infercast.actuators.admin import Observation, apply_with_retries
from infercast.actuators.controller import ControlLoop
from infercast.actuators.inputs import InputSource
from infercast.actuators.policy import PredictivePolicy
from infercast.actuators.reserve_policy import ReservePolicy
from infercast.config import Autoscaler, FleetConfig
from infercast.fairshare import max_min_share
from infercast.simulator.twin.admin import TwinAdmin
from infercast.simulator.twin.fleet import Fleet, PoolLive
from infercast.simulator.twin.layout import protected_layout

STEP_SECONDS = 15.0  # the HPA's sync period and the forecasts' step: every arm acts on this cadence


class NoArm:
    name = "none"
    step_seconds = STEP_SECONDS

    def layout(self, cfg: FleetConfig) -> FleetConfig:
        return cfg

    def configure(self, fleet: Fleet) -> None:
        pass

    def tick(self, fleet: Fleet) -> None:
        pass


class BasicArm(NoArm):
    """Seed 004's basic rate limiting: the gateway's token bucket, and nothing else."""

    name = "basic"

    def __init__(self, cfg: FleetConfig) -> None:
        if cfg.protections.rate_limit is None:
            raise ValueError("arm 'basic' needs protections.rate_limit in the fleet file")

    def configure(self, fleet: Fleet) -> None:
        fleet.limit_rate()


class Hpa:
    """Kubernetes' HorizontalPodAutoscaler on current metrics, per pool (pure).

    Every sync: desired = ceil(sum of the metric over ready nodes / target) for each metric (mean KV-cache usage,
    waiting requests per node), the larger wins (HPA's multi-metric rule; a node still starting counts as 0, so
    scale-up does not double count it); no change within the tolerance; scale-up to the lowest recommendation of
    its stabilisation window (none by default: at once), scale-down to the highest of its own.  Bounds: the pool's
    own nodes, to those plus the reservoir's, shared in proportion to what each pool asks beyond what it has.

    `min_nodes` / `max_nodes` are the HPA's `minReplicas` / `maxReplicas` (a KEDA ScaledObject's
    `minReplicaCount` / `maxReplicaCount`), and `set_bounds` moves them as the `set_pool_bounds` action does on a
    cluster (`backends/autoscaler.py`): a raised floor is started at the next sync, ahead of any proportional share
    (it is what the pool is guaranteed), and a lowered ceiling scales the pool down to it at once, past the
    scale-down window (Kubernetes clamps the stabilised recommendation to the bounds, `normalizeDesiredReplicas`).
    One model of the autoscaler: the controller's reserve plan (`reserve.py`) reaches it only through these."""

    def __init__(self, a: Autoscaler, min_nodes: dict[str, int], max_nodes: dict[str, int]) -> None:
        self.a = a
        self.min_nodes, self.max_nodes = min_nodes, max_nodes
        self.next_sync = 0.0
        self.recommendations: dict[str, deque[tuple[float, int]]] = {p: deque() for p in a.pools}

    def desired(self, p: PoolLive) -> int:
        a = self.a
        current = p.replicas
        if p.nodes_up == 0 or current == 0:
            return current
        wants = []
        for total, target in ((p.kv_usage * p.nodes_up, a.kv_target), (float(p.waiting), a.waiting_target)):
            ratio = total / (target * current)  # the metric's mean over all replicas / its target
            wants.append(current if abs(ratio - 1.0) <= a.tolerance else math.ceil(total / target - 1e-9))
        return max(wants)

    def set_bounds(self, pool: str, floor: int, ceiling: int) -> tuple[int, int]:
        """Set a pool's floor and ceiling; returns the ones before."""
        if pool not in self.min_nodes:
            raise KeyError(f"the autoscaler does not scale pool {pool!r} (it scales {sorted(self.min_nodes)})")
        if not 0 <= floor <= ceiling:
            raise ValueError(f"pool {pool}: bounds must be 0 <= floor <= ceiling, got {floor}, {ceiling}")
        before = (self.min_nodes[pool], self.max_nodes[pool])
        self.min_nodes[pool], self.max_nodes[pool] = int(floor), int(ceiling)
        return before

    def bounds(self, pool: str) -> tuple[int, int]:
        return self.min_nodes[pool], self.max_nodes[pool]

    def due(self, now: float) -> bool:
        return now >= self.next_sync - 1e-9

    def decide(
        self, now: float, live: dict[str, PoolLive], spare: int, floors: dict[str, int] | None = None
    ) -> dict[str, int]:
        """Replica counts to set now (only pools whose count changes); `floors` are lower bounds another policy
        asks for (AIBrix's `max(reactive, predicted)`), which the stabilisation window remembers like its own."""
        if not self.due(now):
            return {}
        self.next_sync = now + self.a.sync_seconds
        wants = {}
        for name in self.a.pools:
            want = max(self.desired(live[name]), (floors or {}).get(name, 0))
            wants[name] = int(min(self.max_nodes[name], max(self.min_nodes[name], want)))
        asks = {n: max(0, w - live[n].replicas) for n, w in wants.items()}
        if sum(asks.values()) > spare:
            # a floor (minReplicas) is guaranteed: what brings a pool up to it is granted first, the rest of the
            # spare nodes shared in proportion to the asks beyond it
            owed = {n: min(asks[n], max(0, self.min_nodes[n] - live[n].replicas)) for n in asks}
            if sum(owed.values()) > spare:
                # plain ints: a numpy integer is no `ScalePool` replica count (the action refuses it)
                owed = {n: int(k) for n, k in zip(owed, max_min_share(list(owed.values()), spare), strict=True)}
            left = spare - sum(owed.values())
            rest = {n: asks[n] - owed[n] for n in asks}
            total = sum(rest.values())
            grant = {n: int(left * k // total) if total else 0 for n, k in rest.items()}
            if total:
                for n in sorted(rest, key=lambda n: -(left * rest[n] / total - grant[n]))[: left - sum(grant.values())]:
                    grant[n] += 1
            wants = {n: w - asks[n] + owed[n] + grant[n] for n, w in wants.items()}
        up_s, down_s = self.a.scale_up_stabilization_seconds, self.a.scale_down_stabilization_seconds
        out = {}
        for name in self.a.pools:
            rec = self.recommendations[name]
            rec.append((now, wants[name]))
            while rec and rec[0][0] < now - max(up_s, down_s):
                rec.popleft()
            current = live[name].replicas
            # Kubernetes' stabilisation windows: a scale-up goes only as high as the lowest recommendation of the
            # scale-up window (0 s by default: at once), a scale-down only as low as the highest of the scale-down
            # window
            if wants[name] > current:
                target = max(current, min(r for t, r in rec if t >= now - up_s - 1e-9))
            else:
                target = min(current, max(r for t, r in rec if t >= now - down_s - 1e-9))
            # the bounds as they are now, past the windows: a ceiling lowered since a recommendation was made
            target = min(target, self.max_nodes[name]) if target > self.max_nodes[name] else target
            if target != current:
                out[name] = target
        return out


class ReactiveArm(NoArm):
    """The seeds' fixes with no foresight: the protected layout, the protections switched on, an HPA."""

    name = "reactive"

    def __init__(self, cfg: FleetConfig) -> None:
        self.cfg = cfg
        laid = protected_layout(cfg)
        a = cfg.protections.autoscaler
        self.hpa = None
        if a is not None:
            spare = laid.pools[a.reservoir].nodes
            self.hpa = Hpa(
                a, {p: laid.pools[p].nodes for p in a.pools}, {p: laid.pools[p].nodes + spare for p in a.pools}
            )
        self.admin: TwinAdmin | None = None

    def layout(self, cfg: FleetConfig) -> FleetConfig:
        return protected_layout(cfg)

    def configure(self, fleet: Fleet) -> None:
        fleet.protect()
        self.admin = TwinAdmin(fleet, self.hpa)

    def floors(self) -> dict[str, int]:
        return {}

    def tick(self, fleet: Fleet) -> None:
        if self.hpa is None or not self.hpa.due(fleet.now):
            return
        spare = self._spare(self.admin.observe())
        for pool, n in self.hpa.decide(fleet.now, fleet.live(), spare, self.floors()).items():
            apply_with_retries(self.admin, ScalePool(pool, n))

    def _spare(self, fleet: Observation) -> int:
        return max((p.spare for p in fleet.pools if p.name in self.hpa.a.pools), default=0)


class LoopArm(ReactiveArm):
    """`reactive` plus infercast's control loop, fed by the inputs `make_inputs` builds once the fleet exists.

    The loop owns the reserve (`reserve_policy.ReservePolicy`): it ticks *before* the autoscaler, writing each
    pool's floor and ceiling, so that the autoscaler's sync in the same tick already sends the standby nodes where
    the plan puts them.  `reserve=False` is the ablation: the predictive policy's own pre-warm, after the autoscaler
    has split the nodes by its asks (the loop as it was before issue 42)."""

    def __init__(
        self, cfg: FleetConfig, name: str, make_inputs: Callable[[Fleet], InputSource], *, reserve: bool = True
    ) -> None:
        super().__init__(cfg)
        self.name = name
        self.make_inputs = make_inputs
        self.reserve = reserve and self.hpa is not None
        laid = protected_layout(cfg)
        self.policy = ReservePolicy(laid) if self.reserve else PredictivePolicy(laid)
        self.loop: ControlLoop | None = None

    def configure(self, fleet: Fleet) -> None:
        super().configure(fleet)
        self.loop = ControlLoop(fleet.cfg, self.admin, self.make_inputs(fleet), policy=self.policy)

    def floors(self) -> dict[str, int]:
        return self.policy.floors()

    def tick(self, fleet: Fleet) -> None:
        if self.reserve:  # the plan first, so the autoscaler's reaction in this tick follows it
            self.loop.tick(fleet.now)
            super().tick(fleet)
        else:
            super().tick(fleet)
            self.loop.tick(fleet.now)
