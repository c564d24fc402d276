"""The seam between the daemon and the control loop: `TickHook(now, ctx) -> TickReport`.  Pure (values only).

The daemon (actuators/daemon.py) owns the clock, the schedule, the leader check and the metrics; the control loop
owns observe -> decide -> guard -> apply -> record.  On each run of a loop the daemon asks the elector, then calls

    report = tick(now, TickContext(loop="scheduled", active=..., mode=..., leadership=...))

- `now` is the wall clock read once by the daemon (the loop never reads a clock);
- `ctx.active` is True only when the configured mode is `active` *and* this replica leads: otherwise the loop
  decides, records and reports its decisions as `advisory` and applies nothing (a follower stays advisory);
- `ctx.stamp(key)` is what to send with an apply (`infercast.actuators.stamp.stamped`): the decision's idempotency key
  and the leader's fencing token.

The report says what happened, so the daemon can publish it (`infercast_actuator_*`): each action with its outcome
and reason code, the verdicts reached, whether the loop froze and why, and how much of each change budget is used.
Reasons, outcomes and verdicts are the catalog's enums (infercast/catalog.py); a value outside them is a
`ValueError` when the report is made, not a surprise at scrape time.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

from infercast.actuators.actions import Action
from infercast.actuators.leader import Leadership
from infercast.actuators.stamp import Stamp
from infercast.catalog import ACTION_OUTCOMES, ACTION_REASONS, ACTUATOR_LOOPS, FREEZE_REASONS, VERDICTS

Loop = Literal["scheduled", "alert"]
Mode = Literal["advisory", "active"]


@dataclass(frozen=True)
class TickContext:
    loop: Loop
    active: bool
    mode: Mode
    leadership: Leadership

    def __post_init__(self) -> None:
        if self.loop not in ACTUATOR_LOOPS:
            raise ValueError(f"loop must be one of {ACTUATOR_LOOPS}, got {self.loop!r}")

    @property
    def fencing_token(self) -> int | None:
        return self.leadership.fencing_token

    def stamp(self, key: str | None) -> Stamp:
        return Stamp(key, self.leadership.fencing_token)


@dataclass(frozen=True)
class ActionOutcome:
    """One decided action and what became of it."""

    action: Action
    outcome: str  # applied | advisory | refused | rolled_back | failed
    reason: str = "other"  # forecast | live_metrics | alert | relax | rollback | manual | other
    decided_at: float | None = None  # the `now` of the tick that decided it
    answered_at: float | None = None  # when the backend answered (same clock); latency = answered - decided
    detail: str = ""

    def __post_init__(self) -> None:
        if self.outcome not in ACTION_OUTCOMES:
            raise ValueError(f"outcome must be one of {ACTION_OUTCOMES}, got {self.outcome!r}")
        if self.reason not in ACTION_REASONS:
            raise ValueError(f"reason must be one of {ACTION_REASONS}, got {self.reason!r}")


@dataclass(frozen=True)
class VerdictOutcome:
    """A verdict reached on an earlier action after its verification window."""

    action: Action
    verdict: str  # verified | rolled_back | no_effect
    reason: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")


@dataclass(frozen=True)
class TickReport:
    actions: tuple[ActionOutcome, ...] = ()
    verdicts: tuple[VerdictOutcome, ...] = ()
    frozen: bool = False
    freeze_reason: str | None = None  # one of FREEZE_REASONS when frozen
    budget_used: Mapping[str, float] = field(default_factory=dict)  # target (pool or "fleet") -> 0..1
    note: str = ""

    def __post_init__(self) -> None:
        if self.frozen and self.freeze_reason not in FREEZE_REASONS:
            raise ValueError(f"a frozen report needs freeze_reason in {FREEZE_REASONS}, got {self.freeze_reason!r}")


class TickHook(Protocol):
    def __call__(self, now: float, ctx: TickContext) -> TickReport: ...
