"""The one contract every forecaster follows (LSTM, Prophet and the baselines).

Shape after statsforecast: `__init__` stores hyperparameters only; `fit` learns what it can from a list of
histories and returns `self`; `forecast` takes the recent history of one series and returns the path over the
horizon with a band.  Local models (last value, predict_linear, Holt-Winters, Kalman) learn nothing global in
`fit` and estimate from the history they are handed in `forecast`; global models (LSTM) train in `fit`.

Pure: arrays in, arrays out.  No clock, no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np

DEFAULT_BAND = (0.1, 0.9)


@dataclass(frozen=True)
class History:
    """A regularly sampled series: `t` in seconds (any origin), `y` the target, optional covariates on the same grid.

    Covariate names used across infercast: `rps`, `long_share`, `running`, `waiting`, `fragmentation`.
    NaN marks a missing sample.
    """

    t: np.ndarray
    y: np.ndarray
    features: dict[str, np.ndarray] = field(default_factory=dict)
    series_id: str = ""

    def __post_init__(self) -> None:
        if self.t.shape != self.y.shape or self.t.ndim != 1:
            raise ValueError(f"t and y must be 1-D of the same length, got {self.t.shape} and {self.y.shape}")
        for k, v in self.features.items():
            if v.shape != self.t.shape:
                raise ValueError(f"feature {k!r} has shape {v.shape}, expected {self.t.shape}")

    @property
    def step(self) -> float:
        if len(self.t) < 2:
            raise ValueError("a history needs at least two samples to have a step")
        return float(np.median(np.diff(self.t)))

    def upto(self, t_end: float) -> History:
        """The history as it was known at `t_end` (inclusive): used by the backtest to forbid look-ahead."""
        n = int(np.searchsorted(self.t, t_end, side="right"))
        return History(self.t[:n], self.y[:n], {k: v[:n] for k, v in self.features.items()}, self.series_id)

    def tail(self, n: int) -> History:
        return History(self.t[-n:], self.y[-n:], {k: v[-n:] for k, v in self.features.items()}, self.series_id)


@dataclass(frozen=True)
class Forecast:
    """Forecast path at `t` (future times), central value and a band of stated quantiles."""

    t: np.ndarray
    yhat: np.ndarray
    yhat_lower: np.ndarray
    yhat_upper: np.ndarray
    band: tuple[float, float] = DEFAULT_BAND
    model: str = ""

    def __post_init__(self) -> None:
        n = self.t.shape
        if not (self.yhat.shape == self.yhat_lower.shape == self.yhat_upper.shape == n):
            raise ValueError("forecast arrays must all have the shape of t")

    def at_horizon(self) -> tuple[float, float, float]:
        return float(self.yhat[-1]), float(self.yhat_lower[-1]), float(self.yhat_upper[-1])

    def breach_eta(self, threshold: float, now: float) -> float:
        """Seconds from `now` until the upper band first reaches `threshold`; +inf when it does not."""
        hit = np.nonzero(self.yhat_upper >= threshold)[0]
        return float(self.t[hit[0]] - now) if len(hit) else float("inf")


@runtime_checkable
class Forecaster(Protocol):
    name: str

    def fit(self, histories: list[History]) -> Forecaster: ...

    def forecast(self, history: History, horizon_s: float) -> Forecast: ...


class Wrapper:
    """A forecaster that forecasts through another, `inner`, under the inner model's name and band: it changes
    what the inner model is handed or what it answers, not which model the forecast is (`TimeScaled`,
    `AnnouncedTraffic`)."""

    inner: Forecaster

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def band(self) -> tuple[float, float]:
        return getattr(self.inner, "band", DEFAULT_BAND)


def history_cap(y: np.ndarray, factor: float) -> float:
    """`factor` x the highest finite value of `y` (a traffic forecast's bound, `predictor.traffic_bound_factor`); inf
    when no finite value is above 0."""
    seen = y[np.isfinite(y)]
    top = float(seen.max()) if len(seen) else 0.0
    return factor * top if top > 0 else math.inf


def future_grid(history: History, horizon_s: float) -> np.ndarray:
    """The future sample times: one step after the last sample up to and including the horizon."""
    step = history.step
    n = max(1, round(horizon_s / step))
    return history.t[-1] + step * np.arange(1, n + 1)
