"""A scenario's calendar on the wall clock of a twin served in real (or accelerated) time.  Pure.

A fleet file's events may be given in seconds from the scenario's start (`start: "600"`): right for the backtest
and the demo, whose clocks start at 0, but the predictor service reads Prometheus, whose clock is Unix time.  When
the exporter serves the twin from wall time `t0` (its simulated clock at `sim_t0`, advancing `speed` simulated
seconds per wall second), simulated second `s` happens at `t0 + (s - sim_t0) / speed`: `events_on_wall_clock`
rewrites the events that way (ISO times, UTC), so the predictor's calendar prior and Prophet see the sale when it
comes.  ISO times are kept as they are.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any


def _wall(raw: str, t0: float, sim_t0: float, speed: float) -> str:
    try:
        s = float(raw)
    except ValueError:
        return raw  # already a calendar time
    return datetime.fromtimestamp(t0 + (s - sim_t0) / speed, UTC).isoformat()


def events_on_wall_clock(
    events: list[dict[str, Any]], t0: float, sim_t0: float = 0.0, speed: float = 1.0
) -> list[dict[str, Any]]:
    """The fleet file's `events:` (as parsed YAML) with scenario-second times moved onto the wall clock."""
    if speed <= 0:
        raise ValueError(f"speed must be > 0, got {speed}")
    out = []
    for ev in events:
        moved = dict(ev)
        for key in ("start", "end"):
            moved[key] = _wall(str(ev[key]), t0, sim_t0, speed)
        for key in ("lower_window_seconds", "upper_window_seconds"):
            if key in ev:
                moved[key] = float(ev[key]) / speed
        out.append(moved)
    return out
