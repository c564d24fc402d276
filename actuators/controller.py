"""The control loop: one `tick(now)` that the daemon (APScheduler, wall clock, a real backend), the twin's driver
(simulated clock, the twin's admin API) and the tests all call.  It never reads a clock; `now` is given.

Each tick, in order:
1. read the fleet's settings (`FleetAdmin.observe`) and the inputs (`InputSource.read`); freeze — decide nothing,
   say why — if either fails or the inputs are stale, NaN, infinite or negative;
2. verify what was applied a verification window ago: roll back (apply the backend's `previous`) an action that
   had no visible effect, or a shift or relaxation after which the pool got worse;
3. ask the policy for decisions and put each through the guardrails (bounds, cooldown, change budget);
4. apply the allowed ones with retries — or, in `advisory` mode and on a follower, only record them;
5. record everything in the audit trail (when one is given) and in `self.log`, and count it for the metrics.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from actuators.actions import Action, ScalePool, SetAdmission, SetPoolWeight, SetRateLimit
from actuators.admin import BackendError, FleetAdmin, Observation, Result, apply_with_retries
from actuators.guardrails import Guardrails, check_inputs
from actuators.inputs import InputError, Inputs, InputSource
from actuators.policy import Decision, PredictivePolicy
from infercast.config import FleetConfig

log = logging.getLogger(__name__)

Mode = Literal["advisory", "active"]
Outcome = Literal["applied", "advisory", "refused", "rolled_back", "failed"]


@dataclass
class Pending:
    """An applied action awaiting verification."""

    at: float
    due: float
    decision: Decision
    result: Result
    kv_at_decision: dict[str, float]
    audit_id: Any = None


@dataclass
class TickReport:
    at: float
    frozen: str | None = None
    outcomes: list[tuple[Decision, Outcome, str]] = field(default_factory=list)  # (decision, outcome, detail)
    verdicts: list[tuple[Decision, str, str]] = field(default_factory=list)  # (decision, verdict, reason)


class ControlLoop:
    def __init__(
        self,
        cfg: FleetConfig,
        admin: FleetAdmin,
        inputs: InputSource,
        *,
        policy: PredictivePolicy | None = None,
        mode: Mode = "active",
        audit: Any = None,
        is_leader: Callable[[], bool] = lambda: True,
        sleep: Callable[[float], None] | None = None,
    ) -> None:
        self.cfg = cfg
        self.admin = admin
        self.inputs = inputs
        self.policy = policy or PredictivePolicy(cfg)
        self.guard = Guardrails(cfg.guardrails)
        self.mode: Mode = mode
        self.audit = audit
        self.is_leader = is_leader
        self._sleep = sleep
        self.pending: list[Pending] = []
        self.frozen: str | None = None
        self.counts: Counter[tuple[str, str, str]] = Counter()  # (action kind, target, outcome) -> n
        self.last_set: dict[tuple[str, str], float] = {}  # ("weight"|"breaker", pool) -> value last applied
        self.log: list[dict] = []

    # --- the tick -------------------------------------------------------------------------------------------
    def tick(self, now: float) -> TickReport:
        report = TickReport(now)
        try:
            fleet = self.admin.observe()
            inputs = self.inputs.read(now, fleet)
        except (BackendError, InputError) as e:
            return self._freeze(report, f"{type(e).__name__}: {e}")
        fz = check_inputs(now, inputs.figures, inputs.ages, self.cfg.guardrails)
        if fz is not None:
            return self._freeze(report, fz.reason)
        if self.frozen is not None:
            log.info("actuator unfrozen at %.0f (was: %s)", now, self.frozen)
            self.frozen = None
        self._verify(now, fleet, inputs, report)
        decisions = self.policy.decide(now, fleet, inputs.outlook)
        for j in self.guard.judge(now, decisions, fleet):
            if not j.allowed:
                self._record(now, j.decision, "refused", j.reason, report)
            else:
                self._carry_out(now, j.decision, inputs, report)
        return report

    def _freeze(self, report: TickReport, reason: str) -> TickReport:
        if self.frozen != reason:
            log.warning("actuator frozen at %.0f: %s", report.at, reason)
        self.frozen = report.frozen = reason
        return report

    @property
    def acting(self) -> bool:
        """Whether decisions are applied now: active mode, the leadership, and not frozen."""
        return self.mode == "active" and self.frozen is None and self.is_leader()

    def _carry_out(self, now: float, d: Decision, inputs: Inputs, report: TickReport) -> None:
        if self.mode != "active" or not self.is_leader():
            why = "advisory mode" if self.mode != "active" else "not the leader"
            self._record(now, d, "advisory", why, report)
            return
        key = idempotency_key(now, d.action)
        audit_id = None
        if self.audit is not None:
            audit_id = self.audit.record_decision(now, key, d.action, {"reason": d.reason, **d.inputs})
        res = apply_with_retries(self.admin, d.action, sleep=self._sleep or (lambda s: None))
        if self.audit is not None and audit_id is not None:
            self.audit.mark_applied(audit_id, res)
        outcome: Outcome = (
            "applied" if res.status == "applied" else ("refused" if res.status == "refused" else "failed")
        )
        self._record(now, d, outcome, res.detail, report)
        if outcome == "applied":
            self.guard.record_applied(now, d.action)
            self.policy.note_applied(d, res.previous)
            self._remember(d.action)
            self.pending.append(Pending(now, now + self._window(d.action), d, res, self._kv(inputs), audit_id))

    def _window(self, a: Action) -> float:
        w = self.cfg.guardrails.verify_window_seconds
        return w + self.cfg.router.cold_start_seconds if isinstance(a, ScalePool) else w

    @staticmethod
    def _kv(inputs: Inputs) -> dict[str, float]:
        return {p: o.kv_now for p, o in inputs.outlook.items()}

    def _remember(self, a: Action) -> None:
        if isinstance(a, SetPoolWeight):
            self.last_set[("weight", a.pool)] = a.weight

    # --- verification -------------------------------------------------------------------------------------
    def _verify(self, now: float, fleet: Observation, inputs: Inputs, report: TickReport) -> None:
        due = [p for p in self.pending if p.due <= now + 1e-9]
        self.pending = [p for p in self.pending if p.due > now + 1e-9]
        for p in due:
            verdict, why = self._verdict(p, fleet, inputs)
            report.verdicts.append((p.decision, verdict, why))
            if self.audit is not None and p.audit_id is not None:
                self.audit.mark_verdict(p.audit_id, verdict, why, now)
            if verdict == "verified" or p.result.previous is None:
                self.log.append(self._row(now, p.decision, "verified" if verdict == "verified" else verdict, why))
                continue
            undo = Decision(p.result.previous, f"roll back ({verdict}): {why}", p.decision.inputs, "rollback")
            j = self.guard.judge(now, [undo], fleet, rollback=True)[0]
            if not j.allowed:
                self._record(now, undo, "refused", j.reason, report)
                continue
            res = apply_with_retries(self.admin, undo.action, sleep=self._sleep or (lambda s: None))
            outcome: Outcome = "rolled_back" if res.status == "applied" else "failed"
            self._record(now, undo, outcome, why if outcome == "rolled_back" else res.detail, report)
            if outcome == "rolled_back":
                self.guard.record_applied(now, undo.action)
                self.policy.note_rolled_back(p.decision)

    def _verdict(self, p: Pending, fleet: Observation, inputs: Inputs) -> tuple[str, str]:
        """`verified`, `no_effect` (the fleet does not show the change) or `worse` (after a shift or relaxation
        the pool's fullest instance crossed the trigger and is higher than when it was decided)."""
        a = p.decision.action
        seen = _visible(a, fleet)
        if seen is not None:
            return "no_effect", seen
        if p.decision.intent in ("shift", "relax"):
            trigger = self.cfg.thresholds.kv_forecast_trigger
            for pool, kv in self._kv(inputs).items():
                before = p.kv_at_decision.get(pool, math.nan)
                concerned = pool == a.target or a.target == "fleet"
                if concerned and math.isfinite(kv) and kv >= trigger and not kv <= before:
                    return "worse", f"{pool}: KV {before:.2f} -> {kv:.2f} (over {trigger:.2f}) after {a.describe()}"
        return "verified", "in effect"

    # --- records ----------------------------------------------------------------------------------------------
    def _record(self, now: float, d: Decision, outcome: Outcome, detail: str, report: TickReport) -> None:
        report.outcomes.append((d, outcome, detail))
        self.counts[(d.action.kind, d.action.target, outcome)] += 1
        self.log.append(self._row(now, d, outcome, detail))
        level = logging.INFO if outcome in ("applied", "rolled_back", "advisory") else logging.WARNING
        log.log(
            level, "%s %s (%s): %s%s", outcome, d.action.describe(), d.intent, d.reason, f"; {detail}" * bool(detail)
        )

    @staticmethod
    def _row(now: float, d: Decision, outcome: str, detail: str) -> dict:
        return {
            "t": now,
            "event": "decision",
            "outcome": outcome,
            "action": d.action.kind,
            **{k: v for k, v in d.action.to_dict().items() if k != "kind"},
            "intent": d.intent,
            "reason": d.reason,
            "detail": detail,
        }


def _visible(a: Action, fleet: Observation) -> str | None:
    """None when the fleet shows the action in effect, else what it shows instead."""
    try:
        if isinstance(a, ScalePool):
            p = fleet.pool(a.pool)
            return (
                None
                if p.replicas == a.replicas and p.ready >= a.replicas
                else (f"{a.pool}: {p.ready} ready of {p.replicas} replicas, asked for {a.replicas}")
            )
        if isinstance(a, SetPoolWeight):
            w = fleet.pool(a.pool).weight
            return None if math.isclose(w, a.weight, rel_tol=1e-6, abs_tol=1e-9) else f"{a.pool}: weight is {w:g}"
        if isinstance(a, SetAdmission):
            now = fleet.admission
            for k, v in a.to_dict().items():
                if k != "kind" and v is not None and getattr(now, k) != v:
                    return f"admission {k} is {getattr(now, k)!r}, not {v!r}"
            return None
        if isinstance(a, SetRateLimit):
            rps = fleet.rate_limits.get(a.lane)
            return None if rps == a.rps else f"lane {a.lane}: rate is {rps!r}"
    except KeyError as e:
        return str(e.args[0])
    return None


def idempotency_key(now: float, a: Action) -> str:
    """The same decision at the same time gets the same key: a restart that replays it is recognised."""
    body = json.dumps({"t": round(now, 3), **a.to_dict()}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()[:24]
