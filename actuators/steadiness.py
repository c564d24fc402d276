"""How steady a run of the actuator was, from the actions it applied: changes per setting and flaps.  Pure.  The
counting is `actuators/ledger.py`'s (one counter); this module names the settings as the control loop knows them.

A *setting* is one thing a fleet is set to (`admission:max_context_tokens`, `weight:v4-main`, `replicas:v4-main`,
`breaker:v4-main`, `rate:shared`, `standby:v4-standby`); one action may change several (`set_admission`).  A row is
a *change* only when it moves its setting (a `set_admission` relaxing one level carries every field, most of them
unchanged).  A *flap* is a setting that goes one way, back, and the first way again (tighten-relax-tighten, or
relax-tighten-relax) with the first and third moves less than `dwell_seconds` apart: what issue 36 found under one
firing alert (the same settings tightened and relaxed alternately, 15 changes in 75 s).

The control loop uses `settings_of` to tell that a newer change superseded an older one before judging the older
(`actuators/controller.py`); the control bench publishes `steadiness(...)` per arm beside its goodput; the
property tests (tests/actuators/test_steadiness.py) assert on it.

    rows = setting_changes([(t, action), ...])              # (time, setting, value) per field an action sets
    s = steadiness(rows, dwell_seconds=60.0, initial={"admission:max_context_tokens": 24000})
    s.changes["admission:max_context_tokens"], s.flaps, s.total_flaps, s.most_in_window
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from infercast.actuators.actions import (
    ADMISSION_FIELDS,
    Action,
    PrewarmPool,
    ScalePool,
    SetAdmission,
    SetBreakerThreshold,
    SetPoolWeight,
    SetRateLimit,
)
from infercast.actuators.ledger import count_changes, count_flaps, most_in_window, value_changes

Value = float | int | None
#: the window `most_in_window` counts changes in (issue 36: changes per setting per 10 minutes)
WINDOW_SECONDS = 600.0


def settings_of(a: Action) -> dict[str, Value]:
    """The settings `a` sets, each to its value: `set_admission` one per field it gives (a field left None is not
    touched), a pool's weight, replicas, breaker or standby, a lane's rate (None: no bucket)."""
    if isinstance(a, SetAdmission):
        return {f"admission:{f}": getattr(a, f) for f in ADMISSION_FIELDS if getattr(a, f) is not None}
    if isinstance(a, SetPoolWeight):
        return {f"weight:{a.pool}": a.weight}
    if isinstance(a, ScalePool):
        return {f"replicas:{a.pool}": a.replicas}
    if isinstance(a, SetBreakerThreshold):
        return {f"breaker:{a.pool}": a.seconds}
    if isinstance(a, SetRateLimit):
        return {f"rate:{a.lane}": a.rps}
    if isinstance(a, PrewarmPool):
        return {f"standby:{a.pool}": 0}
    return {f"{a.kind}:{a.target}": None}


def setting_changes(applied: Iterable[tuple[float, Action]]) -> list[tuple[float, str, Value]]:
    """(time, setting, value) for every setting each applied action sets, in time order."""
    rows = [(float(t), s, v) for t, a in applied for s, v in settings_of(a).items()]
    return sorted(rows, key=lambda r: r[0])


@dataclass(frozen=True)
class Steadiness:
    changes: dict[str, int] = field(default_factory=dict)  # setting -> times it moved
    flaps: dict[str, int] = field(default_factory=dict)  # setting -> one way, back, and again within the dwell
    most_in_window: dict[str, int] = field(default_factory=dict)  # setting -> most moves in any WINDOW_SECONDS

    @property
    def total_changes(self) -> int:
        return sum(self.changes.values())

    @property
    def total_flaps(self) -> int:
        return sum(self.flaps.values())


def moves(
    rows: Iterable[tuple[float, str, Value]], initial: Mapping[str, Value] | None = None
) -> dict[str, list[tuple[float, int]]]:
    """Per setting, when it moved and which way: +1 up, -1 down (None, no limit, is above every number), 0 for its
    first row when `initial` does not give its value (nothing to compare with).  A row that leaves its setting as
    it was is no move (`ledger.value_changes`)."""
    out: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for c in value_changes(rows, initial):
        out[c.setting].append((c.t, 0 if c.before is None else (1 if c.after > c.before else -1)))
    return dict(out)


def steadiness(
    rows: Iterable[tuple[float, str, Value]],
    dwell_seconds: float,
    initial: Mapping[str, Value] | None = None,
    window_seconds: float = WINDOW_SECONDS,
) -> Steadiness:
    """Count, per setting, its changes, its flaps (a move, the opposite move, and the first direction again, the
    third within `dwell_seconds` of the first) and the most changes in any `window_seconds`: the one counter,
    `actuators/ledger.py`, which `infercast twin run --json` reports from.  `rows` are (time, setting, value),
    e.g. from `setting_changes`; `initial` the values before the first row (a setting not in it: its first row
    counts as a change, there being nothing to compare it with)."""
    changes = value_changes(rows, initial)
    counted = count_changes(changes)
    flaps = count_flaps(changes, dwell_seconds)
    return Steadiness(counted, {s: flaps.get(s, 0) for s in counted}, most_in_window(changes, window_seconds))
