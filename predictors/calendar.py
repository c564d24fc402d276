"""The event calendar as a KV-forecast prior: a scheduled event never seen before is a breach the band cannot rule
out.  Pure.

A forecaster that reads only the past cannot page before a surge it has never seen: on the seed's flash sale the
fullest v4 instance goes from its calm level to 0.75 about a minute after the sale starts, so a forecast from KV
history alone pages at best a minute ahead.  The fleet file's calendar (`events:`) knows the sale is coming, but
not how big it will be the first time.  `EventPrior(inner, events)` says exactly that in the band: for an event
whose name has no earlier occurrence inside the history (nothing to learn its effect from), the upper band is the
series' ceiling on the forecast steps from `start + onset_s` until the model has watched the event for a horizon
(`start + onset_s + horizon`); the path and the lower band stay the model's.  So the predictive alert and the
actuator (which reads the upper band and the breach ETA) see "possible breach at start + onset" a horizon ahead,
and pre-warm or tighten before the sale rather than during it.  Once an occurrence is in the history, the prior
steps aside (Prophet's event regressor learns traffic events; the KV model sees the surge's effect).

`onset_s` is how long after an event starts it can first fill the cache: a setting of the predictor
(`predictor.event_onset_seconds`), chosen on twin runs the scores do not use (docs/predictors.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from infercast.predictors.base import Forecast, Forecaster, History
from infercast.predictors.prophet_model import EventWindow


def unlearned(events: Sequence[EventWindow], history: History) -> list[EventWindow]:
    """Events with no earlier occurrence of the same name wholly inside the history's span."""
    t0, t1 = float(history.t[0]), float(history.t[-1])
    seen = {e.name for e in events if e.start_s >= t0 and e.end_s <= t1}
    return [e for e in events if e.name not in seen]


@dataclass
class EventPrior:
    inner: Forecaster
    events: Sequence[EventWindow] = ()
    ceiling: float = 1.0
    onset_s: float = 60.0

    @property
    def name(self) -> str:
        return self.inner.name

    def fit(self, histories: list[History]) -> EventPrior:
        self.inner.fit(histories)
        return self

    def active(self, history: History, horizon_s: float) -> list[EventWindow]:
        """The unlearned events whose first horizon after onset overlaps this forecast's window."""
        now = float(history.t[-1])
        return [
            e
            for e in unlearned(self.events, history)
            if e.start_s + self.onset_s <= now + horizon_s and now < e.start_s + self.onset_s + horizon_s
        ]

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        fc = self.inner.forecast(history, horizon_s)
        events = self.active(history, horizon_s) if len(self.events) else []
        if not events:
            return fc
        upper = fc.yhat_upper.copy()
        for e in events:
            on = (fc.t >= e.start_s + self.onset_s) & (fc.t <= min(e.end_s, e.start_s + self.onset_s + horizon_s))
            upper[on] = np.maximum(upper[on], self.ceiling)
        return Forecast(fc.t, fc.yhat, fc.yhat_lower, upper, fc.band, fc.model)


def prior_upper_many(
    prior: EventPrior, t0: np.ndarray, now: float, t_future: np.ndarray, upper: np.ndarray, horizon_s: float
) -> np.ndarray:
    """`prior.forecast`'s upper band for many series at once: series i's history spans [t0[i], now] and its
    forecast's upper band is `upper[i]` on `t_future`, the steps every series shares.  The result is a new array."""
    out = upper
    if not len(prior.events):
        return out
    t0 = np.asarray(t0, dtype=np.float64)
    # seen[name]: per series, whether an occurrence of that name lies wholly inside its history
    seen: dict[str, np.ndarray] = {}
    for e in prior.events:
        inside = (e.start_s >= t0) & (e.end_s <= now)
        seen[e.name] = seen[e.name] | inside if e.name in seen else inside
    for e in prior.events:
        if not (e.start_s + prior.onset_s <= now + horizon_s and now < e.start_s + prior.onset_s + horizon_s):
            continue
        on = (t_future >= e.start_s + prior.onset_s) & (t_future <= min(e.end_s, e.start_s + prior.onset_s + horizon_s))
        rows = ~seen[e.name]
        if not on.any() or not rows.any():
            continue
        if out is upper:
            out = upper.copy()
        block = out[np.ix_(rows, on)]
        out[np.ix_(rows, on)] = np.maximum(block, prior.ceiling)
    return out
