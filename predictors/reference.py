"""Degenerate reference forecasters for the breach scores: `always_alarm` and `never_alarm`.

A score that a useless model can max out says nothing, so every backtest with a threshold scores these two beside
the real models (`infercast.simulator.replay.evaluate`).  Both hold the last observed value as their path (their point
scores are those of a flat forecast); only their upper band, which is what the breach scores judge, is degenerate:

- `always_alarm`: the band runs from the last value up to `ceiling`, the top of the series' range (1.0 for KV
  usage) or the threshold where the range has none, so its upper band reaches every threshold in range at every
  origin: it pages all the time.
- `never_alarm`: the band runs from `floor` up to the last value, so its upper band never rises: at an origin
  below the threshold (the only ones the breach scores judge) it never pages.

Pure: no fit, no state.
"""

from __future__ import annotations

import numpy as np

from infercast.predictors.base import DEFAULT_BAND, Forecast, History, future_grid


def _last_finite(y: np.ndarray) -> float:
    ok = np.nonzero(np.isfinite(y))[0]
    if not len(ok):
        raise ValueError("no finite sample in the history")
    return float(y[ok[-1]])


def _held_last(history: History, horizon_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(the future grid, the last observed value held over it): both references' path."""
    t = future_grid(history, horizon_s)
    return t, np.full(len(t), _last_finite(history.y))


class AlwaysAlarm:
    """The upper band at `ceiling` over the whole horizon, the path at the last value."""

    name = "always_alarm"

    def __init__(self, ceiling: float, band: tuple[float, float] = DEFAULT_BAND) -> None:
        self.ceiling = float(ceiling)
        self.band = band

    def fit(self, histories: list[History]) -> AlwaysAlarm:
        return self

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        t, last = _held_last(history, horizon_s)
        upper = np.maximum(last, self.ceiling)
        return Forecast(t, last, last.copy(), upper, self.band, self.name)


class NeverAlarm:
    """The upper band at the last value (it never rises), the lower band at `floor`."""

    name = "never_alarm"

    def __init__(self, floor: float, band: tuple[float, float] = DEFAULT_BAND) -> None:
        self.floor = float(floor)
        self.band = band

    def fit(self, histories: list[History]) -> NeverAlarm:
        return self

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        t, last = _held_last(history, horizon_s)
        return Forecast(t, last, np.minimum(last, self.floor), last.copy(), self.band, self.name)


def references(threshold: float, clip: tuple[float, float], band: tuple[float, float] = DEFAULT_BAND) -> list:
    """The two references for a series bounded by `clip` (lower, upper), scored at `threshold`."""
    lo, hi = clip
    ceiling = max(hi, threshold) if np.isfinite(hi) else threshold
    floor = lo if np.isfinite(lo) else -np.inf
    return [AlwaysAlarm(ceiling, band), NeverAlarm(floor, band)]
