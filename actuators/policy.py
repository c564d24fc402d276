"""The predictive policy: forecasts and the fleet's state in, decisions out.  Pure (no I/O, no clock: `now` is given).

Per pool, an `Outlook` says what is live now and what the forecast's upper band does over the horizon.  When the
upper band crosses `thresholds.kv_forecast_trigger` (0.75: seed 000's 预测值超过75%), the policy acts a lead time
ahead of the crossing, each lever as early as it needs:

- **pre-warm** (a cold start + a margin ahead): start replicas of the pool from its reservoir, as many as bring the
  forecast peak down to `policy.target_kv` per replica, at most `max_replicas_step` more per decision;
- **tighten** (`tighten_lead_seconds` ahead, one step per decision): lower the memory admission threshold, shorten
  the gateway waits of normal and low work (protecting the urgent quota), and — where a pool serves short and long
  prompts together — lower the accepted context one step (seed 000: 24k -> 16k -> 8k), so short prompts are not
  stuck behind long ones;
- **shift weight** away from a pool forecast to breach towards a sibling pool serving the same prompts whose own
  forecast leaves headroom, never more than that headroom allows (the check seed 000's failover lacked);
- **relax** one step at a time, with hysteresis, once every forecast and live figure has stayed below the trigger
  minus `hysteresis` for `relax_hold_seconds`: admission back a step, weights back, pre-warmed replicas back one
  step.

The policy never scales below what the fleet had when it started acting, and keeps what it has done in
`self.state` so that relaxing undoes its own actions and nothing else.  The guardrails (bounds, cooldowns, change
budget, freezes, verification) are not here: `guardrails.py` judges every decision this returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from actuators.actions import Action, ScalePool, SetAdmission, SetPoolWeight
from actuators.admin import Observation, PoolState
from infercast.config import FleetConfig

LONG_CONTEXT_TOKENS = 8192  # the seeds' ">8k" class


@dataclass(frozen=True)
class Outlook:
    """One pool: live figures now and the forecast's upper band over the horizon."""

    pool: str
    kv_now: float  # KV-cache usage now (the fullest instance when it is known: what breaks first)
    kv_upper_peak: float  # the highest upper band over (now, now + horizon]
    breach_eta_seconds: float = math.inf  # when the upper band first crosses the trigger (inf: not in the horizon)


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    inputs: dict[str, Any] = field(default_factory=dict)


@dataclass
class PolicyState:
    level: int = 0  # admission tightening steps taken (0: as configured)
    levels: list[dict[str, Any]] = field(default_factory=list)  # the steps, fixed when tightening begins
    base_replicas: dict[str, int] = field(default_factory=dict)  # before the policy pre-warmed a pool
    base_weights: dict[str, float] = field(default_factory=dict)  # before the policy shifted a pool's weight
    base_admission: dict[str, Any] = field(default_factory=dict)  # before the first tightening
    calm_since: float | None = None  # since when everything has been below the relax level


def _serves(p: PoolState) -> tuple[bool, bool]:
    """(takes prompts up to 8k, takes longer ones)."""
    return p.min_context_tokens <= LONG_CONTEXT_TOKENS, (
        p.max_context_tokens is None or p.max_context_tokens > LONG_CONTEXT_TOKENS
    )


class PredictivePolicy:
    name = "predictive"

    def __init__(self, cfg: FleetConfig) -> None:
        self.cfg = cfg
        self.p = cfg.policy
        self.trigger = cfg.thresholds.kv_forecast_trigger
        self.cold_start = cfg.router.cold_start_seconds
        self.state = PolicyState()

    # --- the tick -------------------------------------------------------------------------------------------
    def decide(self, now: float, fleet: Observation, outlook: dict[str, Outlook]) -> list[Decision]:
        serving = [p for p in fleet.pools if not p.standby and p.name in outlook]
        pressed = {p.name for p in serving if outlook[p.name].breach_eta_seconds <= self._prewarm_lead()}
        out: list[Decision] = []
        out += self._prewarm(fleet, serving, outlook)
        out += self._tighten(fleet, serving, outlook)
        out += self._shift(serving, outlook, pressed)
        if not out:
            out += self._relax(now, fleet, serving, outlook)
        else:
            self.state.calm_since = None
        return out

    def _prewarm_lead(self) -> float:
        return self.cold_start + self.p.prewarm_margin_seconds

    # --- levers ---------------------------------------------------------------------------------------------
    def _prewarm(self, fleet: Observation, serving: list[PoolState], outlook: dict[str, Outlook]) -> list[Decision]:
        out = []
        for p in serving:
            o = outlook[p.name]
            if o.breach_eta_seconds > self._prewarm_lead() or p.spare <= 0:
                continue
            want = math.ceil(max(p.replicas, 1) * o.kv_upper_peak / self.p.target_kv - 1e-9)
            target = min(want, p.replicas + self.p.max_replicas_step, p.replicas + p.spare)
            if target <= p.replicas:
                continue
            self.state.base_replicas.setdefault(p.name, p.replicas)
            out.append(
                Decision(
                    ScalePool(p.name, target),
                    f"KV forecast upper band {o.kv_upper_peak:.2f} crosses {self.trigger:.2f} in "
                    f"{o.breach_eta_seconds:.0f} s, within a cold start ({self.cold_start:.0f} s) and a margin: "
                    f"{p.replicas} -> {target} replicas for {self.p.target_kv:.2f} per replica",
                    self._inputs(o, replicas=p.replicas, spare=p.spare),
                )
            )
        return out

    def _tighten(self, fleet: Observation, serving: list[PoolState], outlook: dict[str, Outlook]) -> list[Decision]:
        close = [p for p in serving if outlook[p.name].breach_eta_seconds <= self.p.tighten_lead_seconds]
        if not close:
            return []
        if self.state.level == 0:
            a = fleet.admission
            self.state.base_admission = {
                "memory_limit": a.memory_limit,
                "max_context_tokens": a.max_context_tokens,
                "normal_queue_seconds": a.normal_queue_seconds,
                "low_queue_seconds": a.low_queue_seconds,
            }
            self.state.levels = self._levels(fleet, mixed=any(all(_serves(p)) for p in close))
        if self.state.level >= len(self.state.levels):
            return []
        step = self.state.levels[self.state.level]
        self.state.level += 1
        worst = min(close, key=lambda p: outlook[p.name].breach_eta_seconds)
        o = outlook[worst.name]
        return [
            Decision(
                SetAdmission(**step),
                f"pool {worst.name}: KV forecast crosses {self.trigger:.2f} in {o.breach_eta_seconds:.0f} s "
                f"(within {self.p.tighten_lead_seconds:.0f} s): tighten admission, step {self.state.level}",
                self._inputs(o, level=self.state.level),
            )
        ]

    def _levels(self, fleet: Observation, mixed: bool) -> list[dict[str, Any]]:
        """The tightening steps: first memory and queues, then (for pools of mixed prompt lengths) the context."""
        p = self.p
        first = {
            "memory_limit": p.tightened_memory_limit,
            "normal_queue_seconds": p.tightened_normal_queue_seconds,
            "low_queue_seconds": p.tightened_low_queue_seconds,
        }
        current = fleet.admission.max_context_tokens or self.cfg.thresholds.context_reject_tokens
        contexts = [c for c in p.context_steps if c < current] if mixed else []
        if contexts:
            first["max_context_tokens"] = contexts[0]
        return [first] + [{"max_context_tokens": c} for c in contexts[1:]]

    def _shift(self, serving: list[PoolState], outlook: dict[str, Outlook], pressed: set[str]) -> list[Decision]:
        out = []
        for name in sorted(pressed):
            p = next(x for x in serving if x.name == name)
            siblings = [
                q
                for q in serving
                if q.name not in pressed and _serves(q) == _serves(p) and q.weight > 0
                and outlook[q.name].kv_upper_peak < self.trigger - self.p.hysteresis
            ]  # fmt: skip
            if not siblings or p.weight <= 0:
                continue
            q = min(siblings, key=lambda x: outlook[x.name].kv_upper_peak)
            oq = outlook[q.name]
            # move no more load onto q than its forecast headroom takes: weight in proportion to that headroom
            headroom = (self.trigger - oq.kv_upper_peak) / max(oq.kv_upper_peak, 0.05)
            moved = min(p.weight * self.p.max_weight_shift, q.weight * headroom)
            if moved <= 0.01 * p.weight:
                continue
            self.state.base_weights.setdefault(p.name, p.weight)
            self.state.base_weights.setdefault(q.name, q.weight)
            why = (
                f"pool {p.name} forecast to cross {self.trigger:.2f} in {outlook[name].breach_eta_seconds:.0f} s; "
                f"{q.name} has headroom (upper band {oq.kv_upper_peak:.2f})"
            )
            out.append(Decision(SetPoolWeight(p.name, round(p.weight - moved, 4)), why, self._inputs(outlook[name])))
            out.append(Decision(SetPoolWeight(q.name, round(q.weight + moved, 4)), why, self._inputs(oq)))
        return out

    def _relax(
        self, now: float, fleet: Observation, serving: list[PoolState], outlook: dict[str, Outlook]
    ) -> list[Decision]:
        st = self.state
        if not (st.level or st.base_replicas or st.base_weights):
            return []
        level = self.trigger - self.p.hysteresis
        calm = all(max(outlook[p.name].kv_upper_peak, outlook[p.name].kv_now) < level for p in serving)
        if not calm:
            st.calm_since = None
            return []
        if st.calm_since is None:
            st.calm_since = now
        if now - st.calm_since < self.p.relax_hold_seconds:
            return []
        st.calm_since = now  # the next step waits another hold
        why = f"every forecast and live KV figure below {level:.2f} for {self.p.relax_hold_seconds:.0f} s"
        if st.level:
            st.level -= 1
            back = self._levels_back(fleet)
            return (
                [Decision(SetAdmission(**back), f"{why}: admission back a step", {"level": st.level})] if back else []
            )
        if st.base_weights:
            out = [
                Decision(SetPoolWeight(name, w), f"{why}: weight back", {})
                for name, w in sorted(st.base_weights.items())
            ]
            st.base_weights.clear()
            return out
        for name, base in sorted(st.base_replicas.items()):
            p = fleet.pool(name)
            if p.replicas <= base:
                del st.base_replicas[name]
                continue
            target = max(base, p.replicas - self.p.max_replicas_step)
            if target == base:
                del st.base_replicas[name]
            return [Decision(ScalePool(name, target), f"{why}: pre-warmed replicas back a step", {"base": base})]
        return []

    def _levels_back(self, fleet: Observation) -> dict[str, Any]:
        """The admission one step looser: the previous level's values, or the ones before tightening."""
        base = {k: v for k, v in self.state.base_admission.items() if v is not None}
        if self.state.level == 0:
            return base
        merged = dict(base)
        for step in self.state.levels[: self.state.level]:
            merged.update(step)
        return merged

    @staticmethod
    def _inputs(o: Outlook, **extra: Any) -> dict[str, Any]:
        eta = o.breach_eta_seconds
        return {
            "pool": o.pool,
            "kv_now": round(o.kv_now, 4),
            "kv_upper_peak": round(o.kv_upper_peak, 4),
            "breach_eta_seconds": None if math.isinf(eta) else round(eta, 1),
            **extra,
        }
