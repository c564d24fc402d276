"""A scenario's calendar on the wall clock of a twin served in real (or accelerated) time.  Pure.

A fleet file's events may be given in seconds from the scenario's start (`start: "600"`): right for the backtest
and the demo, whose clocks start at 0, but the predictor service reads Prometheus, whose clock is Unix time.  When
the exporter serves the twin from wall time `t0` (its simulated clock at `sim_t0`, advancing `speed` simulated
seconds per wall second), simulated second `s` happens at `t0 + (s - sim_t0) / speed`: `events_on_wall_clock`
rewrites the events that way (ISO times, UTC), so the predictor's calendar prior and Prophet see the sale when it
comes.  ISO times are kept as they are.  `Paced` is that mapping both ways (the demo's live arm reads Prometheus
through it, `infercast.store.paced`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True)
class Paced:
    """A simulated clock at `sim_t0` at wall time `t0`, advancing `speed` simulated seconds per wall second."""

    t0: float
    sim_t0: float = 0.0
    speed: float = 1.0

    def __post_init__(self) -> None:
        if self.speed <= 0:
            raise ValueError(f"speed must be > 0, got {self.speed}")

    def wall(self, sim: float) -> float:
        return self.t0 + (sim - self.sim_t0) / self.speed

    def sim(self, wall: float) -> float:
        return self.sim_t0 + (wall - self.t0) * self.speed


def _wall(raw: str, clock: Paced) -> str:
    try:
        s = float(raw)
    except ValueError:
        return raw  # already a calendar time
    return datetime.fromtimestamp(clock.wall(s), UTC).isoformat()


def events_on_wall_clock(
    events: list[dict[str, Any]], t0: float, sim_t0: float = 0.0, speed: float = 1.0
) -> list[dict[str, Any]]:
    """The fleet file's `events:` (as parsed YAML) with scenario-second times moved onto the wall clock."""
    clock = Paced(t0, sim_t0, speed)
    out = []
    for ev in events:
        moved = dict(ev)
        for key in ("start", "end"):
            moved[key] = _wall(str(ev[key]), clock)
        for key in ("lower_window_seconds", "upper_window_seconds"):
            if key in ev:
                moved[key] = float(ev[key]) / speed
        out.append(moved)
    return out
