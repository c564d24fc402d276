"""The control loop: one `tick(now)` that the daemon (APScheduler, wall clock, a real backend), the twin's driver
(simulated clock, the twin's admin API) and the tests all call.  It never reads a clock; `now` is given.

Each tick, in order:
1. read the fleet's settings (`FleetAdmin.observe`) and the inputs (`InputSource.read`); freeze — decide nothing,
   say why — if either fails or the inputs are stale, NaN, infinite or negative;
2. verify what was applied a verification window ago: roll back (apply the backend's `previous`) an action that
   had no visible effect, or a shift or relaxation after which the pool got worse; an action a newer one has
   superseded (it changed one of the same settings since) is neither judged nor rolled back: its undo would put
   back an older state over the newer one;
3. ask the policy for decisions and put each through the guardrails (bounds, cooldown, change budget);
4. apply the allowed ones with retries — or, in `advisory` mode and on a follower, only record them; an apply
   whose answer was lost is read back from the target (`infercast.actuators.recovery.settle`): `applied`, `failed` (read
   back: not applied) or `unknown` (the target could not tell; reconciled on later ticks), never `failed` on faith;
5. record everything in the audit trail (when one is given: the guardrails' refusals too, with their reason, once
   per action and reason every 5 minutes) and in `self.log`, and count it for the metrics.  An audit trail that
   cannot be written (deleted under the daemon) is never acted past: the decision is not applied.

Firing Alertmanager notifications about a pool (the webhook's inbox) count as a breach warning for that pool
until they resolve.  `build_tick` plugs the loop into the daemon (`actuators/daemon_cli.py`): the daemon gives the
mode and the leadership per tick (`TickContext`), and each apply carries the decision's idempotency key and the
leader's fencing token (`actuators/stamp.py`).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from infercast.actuators.actions import Action, ScalePool, SetAdmission, SetPoolWeight, SetRateLimit
from infercast.actuators.admin import BackendError, FleetAdmin, Observation, Result, apply_with_retries
from infercast.actuators.audit import Audit, AuditError
from infercast.actuators.guardrails import Guardrails, input_freeze
from infercast.actuators.inputs import InputError, InputSource, LoopInputs, StoreInputs
from infercast.actuators.policy import Decision, Outlook, PredictivePolicy
from infercast.actuators.recovery import Settled, record_settled, settle
from infercast.actuators.reserve_policy import ReservePolicy, reserve_blocker
from infercast.actuators.stamp import Stamp, decision_key, stamped
from infercast.actuators.steadiness import settings_of
from infercast.actuators.webhook import alert_book
from infercast.config import FleetConfig

if TYPE_CHECKING:
    from infercast.actuators.parts import DaemonParts
    from infercast.actuators.tick import TickContext, TickReport
    from infercast.actuators.webhook import AlertEvent

log = logging.getLogger(__name__)

Mode = Literal["advisory", "active"]
Outcome = Literal["applied", "advisory", "refused", "rolled_back", "failed", "unknown"]
#: a guardrail refusal of the same action for the same reason is audited once in this long
REFUSAL_AUDIT_SECONDS = 300.0


@dataclass
class Pending:
    """An applied action awaiting verification."""

    at: float
    due: float
    decision: Decision
    result: Result
    kv_at_decision: dict[str, float]
    audit_id: int | None = None  # its row in the audit trail (None: no trail, or not recorded)


@dataclass
class LoopReport:
    at: float
    frozen: str | None = None
    frozen_code: str | None = None  # one of infercast.catalog.FREEZE_REASONS
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
        audit: Audit | None = None,
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
        # setting (actuators/steadiness.py) -> (when, what) it was last changed by an applied action or rollback:
        # an older action whose setting a newer one changed is superseded, never judged or rolled back
        self.changed: dict[str, tuple[float, str]] = {}
        self.log: list[dict] = []
        self._fed: dict[int, float] = {}  # audit ids of applied rows the guardrails count -> when decided
        self._refusals: dict[tuple[str, str], float] = {}  # (action, reason's words) -> when last audited
        # advisory proposals logged: (kind, target) -> the action last logged for it.  A proposal is logged when it
        # appears and when it changes, not every tick (an operator reading the log wants news, not the same three
        # proposals every 15 s)
        self._proposals: dict[tuple[str, str], str] = {}
        self._proposed_now: set[tuple[str, str]] = set()
        # the firing alerts about the fleet's pools: bounded, and each expires (actuators/webhook.py)
        self.alerting = alert_book(cfg)

    # --- the tick -------------------------------------------------------------------------------------------
    def tick(self, now: float, ctx: TickContext | None = None, alerts: Iterable[AlertEvent] = ()) -> LoopReport:
        """One round.  `ctx` (the daemon's `TickContext`) decides whether to act and stamps each apply; without
        it the loop's own mode and `is_leader` do.  `alerts`: Alertmanager notifications since the last tick."""
        self.alerting.note(alerts, now)
        report = LoopReport(now)
        try:
            fleet = self.admin.observe()
        except BackendError as e:
            return self._freeze(report, f"the fleet's admin API did not answer: {e}", "backend_down")
        try:
            inputs = self.inputs.read(now, fleet)
        except InputError as e:
            return self._freeze(report, str(e), "store_down")
        fz = input_freeze(now, inputs.figures, inputs.ages, self.cfg.guardrails)
        if fz is not None:
            return self._freeze(report, fz.reason, fz.code)
        if self.frozen is not None:
            log.info("actuator unfrozen at %.0f (was: %s)", now, self.frozen)
            self.frozen = None
        active = self._applies(ctx)
        self._sync_guardrails(now)
        self._verify(now, fleet, inputs, report, ctx, active)
        decisions = self.policy.decide(now, fleet, self._with_alerts(inputs.outlook))
        self._proposed_now = set()
        for j in self.guard.judge(now, decisions, fleet):
            if not j.allowed:
                self._record(now, j.decision, "refused", j.reason, report)
                self._audit_refusal(now, j.decision, j.reason)
            else:
                self._carry_out(now, j.decision, inputs, report, ctx, active)
        for gone in set(self._proposals) - self._proposed_now:  # no longer proposed: logged again if it comes back
            del self._proposals[gone]
        return report

    def _applies(self, ctx: TickContext | None) -> bool:
        """Whether this tick applies its decisions (else it records them as advisory): the daemon's context says
        (active mode and leading); without one, the loop's own mode and leader check.  A frozen tick has returned
        before this is asked; `applying_now` is the same question from outside, frozen included."""
        if ctx is not None:
            return bool(ctx.active)
        return self.mode == "active" and self.is_leader()

    def _freeze(self, report: LoopReport, reason: str, code: str) -> LoopReport:
        if self.frozen != reason:
            log.warning("actuator frozen at %.0f: %s", report.at, reason)
        self.frozen = report.frozen = reason
        report.frozen_code = code
        return report

    def reason_code(self, d: Decision) -> str:
        """The catalog's reason for a decision: an alert when a firing alert about its pool drove it."""
        if d.intent == "protect" and self.alerting.firing(d.inputs.get("pool", "")):
            return "alert"
        return REASON_OF_INTENT.get(d.intent, "other")

    # --- alerts as inputs ----------------------------------------------------------------------------------
    def _with_alerts(self, outlook: dict[str, Outlook]) -> dict[str, Outlook]:
        """A pool with a firing alert about it is warned of a breach now."""
        out = dict(outlook)
        for pool in self.alerting.firing_pools():
            if pool in out:
                out[pool] = dataclasses.replace(out[pool], kv_breach_eta_seconds=0.0)
        return out

    @property
    def applying_now(self) -> bool:
        """Whether a tick now would apply decisions: active mode, the leadership, and not frozen."""
        return self.mode == "active" and self.frozen is None and self.is_leader()

    def _carry_out(
        self, now: float, d: Decision, inputs: LoopInputs, report: LoopReport, ctx: TickContext | None, active: bool
    ) -> None:
        key = decision_key(now, d.action)
        audit_id, unaudited = self._audit_decision(now, key, d, active, ctx)
        if unaudited and active:  # the row is logged whole by the audit trail; an unrecorded action never goes out
            self._record(now, d, "failed", f"not applied: {unaudited}", report)
            return
        if not active:
            why = "advisory mode" if (ctx.mode if ctx is not None else self.mode) != "active" else "not the leader"
            self._record(now, d, "advisory", f"{why}; {unaudited}" if unaudited else why, report)
            return
        settled = self._apply(now, key, d, ctx, audit_id)
        res = settled.result
        outcome: Outcome = settled.status if settled.status in ("applied", "refused", "unknown") else "failed"
        self._record(now, d, outcome, res.detail, report)
        if outcome == "applied":
            self.guard.record_applied(now, d.action)
            self._counted(audit_id, now)
            self.policy.note_applied(d, res.previous)
            self._remember(d.action, now)
            self.pending.append(Pending(now, now + self._window(d.action), d, res, self._kv(inputs), audit_id))

    def _audit_decision(
        self, now: float, key: str, d: Decision, active: bool, ctx: TickContext | None, undoes: int | None = None
    ) -> tuple[int | None, str]:
        """Record `d` before it is carried out: (its audit id or None, why it is not in the trail or "")."""
        if self.audit is None:
            return None, ""
        try:
            token = getattr(ctx, "fencing_token", None)
            row = {"reason": d.reason, **d.inputs}
            extra = {"undoes": undoes} if undoes is not None else {}
            return self.audit.record_decision(
                now, key, d.action, row, advisory=not active, fencing_token=token, **extra
            ), ""
        except AuditError as e:
            return None, f"not in the audit trail: {e}"

    def _apply(self, now: float, key: str, d: Decision, ctx: TickContext | None, audit_id: int | None) -> Settled:
        """Send `d` with retries under its key (and the leader's token under the daemon: a retry is applied once),
        read a lost answer back instead of assuming it failed, and write what is true to the audit trail."""
        admin = stamped(self.admin, ctx.stamp(key) if ctx is not None else Stamp(key))
        res = apply_with_retries(admin, d.action, sleep=self._sleep or (lambda s: None))
        settled = settle(self.admin, key, d.action, res)
        if self.audit is not None and audit_id is not None:
            try:
                record_settled(self.audit, audit_id, settled, now)
            except AuditError:
                log.error("actuator: the answer to %s is not in the audit trail (logged above)", d.action.describe())
        return settled

    # --- the guardrails' memory and the audit trail ------------------------------------------------------------
    def _counted(self, audit_id: int | None, at: float) -> None:
        """An applied row the guardrails already count (the loop applied it itself)."""
        if audit_id is not None:
            self._fed[audit_id] = at

    def _sync_guardrails(self, now: float) -> None:
        """Feed the guardrails every application in the audit trail they have not counted: an action whose answer
        was lost and that a later tick (or `infercast.actuators.recovery`) settled as `applied`, and, on a loop's first
        tick, what was applied before a restart.  Each counts from when it was decided (when it was sent), so the
        cooldown and the hourly change budget see it as the loop would have had the answer come back."""
        if self.audit is None:
            return
        horizon = max(3600.0, self.cfg.guardrails.cooldown_seconds)
        try:
            rows = self.audit.applied_since(now - horizon, now)
        except AuditError:
            return  # a broken trail: the daemon runs advisory and says so
        for r in rows:
            if r.id in self._fed:
                continue
            self._fed[r.id] = r.decided_at
            self.guard.note_applied(r.decided_at, r.action)
            log.info(
                "actuator: counting %s (audit #%d, decided %.0f s ago, %s) in the cooldown and change budget",
                r.action.describe(), r.id, now - r.decided_at, _cut(r.detail, 120) or r.status,
            )  # fmt: skip
        for i in [i for i, t in self._fed.items() if t < now - horizon]:
            del self._fed[i]

    def _window(self, a: Action) -> float:
        w = self.cfg.guardrails.verify_window_seconds
        return w + self.cfg.router.cold_start_seconds if isinstance(a, ScalePool) else w

    @staticmethod
    def _kv(inputs: LoopInputs) -> dict[str, float]:
        return {p: o.kv_now for p, o in inputs.outlook.items()}

    def _remember(self, a: Action, now: float) -> None:
        if isinstance(a, SetPoolWeight):
            self.last_set[("weight", a.pool)] = a.weight
        for setting in settings_of(a):
            self.changed[setting] = (now, a.describe())

    def _superseded(self, p: Pending) -> str | None:
        """What changed a setting of `p`'s action after it was applied (None: nothing did).  Its effect can no
        longer be seen, and its undo would put back a value older than the newer change: judging it would find "no
        effect" and roll it back, undoing the newer state (a relaxed `max_context_tokens` 16000 set back to 8192 a
        minute later, with the policy at level 0 and nothing to relax it again)."""
        for setting in settings_of(p.decision.action):
            when, what = self.changed.get(setting, (-math.inf, ""))
            if when > p.at:
                return f"superseded: {setting} changed since by {what} at {when:.0f}; not judged, not rolled back"
        return None

    # --- verification -------------------------------------------------------------------------------------
    def _verify(
        self,
        now: float,
        fleet: Observation,
        inputs: LoopInputs,
        report: LoopReport,
        ctx: TickContext | None,
        active: bool,
    ) -> None:
        due = [p for p in self.pending if p.due <= now + 1e-9]
        self.pending = [p for p in self.pending if p.due > now + 1e-9]
        for p in due:
            superseded = self._superseded(p)
            verdict, why = ("superseded", superseded) if superseded else self._verdict(p, fleet, inputs)
            report.verdicts.append((p.decision, verdict, why))
            if self.audit is not None and p.audit_id is not None:
                try:
                    # the trail's verdicts: a change that made its pool worse is `rolled_back` (the reason says
                    # worse), as infercast_actuator_verdicts_total counts it
                    if verdict in ("verified", "no_effect"):
                        self.audit.mark_verdict(p.audit_id, verdict, why, now)
                    elif verdict == "superseded":  # its effect cannot be told apart from the newer change's
                        self.audit.mark_verdict(p.audit_id, "no_effect", why, now)
                    else:
                        self.audit.mark_verdict(p.audit_id, "rolled_back", f"{verdict}: {why}", now)
                except AuditError as e:
                    log.error("actuator: verdict on %s not in the audit trail: %s", p.decision.action.describe(), e)
            if verdict in ("verified", "superseded") or p.result.previous is None:
                self.log.append(self._row(now, p.decision, "verified" if verdict == "verified" else verdict, why))
                continue
            undo = Decision(p.result.previous, f"roll back ({verdict}): {why}", p.decision.inputs, "rollback")
            self._roll_back(now, undo, p, fleet, report, ctx, active, why)

    def _roll_back(
        self, now: float, undo: Decision, p: Pending, fleet: Observation, report: LoopReport, ctx: TickContext | None,
        active: bool, why: str,
    ) -> None:  # fmt: skip
        """Apply `undo` (the backend's previous setting) within the guardrails, and audit it as a decision of its
        own that names the one it undoes (`undoes`): applied, refused with the guardrails' reason, advisory, failed
        or unknown, a lost answer read back as for any apply."""
        key = decision_key(now, undo.action, salt="rollback")
        undoes = p.audit_id
        j = self.guard.judge(now, [undo], fleet, rollback=True)[0]
        if not j.allowed:
            self._record(now, undo, "refused", j.reason, report)
            if self.audit is not None:
                row = {"reason": undo.reason, **undo.inputs}
                try:
                    self.audit.record_refusal(now, key, undo.action, row, j.reason, undoes=undoes)
                except AuditError as e:
                    log.error("actuator: refused rollback %s not in the audit trail: %s", undo.action.describe(), e)
            return
        audit_id, unaudited = self._audit_decision(now, key, undo, active, ctx, undoes=undoes)
        if not active:
            self._record(now, undo, "advisory", "not acting" + f"; {unaudited}" * bool(unaudited), report)
            return
        if unaudited:  # never sent unrecorded, a rollback no more than any other action
            self._record(now, undo, "failed", f"not applied: {unaudited}", report)
            return
        settled = self._apply(now, key, undo, ctx, audit_id)
        outcome: Outcome = {"applied": "rolled_back", "unknown": "unknown", "refused": "refused"}.get(
            settled.status, "failed"
        )
        self._record(now, undo, outcome, why if outcome == "rolled_back" else settled.result.detail, report)
        if outcome == "rolled_back":
            self.guard.record_applied(now, undo.action)
            self._counted(audit_id, now)
            self._remember(undo.action, now)
            self.policy.note_rolled_back(p.decision, undo.action, now)

    def _verdict(self, p: Pending, fleet: Observation, inputs: LoopInputs) -> tuple[str, str]:
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
    def _audit_refusal(self, now: float, d: Decision, reason: str) -> None:
        """A guardrail refusal into the audit trail (so `infercast actuator log` shows it with its reason), once per
        action and reason (its numbers aside: a cooldown's seconds left change every tick) every 5 minutes."""
        if self.audit is None:
            return
        what = (json.dumps(d.action.to_dict(), sort_keys=True), re.sub(r"[0-9.]+", "#", reason))
        if now - self._refusals.get(what, -math.inf) < REFUSAL_AUDIT_SECONDS:
            return
        self._refusals[what] = now
        if len(self._refusals) > 1000:  # bounded: forget the oldest
            for k in sorted(self._refusals, key=self._refusals.__getitem__)[:500]:
                del self._refusals[k]
        try:
            self.audit.record_refusal(
                now, decision_key(now, d.action, salt="guardrails"), d.action, {"reason": d.reason, **d.inputs}, reason
            )
        except AuditError as e:
            log.error("actuator: guardrail refusal of %s not in the audit trail: %s", d.action.describe(), e)

    def _record(self, now: float, d: Decision, outcome: Outcome, detail: str, report: LoopReport) -> None:
        report.outcomes.append((d, outcome, detail))
        self.counts[(d.action.kind, d.action.target, outcome)] += 1
        self.log.append(self._row(now, d, outcome, detail))
        level = logging.INFO if outcome in ("applied", "rolled_back", "advisory") else logging.WARNING
        if outcome == "advisory":
            what, said = (d.action.kind, d.action.target), d.action.describe()
            self._proposed_now.add(what)
            if self._proposals.get(what) == said:  # proposed as before: said once already
                level = logging.DEBUG
            self._proposals[what] = said
            detail = f"{detail}; {self._bounds(now, d)}"
        log.log(
            level, "%s %s (%s): %s%s", outcome, d.action.describe(), d.intent, d.reason, f"; {detail}" * bool(detail)
        )

    def _bounds(self, now: float, d: Decision) -> str:
        """The guardrails that bound a proposal, as a reader of the advisory log needs them to judge it."""
        g = self.cfg.guardrails
        used = self.guard.budget_used(now)
        out = f"guardrails: one {d.action.kind} on {d.action.target} per {g.cooldown_seconds:.0f} s, "
        out += f"{used} of {g.change_budget_per_hour} changes an hour used"
        if isinstance(d.action, ScalePool):
            out += f", at most {g.max_replicas_step} replicas a step"
        if isinstance(d.action, SetPoolWeight) and self.guard.max_weight is not None:
            out += f", weights at most {self.guard.max_weight:g}"
        return out

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


def _cut(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 3] + "..."


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


# --- the daemon's seam -----------------------------------------------------------------------------------------
REASON_OF_INTENT = {"protect": "forecast", "shift": "forecast", "relax": "relax", "rollback": "rollback"}


class NoStore:
    """The loop's inputs when the daemon has no Prometheus configured: every tick freezes and says so."""

    def read(self, now: float, fleet: Observation) -> LoopInputs:
        raise InputError("no metric store: set predictor.prometheus_url in the fleet file")


def to_tick_report(r: LoopReport, loop: ControlLoop, now: float, answered: Callable[[], float]) -> TickReport:
    """The loop's report as the daemon publishes it (`infercast.actuators.tick.TickReport`: catalog values only)."""
    from infercast.actuators.tick import ActionOutcome, TickReport, VerdictOutcome

    actions = [
        ActionOutcome(d.action, outcome, loop.reason_code(d), now, answered(), detail)
        for d, outcome, detail in r.outcomes
    ]
    verdicts = []
    for d, verdict, why in r.verdicts:
        v = (
            verdict
            if verdict in ("verified", "no_effect")
            else "no_effect"
            if verdict == "superseded"
            else "rolled_back"
        )
        verdicts.append(VerdictOutcome(d.action, v, why))
    budget = loop.guard.budget_used(now) / loop.cfg.guardrails.change_budget_per_hour
    return TickReport(
        tuple(actions),
        tuple(verdicts),
        frozen=r.frozen is not None,
        freeze_reason=r.frozen_code if r.frozen is not None else None,
        budget_used={"fleet": budget},
        note=r.frozen or "",
    )


def daemon_policy(cfg: FleetConfig) -> PredictivePolicy:
    """The policy the daemon runs: the reserve plan (`reserve_policy.ReservePolicy`, what the twin's loop arms run)
    wherever the fleet file gives it an autoscaler with a reservoir and a backend that writes autoscaler floors and
    ceilings; else the predictive policy, and the log says why once at start (`reserve_policy.reserve_blocker`)."""
    why_not = reserve_blocker(cfg)
    if not why_not:
        log.info(
            "actuator: running the reserve plan (set_pool_bounds on %s)", ", ".join(cfg.protections.autoscaler.pools)
        )
        return ReservePolicy(cfg)
    level = logging.WARNING if cfg.protections.autoscaler is not None else logging.INFO
    log.log(level, "actuator: no reserve plan: %s; running the predictive policy (pre-warm and scale)", why_not)
    return PredictivePolicy(cfg)


@dataclass
class DaemonTick:
    """The daemon's `TickHook` over one `ControlLoop`: each call runs a tick with the alerts the webhook received
    since the last one and reports it as the daemon publishes it.  `loop` is the control loop itself, for tests and
    for the daemon's metrics of what was last set."""

    loop: ControlLoop
    parts: DaemonParts

    def __call__(self, now: float, ctx: TickContext) -> TickReport:
        inbox = self.parts.inbox
        report = self.loop.tick(now, ctx, inbox.drain() if inbox is not None else ())
        return to_tick_report(report, self.loop, now, self.parts.clock.now)


def build_tick(parts: DaemonParts) -> DaemonTick:
    """infercast's control loop for the daemon (`actuators/daemon_cli.py`, `DaemonParts` in): the policy
    (`daemon_policy`) and the guardrails on the forecasts and live figures in Prometheus, applied through the
    configured backend."""
    cfg = parts.config
    inputs = StoreInputs(parts.store, cfg, cfg.predictor.step_seconds) if parts.store is not None else NoStore()
    loop = ControlLoop(cfg, parts.admin, inputs, policy=daemon_policy(cfg), mode=parts.mode, audit=parts.audit)
    return DaemonTick(loop, parts)
