"""What travels with one apply besides the action: its idempotency key and the leader's fencing token.

`FleetAdmin.apply(action)` takes the action alone (actuators/admin.py).  Backends that can use more take a
keyword `stamp: Stamp` and say so with `takes_stamp = True`; `stamped(admin, stamp)` is the `FleetAdmin` to hand
to `apply_with_retries`, so that every retry of one decision carries the same key and token:

    res = apply_with_retries(stamped(admin, Stamp(key, leadership.fencing_token)), action)

- The **idempotency key** (the audit trail's key of the decision) lets a backend apply a retried request once: the
  HTTP API and Redis remember the keys they applied and answer a repeat with the first answer.  After a restart it
  also lets the loop ask a backend whether an interrupted decision was applied (`KeyedAdmin.lookup`).
- The **fencing token** (from the leader election: higher for every new leader) lets a backend refuse a stale
  leader: one that lost its lease while paused, and wakes up still believing it leads.  Backends that can check it
  keep the highest token seen and refuse a lower one (`ActionRefused`, "stale fencing token").
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from infercast.actuators.actions import Action
from infercast.actuators.admin import FleetAdmin, Observation, Result

#: what an idempotency key may look like: it travels as an HTTP header and a Redis hash field
KEY_PATTERN = re.compile(r"[A-Za-z0-9._:~+/=-]{1,200}")


@dataclass(frozen=True)
class Stamp:
    key: str | None = None
    fencing_token: int | None = None

    def __post_init__(self) -> None:
        if self.key is not None and (not isinstance(self.key, str) or not KEY_PATTERN.fullmatch(self.key)):
            raise ValueError(f"idempotency key must be 1-200 characters of [A-Za-z0-9._:~+/=-], got {self.key!r}")
        t = self.fencing_token
        if t is not None and (isinstance(t, bool) or not isinstance(t, int) or t < 0):
            raise ValueError(f"fencing token must be a non-negative integer, got {t!r}")


def fence_refusal(token: int, held: int | None, max_step: int) -> str | None:
    """Why a backend refuses fencing token `token`, given the highest it has seen (`held`; None: none yet): lower
    (a newer leader holds the fleet), or more than `max_step` above it (a forged or corrupt token, which would lock
    the rightful leader out).  None: the token is accepted."""
    if held is None:
        return None
    if token < held:
        return f"stale fencing token {token} (a newer leader holds {held})"
    if token > held + max_step:
        return f"fencing token {token} is from the future (highest seen {held}; at most {max_step} more is accepted)"
    return None


def decision_key(now: float, action: Action, salt: str = "") -> str:
    """A deterministic key for deciding `action` at `now`: the same decision made again (a restarted loop
    replaying the same tick) gets the same key, so the audit trail and the backends see it once."""
    text = json.dumps([round(now, 3), action.to_dict(), salt], sort_keys=True)
    return f"{action.kind}-{hashlib.sha256(text.encode()).hexdigest()[:24]}"


@runtime_checkable
class KeyedAdmin(Protocol):
    """A backend that remembers the idempotency keys it applied (HTTP, Redis, file)."""

    def lookup(self, key: str) -> Result | None:
        """The answer given for `key`, or None when no action with that key was applied; BackendError when the
        backend cannot be asked."""
        ...


class _Stamped:
    def __init__(self, admin: FleetAdmin, stamp: Stamp) -> None:
        self.admin = admin
        self.stamp = stamp
        self.name = admin.name

    def observe(self) -> Observation:
        return self.admin.observe()

    def apply(self, action: Action) -> Result:
        if getattr(self.admin, "takes_stamp", False):
            return self.admin.apply(action, stamp=self.stamp)  # type: ignore[call-arg]
        return self.admin.apply(action)


def stamped(admin: FleetAdmin, stamp: Stamp) -> FleetAdmin:
    """`admin` with `stamp` passed to every apply (backends without `takes_stamp` ignore it)."""
    return _Stamped(admin, stamp)
