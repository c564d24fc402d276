"""A failover that neither repeats nor forgets an action: the audit trail mirrored into the state beside the lease,
and a new leader that loads that state before its first tick.

Each replica has its own audit trail (on its own node), so the trail alone cannot tell a new leader what the old
one did.  `FailoverState` keeps the guardrail state in the lease's store (`infercast.actuators.state_store`):
- `FailoverAudit` is the audit trail the control loop writes through (it is the `Audit` otherwise): an acted
  decision is recorded in flight there, fenced by the lease, *before* it goes out -- when the store refuses (this
  replica was deposed, or cannot reach it) the decision is recorded `interrupted` and `AuditError` stops the apply,
  as for a trail that cannot be written; its answer moves it to `applied` (kept for the guardrails' horizon) or
  drops it.  An answer the store cannot take right now is kept and written at the next acting tick.
- `take_over(lead, now)` (the daemon calls it when this replica starts leading, before the tick): the stored
  applied actions this trail does not have are recorded in it as `applied` (the detail names the replica and
  fencing token they came from), so the loop's guardrails count them in their cooldowns and change budget as for
  any applied row of the trail; stored decisions in flight are recorded `decided` and resolved by restart recovery
  (`infercast.actuators.recovery.resolve_in_flight`: asked by idempotency key, never applied again).

Times are the deciding replica's (a time ahead of this replica's clock is recorded as `now`, so that it counts).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from typing import Any

from infercast.actuators.actions import Action
from infercast.actuators.admin import FleetAdmin, Result
from infercast.actuators.audit import Audit, AuditError
from infercast.actuators.leader import Leadership
from infercast.actuators.recovery import resolve_in_flight
from infercast.actuators.state_store import Deposed, Entry, StateError, StateStore

log = logging.getLogger(__name__)

#: answers kept for the store while it cannot take them (the oldest forgotten first: the next leader's recovery
#: still resolves their decisions by key)
MAX_PENDING = 1000


class FailoverState:
    def __init__(self, store: StateStore, audit: Audit, admin: FleetAdmin, horizon_seconds: float) -> None:
        self.store = store
        self.local = audit
        self.admin = admin
        self.horizon = max(3600.0, float(horizon_seconds))
        self.lead: Leadership | None = None  # the leadership the store's writes are fenced by (None: not acting)
        self._pending: OrderedDict[str, Entry | None] = OrderedDict()  # key -> applied entry, or None: not applied
        self._learnt: dict[str, Entry] = {}  # in-flight entries of the previous leader: their replica and token
        self.audit = FailoverAudit(audit, self)

    # --- leading ------------------------------------------------------------------------------------------------
    def take_over(self, lead: Leadership, now: float) -> str:
        """Load the stored state into the audit trail (see the module doc) under `lead`; a line saying what was
        learnt.  StateError when the state cannot be read or is not the actuator's: the caller does not act."""
        self.lead = lead
        self.flush(now)
        state = self.store.load()
        learnt = 0
        for e in state.applied:
            if e.at >= now - self.horizon and self.local.by_key(e.key) is None:
                self._import_applied(e, now)
                learnt += 1
        flying = 0
        for e in state.in_flight:
            d = self.local.by_key(e.key)
            self._learnt[e.key] = e
            if d is None:
                self.local.record_decision(min(e.at, now), e.key, e.action, {
                    "reason": f"in flight at {e.holder} (fencing token {e.token}) when it stopped leading; learnt "
                              f"from the cluster state ({self.store.where})"}, fencing_token=e.token)  # fmt: skip
                flying += 1
            elif d.status not in ("decided", "unknown"):  # this trail has the answer; the store missed it
                self._settle(e.key, self._entry(d.key, d.action, d.decided_at, d.fencing_token, d.id), d.status, now)
        resolved = resolve_in_flight(self.audit, self.admin, now, cause="failover", by_settings=True)
        self._learnt.clear()
        outcomes = ", ".join(f"#{r.decision.id} {r.decision.action.describe()}: {r.outcome}" for r in resolved)
        return (
            f"took over with fencing token {lead.fencing_token}: the cluster state ({self.store.where}) holds "
            f"{len(state.applied)} applied action(s) ({state.applied_in_hour(now)} in the last hour) and "
            f"{len(state.in_flight)} in flight; {learnt} applied and {flying} in flight learnt into the audit trail"
            + (f"; in flight resolved without applying: {outcomes}" if outcomes else "")
        )

    def follow(self) -> None:
        """Not acting (a follower, advisory, fenced): nothing is written under an old leadership."""
        self.lead = None

    def flush(self, now: float) -> None:
        """Write the answers the store could not take earlier (under the current leadership)."""
        while self._pending and self.lead is not None:
            key, applied = next(iter(self._pending.items()))
            try:
                self.store.settle(self.lead, key, applied, now - self.horizon)
            except StateError as e:
                log.warning("actuator: the guardrail state still cannot take the answer to %s: %s", key, e)
                return
            del self._pending[key]

    # --- what FailoverAudit calls -------------------------------------------------------------------------------
    def begin(self, key: str, action: Action, at: float, token: int | None, decision: int) -> None:
        if self.lead is None:
            raise Deposed(f"{self.store.where}: not written: this replica is not acting as the leader")
        self.store.begin(self.lead, self._entry(key, action, at, token, decision))

    def answered(self, decision_id: int, status: str, now: float) -> None:
        """The trail recorded an answer: the store moves the decision out of flight (to `applied` if it was)."""
        d = self.local.get(decision_id)
        if d is None:
            return
        entry = self._learnt.get(d.key) or self._entry(d.key, d.action, d.decided_at, d.fencing_token, d.id)
        self._settle(d.key, entry, status, now)

    def _settle(self, key: str, entry: Entry, status: str, now: float) -> None:
        applied = entry if status == "applied" else None
        self._pending[key] = applied
        self._pending.move_to_end(key)
        while len(self._pending) > MAX_PENDING:
            old, _ = self._pending.popitem(last=False)
            log.error("actuator: the guardrail state never took the answer to %s: forgotten here (the next leader "
                      "resolves it by its idempotency key)", old)  # fmt: skip
        if self.lead is None:
            return  # written when this replica acts again; meanwhile the next leader's recovery resolves it
        try:
            self.store.settle(self.lead, key, applied, now - self.horizon)
        except StateError as e:
            log.warning("actuator: the answer to %s is not in the guardrail state yet (retried at the next acting "
                        "tick): %s", key, e)  # fmt: skip
            return
        self._pending.pop(key, None)

    def _entry(self, key: str, action: Action, at: float, token: int | None, decision: int | None) -> Entry:
        holder = self.lead.holder if self.lead is not None and self.lead.holder else "?"
        return Entry(key, action, at, token, holder, decision)

    def _import_applied(self, e: Entry, now: float) -> None:
        at = min(e.at, now)
        ahead = f"; decided at {e.at:.3f} by its clock, {e.at - now:.1f} s ahead of this one" if e.at > now else ""
        detail = (
            f"applied by {e.holder} (fencing token {e.token}) before a failover; learnt from the cluster state "
            f"({self.store.where}){ahead}"
        )
        i = self.local.record_decision(at, e.key, e.action, {"reason": detail}, fencing_token=e.token)
        self.local.mark_applied(i, Result("applied", detail), at)


class FailoverAudit:
    """The audit trail (`infercast.actuators.audit.Audit`, every call passed through) that also keeps the decisions it
    acts on in the state beside the lease (`FailoverState`).  Advisory decisions and guardrail refusals stay local."""

    def __init__(self, audit: Audit, state: FailoverState) -> None:
        self._audit = audit
        self._state = state

    def __getattr__(self, name: str) -> Any:
        return getattr(self._audit, name)

    def record_decision(
        self, now: float, key: str, action: Action, inputs: Any, *, advisory: bool = False,
        fencing_token: int | None = None, undoes: int | None = None,
    ) -> int:  # fmt: skip
        i = self._audit.record_decision(
            now, key, action, inputs, advisory=advisory, fencing_token=fencing_token, undoes=undoes
        )
        if advisory:
            return i
        d = self._audit.get(i)
        if d is None or d.status != "decided":  # a known key, already answered: nothing goes out again
            return i
        try:
            self._state.begin(key, action, now, fencing_token, i)
        except StateError as e:
            why = f"not applied: the guardrail state beside the lease did not take it: {e}"
            try:
                self._audit.mark_interrupted(i, why, now)
            except AuditError:
                log.error("actuator: %s (and the audit trail could not record that)", why)
            raise AuditError(why) from None
        return i

    def mark_applied(self, decision_id: int, result: Result, now: float) -> None:
        self._audit.mark_applied(decision_id, result, now)
        self._state.answered(decision_id, result.status, now)

    def mark_interrupted(self, decision_id: int, reason: str, now: float) -> None:
        self._audit.mark_interrupted(decision_id, reason, now)
        self._state.answered(decision_id, "interrupted", now)

    def mark_reconciled(
        self, decision_id: int, status: Any, detail: str, now: float, previous: Action | None = None
    ) -> None:
        self._audit.mark_reconciled(decision_id, status, detail, now, previous)
        self._state.answered(decision_id, status, now)

    # mark_unknown: the answer was lost; the decision stays in flight in the store, for the next leader's recovery
