"""The in-process fleet twin as a `FleetAdmin`: the twin's router admin API, called directly.

The same calls an operator makes on the twin's admin HTTP API (`infercast/simulator/twin/surfaces.py`); used by the
driver that runs the controller in simulated time (`infercast twin run --control predictive`, the demo, the tests).
"""

from __future__ import annotations

from infercast.actuators.actions import (
    Action,
    PrewarmPool,
    ScalePool,
    SetAdmission,
    SetBreakerThreshold,
    SetPoolBounds,
    SetPoolWeight,
    SetRateLimit,
)
from infercast.actuators.admin import ActionRefused, Admission, Observation, PoolState, Result


class TwinAdmin:
    name = "twin"

    def __init__(self, fleet, autoscaler=None) -> None:
        self.fleet = fleet
        self.autoscaler = autoscaler  # arms.Hpa: what set_pool_bounds moves (None: refused)
        # every applied action: (time, the action, the action that restores what it replaced), for the run's
        # count of changes and flaps (`actuators/ledger.py`)
        self.history: list[tuple[float, Action, Action | None]] = []

    def observe(self) -> Observation:
        f = self.fleet
        r = f.router
        pools = []
        for name, pc in f.cfg.pools.items():
            nodes = r.pool_nodes[name]
            reservoir = r.reservoir.get(name)
            spare = sum(1 for n in r.pool_nodes[reservoir] if not n.up and n.up_at == float("inf")) if reservoir else 0
            pools.append(
                PoolState(
                    name=name,
                    version=pc.version,
                    replicas=r.pool_replicas(name),
                    ready=sum(1 for n in nodes if n.up and n.name not in r.draining),
                    weight=r.weights[name],
                    breaker_threshold_seconds=r.breaker_threshold[name],
                    standby=not r.enabled[name],
                    min_context_tokens=pc.min_context_tokens,
                    max_context_tokens=pc.max_context_tokens,
                    spare=spare,
                    reservoir=reservoir,
                )
            )
        a = r.admission()
        lanes = {name: (ln.bucket.rate if ln.bucket else None) for name, ln in zip(r.lane_names, r.lanes, strict=True)}
        return Observation(f.now, tuple(pools), Admission(**a), lanes)

    def apply(self, action: Action) -> Result:
        f = self.fleet
        r = f.router
        try:
            previous = self._previous(action)
            if isinstance(action, ScalePool):
                r.scale_pool(action.pool, action.replicas, f.now)
            elif isinstance(action, PrewarmPool):
                r.prewarm_pool(action.pool, f.now)
            elif isinstance(action, SetPoolWeight):
                r.set_pool_weight(action.pool, action.weight)
            elif isinstance(action, SetBreakerThreshold):
                r.set_breaker_threshold(action.pool, action.seconds)
            elif isinstance(action, SetAdmission):
                r.set_admission(**{k: v for k, v in action.to_dict().items() if k != "kind" and v is not None})
            elif isinstance(action, SetRateLimit):
                r.set_lane_rate(action.lane, action.rps, action.burst)
            elif isinstance(action, SetPoolBounds):
                if self.autoscaler is None:
                    raise ActionRefused(f"pool {action.pool}: no autoscaler runs on this twin (the arm has none)")
                self.autoscaler.set_bounds(action.pool, action.floor, action.ceiling)
            else:
                raise ActionRefused(f"the twin does not know {action.kind!r}")
        except (KeyError, ValueError) as e:
            raise ActionRefused(str(e.args[0]) if e.args else type(e).__name__) from None
        f.actions.append((f.now, action))
        self.history.append((f.now, action, previous))
        return Result("applied", previous=previous)

    def _previous(self, action: Action) -> Action | None:
        """The action that restores what `action` changes."""
        r = self.fleet.router
        if isinstance(action, ScalePool):
            return ScalePool(action.pool, r.pool_replicas(action.pool))
        if isinstance(action, SetPoolWeight):
            return SetPoolWeight(action.pool, r.weights[action.pool])
        if isinstance(action, SetBreakerThreshold):
            return SetBreakerThreshold(action.pool, r.breaker_threshold[action.pool])
        if isinstance(action, SetAdmission):
            now = r.admission()
            back = {k: now[k] for k, v in action.to_dict().items() if k != "kind" and v is not None}
            return SetAdmission(**back) if all(v is not None for v in back.values()) else None
        if isinstance(action, SetPoolBounds) and self.autoscaler is not None:
            return SetPoolBounds(action.pool, *self.autoscaler.bounds(action.pool))
        if isinstance(action, SetRateLimit):
            lane = r.lanes[r.lane_index(action.lane)]
            b = lane.bucket
            return SetRateLimit(action.lane, b.rate if b else None, b.burst if b else None)
        return None  # a pre-warm is undone by scaling the pool back, not by an inverse of its own
