"""A model trained in a fleet's own time, serving a fleet whose clock runs `scale` times faster than the wall
clock: a twin at `--twin-speed S`, which the accelerated test stacks and demos watch.  Pure.

Such a stack divides every duration of the predictor by S (a 15 s step becomes 0.75 s at 20x).  Without
`predictor.time_scale` the service compares the model's 15 s step with 0.75 s, refuses it and runs the fallback
baseline, so the stack would not be scored on the model the service runs in production.  With it, the service
compares steps in the fleet's time, and `TimeScaled` hands the model the history in that time: times multiplied by
S, and request rates, which the store computes per wall second, divided by S; its forecast comes
back on the wall clock.  Nothing else changes: KV usage, running and waiting requests, long-context share and
fragmentation do not depend on the clock.
"""

from __future__ import annotations

from dataclasses import dataclass

from infercast.predictors.base import Forecast, Forecaster, History, Wrapper

#: covariates that are rates per second, which a faster clock multiplies
RATE_FEATURES = ("rps",)


@dataclass
class TimeScaled(Wrapper):
    inner: Forecaster
    scale: float

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"time scale must be positive, got {self.scale}")

    def fit(self, histories: list[History]) -> TimeScaled:
        self.inner.fit([self.to_fleet_time(h) for h in histories])
        return self

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        fc = self.inner.forecast(self.to_fleet_time(history), horizon_s * self.scale)
        return Forecast(fc.t / self.scale, fc.yhat, fc.yhat_lower, fc.yhat_upper, fc.band, fc.model)

    def to_fleet_time(self, h: History) -> History:
        s = self.scale
        feats = {k: (v / s if k in RATE_FEATURES else v) for k, v in h.features.items()}
        return History(h.t * s, h.y, feats, h.series_id)
