"""After a restart (a deploy, a crash, `kill -9` mid-action): resolve what the audit trail left in flight.

A decision recorded but never answered may or may not have reached the fleet.  It is never applied again -- the
fleet may have moved on, and the loop will decide afresh from what it observes now.  What is recorded instead:
- the backend remembers the idempotency key (HTTP, Redis, file: `KeyedAdmin.lookup`): the answer it gave then
  (`applied`, with its undo action, so verification and rollback still work), or `interrupted` when the key was
  never applied ("not applied before the restart; not repeated");
- the backend cannot tell (Kubernetes, the in-process twin): `interrupted`, saying so;
- the backend cannot be asked right now: left in flight, to resolve at the next start (reported, not guessed).

A lost answer (`apply_with_retries` gave up: every attempt timed out or was reset, and the router may well have
applied the action) is not recorded as `failed` on faith: `settle` reads the target back at once -- by the
idempotency key on a backend that remembers keys, else by whether the fleet's settings show the action -- and the
audit trail says what is true: `applied` (with the undo action when the backend kept it), `failed` with
"read back: not applied", or `unknown` when the target could not be read either.  `reconcile_unknown` settles the
`unknown` rows on the daemon's next ticks and at start (`resolve_in_flight` does both).

A record the backend keeps under a key that is not what the actuator wrote (edited or forged in the store: a
backend's `lookup` may then raise anything) is no answer either way: the read-back says `unknown` and restart
recovery leaves the decision unresolved, each naming the record; neither raises.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Literal

from infercast.actuators.actions import (
    Action,
    PrewarmPool,
    ScalePool,
    SetAdmission,
    SetBreakerThreshold,
    SetPoolWeight,
    SetRateLimit,
)
from infercast.actuators.admin import BackendError, FleetAdmin, Observation, Result
from infercast.actuators.audit import Audit, AuditError, AuditRecord
from infercast.actuators.stamp import KeyedAdmin

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resolution:
    decision: AuditRecord
    outcome: Literal["applied", "refused", "failed", "interrupted", "unresolved"]
    detail: str


ReadBack = Literal["applied", "refused", "not_applied", "unknown"]


@dataclass(frozen=True)
class Settled:
    """What a lost answer turned out to be: `status` is what the audit trail records."""

    status: Literal["applied", "refused", "failed", "unknown"]
    result: Result  # the backend's answer (found by key) or the failed one with the read-back in its detail
    detail: str


def read_back(admin: FleetAdmin, key: str | None, action: Action) -> tuple[ReadBack, Result | None, str]:
    """Whether `action` (sent under idempotency key `key`) took effect, without sending anything: by its key on a
    backend that remembers keys (authoritative), else by the fleet's settings.  (verdict, found answer, how)."""
    if key and isinstance(admin, KeyedAdmin):
        try:
            found = admin.lookup(key)
        except BackendError as e:
            return "unknown", None, f"cannot ask the {admin.name} backend by its idempotency key: {str(e)[:200]}"
        except Exception as e:  # a record the actuator did not write (edited, forged): not a verdict either way
            return "unknown", None, _unreadable(admin, key, e)
        if found is None:
            return "not_applied", None, f"the {admin.name} backend applied nothing under its idempotency key"
        if found.status == "refused":
            return "refused", found, f"the {admin.name} backend refused it: {found.detail[:200]}"
        return "applied", found, f"the {admin.name} backend applied it (found by its idempotency key)"
    try:
        fleet = admin.observe()
    except BackendError as e:
        return "unknown", None, f"cannot read the {admin.name} backend's settings: {str(e)[:200]}"
    shown = in_effect(action, fleet)
    if shown is None:
        return "unknown", None, f"the {admin.name} backend's settings cannot show {action.kind}"
    if shown:
        return "applied", None, f"the {admin.name} backend's settings show it in effect"
    return "not_applied", None, f"the {admin.name} backend's settings do not show it"


def _unreadable(admin: FleetAdmin, key: str, e: Exception) -> str:
    """Why a record a backend keeps under an idempotency key could not be read (it is not what the actuator wrote:
    edited or forged in the store); found by bench/hostile.py on the Redis backend."""
    return (
        f"the {admin.name} backend's record under idempotency key {key[:80]!r} cannot be read "
        f"({type(e).__name__}: {str(e)[:160]}): not what the actuator wrote"
    )


def in_effect(a: Action, fleet: Observation) -> bool | None:
    """Whether the fleet's *settings* show `a` (replicas asked for, not yet ready, count); None: they cannot tell."""
    try:
        if isinstance(a, ScalePool):
            return fleet.pool(a.pool).replicas == a.replicas
        if isinstance(a, PrewarmPool):
            return not fleet.pool(a.pool).standby
        if isinstance(a, SetPoolWeight):
            return math.isclose(fleet.pool(a.pool).weight, a.weight, rel_tol=1e-6, abs_tol=1e-9)
        if isinstance(a, SetBreakerThreshold):
            t = fleet.pool(a.pool).breaker_threshold_seconds
            return None if t is None else math.isclose(t, a.seconds, rel_tol=1e-6)
        if isinstance(a, SetAdmission):
            return all(
                getattr(fleet.admission, k) == v for k, v in a.to_dict().items() if k != "kind" and v is not None
            )
        if isinstance(a, SetRateLimit):
            if a.lane not in fleet.rate_limits:
                return None
            return a.rps is None or fleet.rate_limits[a.lane] == a.rps
    except KeyError:
        return False  # the pool is not there: the action is not in effect
    return None


def settle(admin: FleetAdmin, key: str | None, action: Action, res: Result) -> Settled:
    """The truth about an apply that `apply_with_retries` answered `failed`: read back, never re-sent."""
    if res.status != "failed":
        return Settled(res.status, res, res.detail)
    verdict, found, how = read_back(admin, key, action)
    lost = f"no answer ({res.detail[:200]})"
    if verdict == "applied":
        prev = found.previous if found is not None else None
        got = Result("applied", f"{lost}; read back: applied: {how}", prev, res.attempts)
        return Settled("applied", got, got.detail)
    if verdict == "refused":
        got = Result("refused", f"{lost}; read back: {how}", None, res.attempts)
        return Settled("refused", got, got.detail)
    if verdict == "not_applied":
        got = Result("failed", f"{res.detail[:300]}; read back: not applied: {how}", None, res.attempts)
        return Settled("failed", got, got.detail)
    detail = f"{lost}; read back: unknown: {how}; reconciled on the next ticks"
    return Settled("unknown", Result("failed", detail, None, res.attempts), detail)


def record_settled(audit: Audit, decision_id: int, s: Settled, now: float) -> None:
    """Write a settled answer to the audit trail (`unknown` rows wait for `reconcile_unknown`)."""
    if s.status == "unknown":
        audit.mark_unknown(decision_id, s.result, s.detail, now)
    else:
        audit.mark_applied(decision_id, s.result, now)


def reconcile_unknown(audit: Audit, admin: FleetAdmin, now: float, limit: int = 20) -> list[Resolution]:
    """Read back the oldest `limit` decisions left `unknown` and record what the target says now; those it still
    cannot tell stay `unknown`.  Sends nothing.  A backend without idempotency keys is read by its settings, which
    may have moved on since: the detail says when it was read."""
    done = []
    for d in audit.unknown(limit):
        verdict, found, how = read_back(admin, d.key, d.action)
        if verdict == "unknown":
            done.append(Resolution(d, "unresolved", how))
            continue
        when = f"reconciled after a lost answer: {how}"
        try:
            if verdict == "applied":
                audit.mark_reconciled(d.id, "applied", when, now, found.previous if found is not None else None)
                done.append(Resolution(d, "applied", when))
            elif verdict == "refused":
                audit.mark_reconciled(d.id, "refused", when, now)
                done.append(Resolution(d, "refused", when))
            else:
                audit.mark_reconciled(d.id, "failed", f"{when}: not applied", now)
                done.append(Resolution(d, "failed", f"{when}: not applied"))
        except AuditError as e:
            done.append(Resolution(d, "unresolved", str(e)))
    for r in done:
        if r.outcome != "unresolved":
            log.warning(
                "actuator: decision %d (%s) was unknown: %s", r.decision.id, r.decision.action.describe(), r.outcome
            )
    return done


def resolve_in_flight(
    audit: Audit, admin: FleetAdmin, now: float, cause: str = "restart", by_settings: bool = False
) -> list[Resolution]:
    """Resolve every in-flight decision of `audit` against `admin` without applying anything, then the ones a lost
    answer left `unknown` (`reconcile_unknown`).  `cause` words the records ("restart", "failover").

    `by_settings` (a failover: the decisions were another replica's): on a backend that keeps no idempotency keys,
    a decision whose action the fleet's settings show in effect is recorded `applied` -- it may have been this
    decision or an earlier one that set it, and counting it in the cooldown and change budget is the side that
    repeats nothing -- instead of `interrupted` and forgotten."""
    done: list[Resolution] = []
    for d in audit.in_flight():
        if not isinstance(admin, KeyedAdmin):
            done.append(_resolve_unkeyed(audit, admin, d, now, cause, by_settings))
            continue
        try:
            found = admin.lookup(d.key)
        except BackendError as e:
            done.append(Resolution(d, "unresolved", f"cannot ask the {admin.name} backend: {e}"))
            continue
        except Exception as e:  # left in flight, to ask again at the next start: never guessed
            done.append(Resolution(d, "unresolved", _unreadable(admin, d.key, e)))
            continue
        if found is None:
            why = f"interrupted by a {cause} before it was applied; not repeated"
            audit.mark_interrupted(d.id, why, now)
            done.append(Resolution(d, "interrupted", why))
        elif found.status == "refused":
            audit.mark_applied(d.id, found, now)
            done.append(Resolution(d, "refused", found.detail))
        else:
            audit.mark_applied(d.id, found, now)
            done.append(Resolution(d, "applied", f"applied before the {cause} (found by its idempotency key)"))
    for r in done:
        log.warning("actuator: in-flight decision %d (%s): %s", r.decision.id, r.decision.action.describe(), r.detail)
    return done + reconcile_unknown(audit, admin, now, limit=10_000)


def _resolve_unkeyed(
    audit: Audit, admin: FleetAdmin, d: AuditRecord, now: float, cause: str, by_settings: bool
) -> Resolution:
    why = f"interrupted by a {cause}; the {admin.name} backend cannot tell whether it was applied; not repeated"
    if by_settings:
        try:
            shown = in_effect(d.action, admin.observe())
        except BackendError as e:
            return Resolution(d, "unresolved", f"cannot read the {admin.name} backend's settings: {str(e)[:200]}")
        if shown:
            how = (
                f"in flight at a {cause}; the {admin.name} backend keeps no idempotency keys, and its settings show "
                "the action in effect: counted as applied (by this decision or an earlier one), not repeated"
            )
            audit.mark_applied(d.id, Result("applied", how), now)
            return Resolution(d, "applied", how)
    audit.mark_interrupted(d.id, why, now)
    return Resolution(d, "interrupted", why)
