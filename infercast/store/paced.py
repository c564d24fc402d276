"""A store on a simulated clock over a store on the wall clock: the demo's live arm reads Prometheus through it.

The twin, the predictor and the control loop keep their own clock (simulated seconds from the scenario's start,
every duration as the fleet file has it); Prometheus stamps what it scrapes with the wall clock.  When the twin is
paced onto the wall clock (`infercast.wallclock.Paced`: `speed` simulated seconds per wall second),
`query_range(start, end, step)` in simulated seconds is the wall-clock query `(wall(start), wall(end),
step / speed)`, its times mapped back.  Nothing from before the pacing began (`clock.sim_t0`) is returned: what a
Prometheus holds from earlier runs, or from the wait for its first scrape, is not this run's history.
"""

from __future__ import annotations

import math

from infercast.store import Series, Store
from infercast.wallclock import Paced


class PacedStore:
    def __init__(self, store: Store, clock: Paced) -> None:
        self.store, self.clock = store, clock

    def query_range(
        self, metric: str, matchers: dict[str, str] | None, start: float, end: float, step: float
    ) -> list[Series]:
        c = self.clock
        if start < c.sim_t0:  # the query's first grid point at or after sim_t0
            start += step * math.ceil((c.sim_t0 - start) / step - 1e-9)
        if end < start:
            return []
        series = self.store.query_range(metric, matchers, c.wall(start), c.wall(end), step / c.speed)
        return [Series(s.labels, c.sim(s.t), s.v) for s in series]


__all__ = ["PacedStore"]
