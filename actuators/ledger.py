"""What an arm did to the fleet, counted the way a reviewer of a controller asks: how many times each setting was
changed, how often it flapped, and how long after a surge's onset the first action came.  Pure (the applied
actions with what they replaced in, counts out); `infercast twin run --json` reports them (`changes`, `flaps`,
`decision_delay_seconds`) beside goodput.

- A **setting** is one knob: a pool's replica count, its autoscaler floor or ceiling, its weight or breaker
  threshold, one admission field, one quota lane's rate.  An action that sets several (admission) changes each
  of them; one that sets a knob to the value it had changes nothing.
- A **flap** is a tighten-relax-tighten of one setting within its dwell time: three changes in a row, each
  reversing the last one's direction, the third within `dwell_seconds` of the first.
- The **decision delay** is from the onset to the first action applied at or after `onset - lookahead` (a
  controller that saw the surge coming acted before it: a negative delay).

The one counter of changes and flaps: `actuators/steadiness.py` (the control loop's names for its settings, and the
steadiness property tests' counts) counts through `value_changes`, `count_changes`, `count_flaps` and
`most_in_window` here.
"""

from __future__ import annotations

import math
from collections import Counter, deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from infercast.actuators.actions import Action
from infercast.config import FleetConfig


@dataclass(frozen=True)
class Change:
    t: float
    setting: str
    before: float | None  # None: not known (the backend could not say what it replaced)
    after: float


def _values(a: Action | None) -> dict[str, float]:
    """The settings an action sets, by name, as numbers (a removed rate limit is +inf: no limit)."""
    if a is None:
        return {}
    d = a.to_dict()
    kind = d.pop("kind")
    who = d.pop("pool", None) or d.pop("lane", None) or "fleet"
    out = {}
    for k, v in d.items():
        if kind == "set_rate_limit" and k == "rps" and v is None:
            v = math.inf
        if isinstance(v, bool) or not isinstance(v, int | float):
            continue
        out[f"{kind}:{k}:{who}" if kind != "set_admission" else f"admission:{k}"] = float(v)
    if kind == "prewarm_pool":
        out[f"prewarm_pool:{who}"] = 1.0
    return out


def setting_changes(history: Iterable[tuple[float, Action, Action | None]]) -> list[Change]:
    """Every change of a setting in `history` ((time, action applied, the action that restores what it replaced)),
    in order.  A setting whose new value equals the one it replaced is not changed."""
    out = []
    for t, action, previous in history:
        before = _values(previous)
        for setting, after in _values(action).items():
            b = before.get(setting)
            if b is not None and (b == after or math.isclose(b, after, rel_tol=1e-9, abs_tol=1e-12)):
                continue
            out.append(Change(float(t), setting, b, after))
    return out


def value_changes(
    rows: Iterable[tuple[float, str, float | int | None]], initial: Mapping[str, float | int | None] | None = None
) -> list[Change]:
    """The changes in `rows` ((time, setting, value) in any order; a value None is no limit, above every number),
    each setting starting from its `initial` value (a setting not in it: its first row is a change from an unknown
    value).  A row that leaves its setting as it was is no change."""

    def num(v: float | int | None) -> float:
        return math.inf if v is None else float(v)

    last = {k: num(v) for k, v in (initial or {}).items()}
    out = []
    for t, setting, v in sorted(rows, key=lambda r: r[0]):
        after = num(v)
        if setting in last and last[setting] == after:
            continue
        out.append(Change(float(t), setting, last.get(setting), after))
        last[setting] = after
    return out


def most_in_window(changes: Iterable[Change], window_seconds: float) -> dict[str, int]:
    """Per setting, the most changes in any `window_seconds` (a change `window_seconds` after another is in the
    next window)."""
    by: dict[str, list[float]] = {}
    for c in changes:
        by.setdefault(c.setting, []).append(c.t)
    out = {}
    for setting, times in by.items():
        window: deque[float] = deque()
        best = 0
        for t in sorted(times):
            window.append(t)
            while window[0] <= t - window_seconds:
                window.popleft()
            best = max(best, len(window))
        out[setting] = best
    return dict(sorted(out.items()))


def count_changes(changes: Iterable[Change]) -> dict[str, int]:
    return dict(sorted(Counter(c.setting for c in changes).items()))


def count_flaps(changes: Iterable[Change], dwell_seconds: float) -> dict[str, int]:
    """Per setting, the tighten-relax-tighten runs (three consecutive changes, each reversing the direction of the
    one before, the third within `dwell_seconds` of the first); only settings that flapped are listed."""
    by: dict[str, list[tuple[float, int]]] = {}
    for c in changes:
        if c.before is None:
            continue
        by.setdefault(c.setting, []).append((c.t, 1 if c.after > c.before else -1))
    out = {}
    for setting, moves in by.items():
        n = sum(
            1
            for i in range(len(moves) - 2)
            if moves[i][1] == -moves[i + 1][1] == moves[i + 2][1] and moves[i + 2][0] - moves[i][0] <= dwell_seconds
        )
        if n:
            out[setting] = n
    return dict(sorted(out.items()))


def decision_delay(action_times: Iterable[float], onset: float | None, lookahead: float) -> float | None:
    """Seconds from `onset` to the first action at or after `onset - lookahead` (None: no onset, or no action)."""
    if onset is None:
        return None
    after = [t for t in action_times if t >= onset - lookahead - 1e-9]
    return round(min(after) - onset, 1) if after else None


def action_ledger(cfg: FleetConfig, history, summary: dict) -> dict:
    """`decision_delay_seconds` (onset to the first action, within a forecast horizon before it; null without a
    surge), and per setting the applied `changes` and `flaps` (tighten-relax-tighten within the autoscaler's
    scale-down window, Kubernetes' own dwell for a replica count): `actuators/ledger.py`."""
    dwell = cfg.dwell_seconds
    changes = setting_changes(history)
    flaps = count_flaps(changes, dwell)
    by = count_changes(changes)
    return {
        "decision_delay_seconds": decision_delay(
            (t for t, _, _ in history), summary.get("surge_start_seconds"), cfg.predictor.horizon_seconds
        ),
        "changes": {"total": sum(by.values()), "by_setting": by},
        "flaps": {"total": sum(flaps.values()), "by_setting": flaps, "dwell_seconds": dwell},
    }
