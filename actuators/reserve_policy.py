"""The predictive policy with the reserve owned by the controller: pure (observations, forecasts and a time in,
decisions out), on the seam the control loop already calls (`decide`, `note_applied`, `note_rolled_back`).

`PredictivePolicy` (policy.py) pre-warms a pool by scaling it past the autoscaler, after the autoscaler has already
split the standby nodes by its own asks; swapped to act first, it sends them where KV pressure is, not where a node
serves the most urgent requests (issue 42: on the unannounced sale it scaled the long-context pool 5 -> 9 and urgent
goodput fell from 97.4 to 83.5 req/s).  Here the reserve is planned by `reserve.plan_reserve` (the value of one
more node to each pool) every tick and carried out as each pool's autoscaler floor and ceiling
(`set_pool_bounds`): the autoscaler then starts the earmarked nodes itself and can no longer give them to another
pool.  The policy's own pre-warm is off; admission, weights and their relaxing are the policy's as before.

What each arm is told about the future reaches the plan only through the `Outlook`s (the KV forecast's upper peak,
the traffic forecast's): the same decision logic for `scheduled`, `last-value`, `predict-linear`, `predictive` and
`perfect-forecast` (docs/control.md).
"""

from __future__ import annotations

import math
from typing import Any

from infercast.actuators.actions import Action, SetAdmission, SetPoolBounds
from infercast.actuators.admin import Observation, PoolState
from infercast.actuators.policy import Decision, Outlook, PredictivePolicy
from infercast.actuators.reserve import PoolNeed, ReservePlan, ReserveSettings, plan_reserve, standing_plan
from infercast.config import FleetConfig

#: the backends that can write a pool's autoscaler floor and ceiling (`set_pool_bounds`,
#: `actuators/backends/autoscaler.py`); the router backends start standby nodes themselves (`prewarm_pool`)
BOUNDS_BACKENDS = ("gateway", "envoy-gateway")


def reserve_blocker(cfg: FleetConfig) -> str:
    """Why the daemon cannot run the reserve plan on this fleet file ("" when it can).

    The plan needs what the twin's `LoopArm` has: the pools the autoscaler scales and the standby reservoir they
    draw on (`protections.autoscaler`, pools of the fleet file as the cluster runs them), and a backend that writes
    each of those pools' floor and ceiling (the `gateway` / `envoy-gateway` backend with an HPA or ScaledObject
    mapped for every one of them).  Any other backend refuses `set_pool_bounds`; there the daemon runs the
    predictive policy, whose own pre-warm (`prewarm_pool`, `scale_pool`) those backends do carry out."""
    a = cfg.protections.autoscaler
    if a is None:
        return "the fleet file has no protections.autoscaler (the pools an autoscaler scales and its reservoir)"
    missing = [p for p in (*a.pools, a.reservoir) if p not in cfg.pools]
    if missing:
        return (
            f"protections.autoscaler names {missing}, which are not pools of the fleet file (a context split is "
            "the twin's layout: on a cluster, list the pools it runs)"
        )
    b = cfg.actuator.backend
    kind = b.kind if b is not None else None
    if kind not in BOUNDS_BACKENDS:
        return (
            f"actuator.backend.kind {kind} cannot set autoscaler floors and ceilings (set_pool_bounds needs "
            f"{' or '.join(BOUNDS_BACKENDS)} with autoscalers)"
        )
    unmapped = [p for p in a.pools if p not in b.autoscalers]  # type: ignore[union-attr]
    if unmapped:
        return f"actuator.backend.autoscalers maps no HPA or ScaledObject to {unmapped}"
    return ""


def reserve_settings(cfg: FleetConfig) -> ReserveSettings:
    """The plan's settings from the fleet file: the autoscaler's KV target, the forecast trigger, and its two holds
    (release, switch) as long as the autoscaler's own scale-down window (a released node would otherwise be held by
    it anyway)."""
    a = cfg.protections.autoscaler
    window = cfg.dwell_seconds
    return ReserveSettings(
        kv_target=a.kv_target if a is not None else cfg.policy.target_kv,
        kv_trigger=cfg.thresholds.kv_forecast_trigger,
        release_hold_seconds=window,
        switch_hold_seconds=window,
    )


def need_of(p: PoolState, o: Outlook, base: int, lead: float = math.inf) -> PoolNeed:
    """A pool's signals for the reserve plan, from the loop's observation and outlook.  A forecast counts once what
    it warns of is within `lead` (a cold start and a margin): a node started earlier would only wait, paid for."""

    def num(x: float, default: float = 0.0) -> float:
        return x if math.isfinite(x) and x >= 0 else default

    # the last scrape's arrivals once a surge is here (they move first); else the rate over the same minute as
    # what it answered, so that a calm pool's noise between two windows is not read as unserved demand
    arrivals = num(o.arrivals_rps, num(o.rps_now)) if o.onset else num(o.rps_now)
    return PoolNeed(
        pool=p.name,
        base=base,
        replicas=p.replicas,
        ready=p.ready,
        kv_now=num(o.kv_now),
        kv_peak=num(o.kv_upper_peak) if o.kv_breach_eta_seconds <= lead else num(o.kv_now),
        arrivals_rps=arrivals,
        served_rps=num(o.served_rps),
        # the traffic forecast is a rate over a minute; the arrivals, over one scrape: the higher is the demand
        demand_peak_rps=max(arrivals, num(o.rps_upper_peak) if o.rps_surge_eta_seconds <= lead else 0.0),
        urgent_share=min(1.0, num(o.urgent_share, 1.0)),
        waiting=num(o.waiting),
        waiting_growth_rps=o.waiting_growth_rps if math.isfinite(o.waiting_growth_rps) else 0.0,
    )


class ReservePolicy(PredictivePolicy):
    name = "predictive"

    def __init__(self, cfg: FleetConfig, settings: ReserveSettings | None = None) -> None:
        super().__init__(cfg)
        a = cfg.protections.autoscaler
        self.settings = settings or reserve_settings(cfg)
        self.pools = tuple(a.pools) if a is not None else ()
        self.bases = {p: cfg.pools[p].nodes for p in self.pools}
        self.reserve = cfg.pools[a.reservoir].nodes if a is not None else 0
        # the bounds in force: the autoscaler's own until the loop applies a change (`note_applied`)
        self.plan = standing_plan(self.bases, self.reserve)
        self.applied: dict[str, tuple[int, int]] = self.plan.bounds()
        self._onset = False  # whether this tick's inputs mark a surge's onset

    def decide(self, now: float, fleet: Observation, outlook: dict[str, Outlook]) -> list[Decision]:
        self._onset = any(o.onset for o in outlook.values())
        return self._bounds(now, fleet, outlook) + super().decide(now, fleet, outlook)

    def _tighten(self, fleet, serving, outlook) -> list[Decision]:
        """At the onset, every remaining tightening step in one: a surge that is here is no forecast to wait out,
        and stepping at the guardrails' cooldown would spend its first minute at a looser level."""
        out = super()._tighten(fleet, serving, outlook)
        adm = [d for d in out if isinstance(d.action, SetAdmission)]
        if not adm or not self._onset or self.state.level + 1 >= len(self.state.levels):
            return out
        merged: dict[str, Any] = {}
        for step in self.state.levels[self.state.level :]:
            merged.update(step)
        d = adm[0]
        every = Decision(
            SetAdmission(**merged),
            f"{d.reason}; a surge is here: every step at once",
            {**d.inputs, "level": len(self.state.levels)},
        )
        return [every, *(x for x in out if x is not d)]  # the shared bucket's, where it comes too

    def _prewarm(self, fleet, serving, outlook) -> list[Decision]:
        return []  # the reserve plan starts nodes, through the autoscaler's floors (`_bounds`)

    def _bounds(self, now: float, fleet: Observation, outlook: dict[str, Outlook]) -> list[Decision]:
        pools = {p.name: p for p in fleet.pools}
        if not self.pools or any(name not in pools or name not in outlook for name in self.pools):
            return []
        lead = self._prewarm_lead()
        needs = {name: need_of(pools[name], outlook[name], self.bases[name], lead) for name in self.pools}
        self.plan = plan_reserve(now, needs, self.reserve, self.plan, self.settings)
        out = []
        for name in self.pools:
            floor, ceiling = self.plan.floors[name], self.plan.ceilings[name]
            before = self.applied.get(name)
            if before == (floor, ceiling):
                continue
            # raising a floor or lowering a ceiling protects a pool's share; the reverse lets it go
            intent = "protect" if before is None or floor > before[0] or ceiling < before[1] else "relax"
            out.append(
                Decision(
                    SetPoolBounds(name, floor, ceiling),
                    f"reserve plan: {self.plan.reasons[name]}; floor {floor}, ceiling {ceiling}",
                    self._plan_inputs(name, outlook[name], needs[name], self.plan),
                    intent,
                )
            )
        return out

    @staticmethod
    def _plan_inputs(name: str, o: Outlook, n: PoolNeed, plan: ReservePlan) -> dict[str, Any]:
        return {
            "pool": name,
            "earmark": plan.earmarks[name],
            "next_node_value_rps": plan.values.get(name),
            "arrivals_rps": round(n.arrivals_rps, 3),
            "served_rps": round(n.served_rps, 3),
            "kv_now": round(n.kv_now, 4),
            "kv_upper_peak": round(n.kv_peak, 4),
            "onset": o.onset,
        }

    def note_applied(self, d: Decision, result_previous) -> None:
        if isinstance(d.action, SetPoolBounds):
            self.applied[d.action.pool] = (d.action.floor, d.action.ceiling)
            return
        super().note_applied(d, result_previous)

    def note_rolled_back(self, d: Decision, restored: Action | None = None, now: float | None = None) -> None:
        # the controller's call (`controller.py`: the decision, the undo it applied, the time); with the old
        # one-argument signature the first rollback of a tightening stopped the loop with a TypeError
        if isinstance(d.action, SetPoolBounds):
            self.applied.pop(d.action.pool, None)  # not known now: the next plan is written again
            return
        super().note_rolled_back(d, restored, now)
