"""How steady a run of the actuator was, from the actions it applied: changes per setting and flaps.  Pure.

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

import math
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from infercast.actuators.actions import (
    Action,
    PrewarmPool,
    ScalePool,
    SetAdmission,
    SetBreakerThreshold,
    SetPoolWeight,
    SetRateLimit,
)

Value = float | int | None
#: the window `most_in_window` counts changes in (issue 36: changes per setting per 10 minutes)
WINDOW_SECONDS = 600.0
ADMISSION_FIELDS = ("memory_limit", "max_context_tokens", "normal_queue_seconds", "low_queue_seconds")


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


def _num(v: Value) -> float:
    """None (no limit, no bucket) sorts above every number."""
    return math.inf if v is None else float(v)


def moves(
    rows: Iterable[tuple[float, str, Value]], initial: Mapping[str, Value] | None = None
) -> dict[str, list[tuple[float, int]]]:
    """Per setting, when it moved and which way: +1 up, -1 down (None, no limit, is above every number), 0 for its
    first row when `initial` does not give its value (nothing to compare with).  A row that leaves its setting as
    it was is no move."""
    last: dict[str, Value] = dict(initial or {})
    out: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for t, s, v in sorted(rows, key=lambda r: r[0]):
        if s in last and _num(last[s]) == _num(v):
            continue
        direction = 0 if s not in last else (1 if _num(v) > _num(last[s]) else -1)
        out[s].append((t, direction))
        last[s] = v
    return dict(out)


def steadiness(
    rows: Iterable[tuple[float, str, Value]],
    dwell_seconds: float,
    initial: Mapping[str, Value] | None = None,
    window_seconds: float = WINDOW_SECONDS,
) -> Steadiness:
    """Count, per setting, its changes, its flaps (a move, the opposite move, and the first direction again, the
    first and third less than `dwell_seconds` apart) and the most changes in any `window_seconds`.  `rows` are
    (time, setting, value), e.g. from `setting_changes`; `initial` the values before the first row (a setting not in
    it: its first row counts as a change, there being nothing to compare it with)."""
    changes: dict[str, int] = {}
    flaps: dict[str, int] = {}
    most: dict[str, int] = {}
    for s, m in moves(rows, initial).items():
        changes[s] = len(m)
        flaps[s] = sum(
            1
            for (t1, d1), (_, d2), (t3, d3) in zip(m, m[1:], m[2:], strict=False)
            if d1 != 0 and d2 == -d1 and d3 == d1 and t3 - t1 < dwell_seconds
        )
        window: deque[float] = deque()
        best = 0
        for t, _ in m:
            window.append(t)
            while window[0] <= t - window_seconds:
                window.popleft()
            best = max(best, len(window))
        most[s] = best
    return Steadiness(changes, flaps, most)
