"""After a restart (a deploy, a crash, `kill -9` mid-action): resolve what the audit trail left in flight.

A decision recorded but never answered may or may not have reached the fleet.  It is never applied again -- the
fleet may have moved on, and the loop will decide afresh from what it observes now.  What is recorded instead:
- the backend remembers the idempotency key (HTTP, Redis, file: `KeyedAdmin.lookup`): the answer it gave then
  (`applied`, with its undo action, so verification and rollback still work), or `interrupted` when the key was
  never applied ("not applied before the restart; not repeated");
- the backend cannot tell (Kubernetes, the in-process twin): `interrupted`, saying so;
- the backend cannot be asked right now: left in flight, to resolve at the next start (reported, not guessed).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from actuators.admin import BackendError, FleetAdmin
from actuators.audit import Audit, Decision
from actuators.stamp import KeyedAdmin

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Resolution:
    decision: Decision
    outcome: Literal["applied", "refused", "interrupted", "unresolved"]
    detail: str


def resolve_in_flight(audit: Audit, admin: FleetAdmin, now: float) -> list[Resolution]:
    """Resolve every in-flight decision of `audit` against `admin` without applying anything."""
    done = []
    for d in audit.in_flight():
        if not isinstance(admin, KeyedAdmin):
            why = f"interrupted by a restart; the {admin.name} backend cannot tell whether it was applied; not repeated"
            audit.mark_interrupted(d.id, why, now)
            done.append(Resolution(d, "interrupted", why))
            continue
        try:
            found = admin.lookup(d.key)
        except BackendError as e:
            done.append(Resolution(d, "unresolved", f"cannot ask the {admin.name} backend: {e}"))
            continue
        if found is None:
            why = "interrupted by a restart before it was applied; not repeated"
            audit.mark_interrupted(d.id, why, now)
            done.append(Resolution(d, "interrupted", why))
        elif found.status == "refused":
            audit.mark_applied(d.id, found, now)
            done.append(Resolution(d, "refused", found.detail))
        else:
            audit.mark_applied(d.id, found, now)
            done.append(Resolution(d, "applied", "applied before the restart (found by its idempotency key)"))
    for r in done:
        log.warning("actuator: in-flight decision %d (%s): %s", r.decision.id, r.decision.action.describe(), r.detail)
    return done
