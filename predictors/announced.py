"""The calendar's announced rates in the traffic forecast.  Pure.

A traffic model that reads only the past forecasts the flash sale's 12,000 req/s at the calm 200 until the sale has
started, and the calm 200 at 12,000 until it has ended: on the seed's sale every model a user would pick (last value,
Holt-Winters, Kalman, Prophet anchored) has the same error, all of it at the sale's two edges.  The fleet file's
calendar says more than the past: `events[].expected_rps` is the rate the organisers expect at the event's peak, and
`start`/`end` say when.  `AnnouncedTraffic(inner, events)` forecasts with `inner` and then, for each event with an
expected rate:

- **before it starts** (now < start): on the forecast steps inside the event, the path and the upper band are at
  least the series' share of the expected rate.  The lower band stays the inner model's: an announcement is not a
  guarantee;
- **once it is under way**, the observed level is better evidence than the announcement, and the inner model follows
  it; the steps after its end (when the end falls inside the horizon) go back to the level before the event (the
  median of the `before_s` seconds before it started), since the inner model has no way to know the end is coming.

`share` is the series' part of the fleet's traffic, which the expected rate is for: 1 for a series that is the whole
fleet's; the service sets it each tick to the pool's share of the traffic it sees now (`infercast.predictors.service`),
so an event is spread over the pools as today's traffic is.  An event without `expected_rps` changes nothing here
(Prophet's event regressor learns its effect once it has been seen).

The name stays the inner model's, as the KV pipeline's calendar prior (`infercast.predictors.calendar`) does.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from infercast.predictors.base import Forecast, Forecaster, History, Wrapper
from infercast.predictors.prophet_model import EventWindow


class AnnouncedTraffic(Wrapper):
    def __init__(
        self, inner: Forecaster, events: Sequence[EventWindow] = (), share: float = 1.0, before_s: float = 600.0
    ) -> None:
        self.inner = inner
        self.events = [e for e in events if e.expected_rps is not None]
        self.share = float(share)
        self.before_s = float(before_s)

    def fit(self, histories: list[History]) -> AnnouncedTraffic:
        self.inner.fit(histories)
        return self

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        fc = self.inner.forecast(history, horizon_s)
        now = float(history.t[-1])
        live = [e for e in self.events if e.end_s > now and e.start_s <= float(fc.t[-1])]
        if not live:
            return fc
        yhat, lower, upper = fc.yhat.copy(), fc.yhat_lower.copy(), fc.yhat_upper.copy()
        for e in live:
            if now < e.start_s:
                rate = self.share * float(e.expected_rps)  # type: ignore[arg-type]
                on = (fc.t >= e.start_s) & (fc.t < e.end_s)
                yhat[on] = np.maximum(yhat[on], rate)
                upper[on] = np.maximum(upper[on], rate)
            before = self._level_before(history, e)
            after = fc.t >= e.end_s
            if before is not None and after.any():
                shift = before - yhat[after]  # back to the level before the event, the band moved with it
                yhat[after] += shift
                lower[after] += shift
                upper[after] += shift
        lower, upper = np.minimum(lower, yhat), np.maximum(upper, yhat)
        return Forecast(fc.t, yhat, lower, upper, fc.band, fc.model)

    def _level_before(self, history: History, e: EventWindow) -> float | None:
        """The series' median over the `before_s` seconds before the event started (None: not in the history)."""
        inside = (history.t >= e.start_s - self.before_s) & (history.t < e.start_s) & np.isfinite(history.y)
        return float(np.median(history.y[inside])) if inside.any() else None
