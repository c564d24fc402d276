"""Traffic forecasts anchored to the current level: Prophet's shape and calendar, a level correction from its recent
residuals, and a bound from the history.  Pure apart from Prophet's own fitting.

Prophet alone forecasts traffic as trend + daily/weekly shape + event effects, fitted over hours or days; at 5-10
minutes ahead it is often further from the truth than the last value, because the level it carries is the fit's,
not the one the fleet is seeing now (on ServeGen clients 2.3-2.4x the last value's error), and a trend fitted
across a surge extrapolates it (153,655 req/s five minutes after the flash sale's 12,000).  `AnchoredProphet`:

1. **Shape**: Prophet (`infercast.predictors.prophet_model`, with the event calendar) forecasts the path `p(t)` over the
   horizon and its in-sample values over the last samples, with its trend held at its value at the newest sample
   (a trend fitted across a surge is not extrapolated; the daily/weekly shape and the event effects are kept).
2. **Level**: the log residuals `r = log(y / p)` of the recent samples, smoothed by simple exponential smoothing
   into a level `l` (a local-level model of Prophet's error), held over the horizon.  At each `fit`, `alpha` (0.5,
   0.7 or 1) is the one with the smallest one-step error of the smoothed level on the fitted span's own residuals.
   The forecast is `p(t_k) exp(l)`: with alpha 1 the last value moved along Prophet's shape; a smaller alpha
   averages the noise of single windows out of the level.  An AR(1) decay of the level towards Prophet's (fitted
   on the same residuals) was tried first and dropped: fitted on a calm span it decays at once, and the flash sale's
   12,000 req/s were forecast at the calm 200.
3. **Bound**: never above `bound_factor` x the highest value in the history (and never below 0), for the path and
   the band: the history says what the fleet has ever seen; a forecast beyond it by more than half again is an
   extrapolation, not a forecast.  A learned event (an earlier occurrence in the history) raises the bound with it.

The band is Prophet's, moved by the same factor; `infercast.predictors.conformal` calibrates it online in the service.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from infercast.predictors.base import DEFAULT_BAND, Forecast, History, future_grid, history_cap
from infercast.predictors.prophet_model import ProphetForecaster


class AnchoredProphet:
    name = "prophet_anchored"

    def __init__(
        self,
        events: Sequence = (),
        band: tuple[float, float] = DEFAULT_BAND,
        epoch_s: float = 0.0,
        bound_factor: float = 1.5,
        prophet: ProphetForecaster | None = None,
    ) -> None:
        self.prophet = prophet or ProphetForecaster(events=events, band=band, epoch_s=epoch_s, refit_growth=None)
        self.band = band
        self.bound_factor = bound_factor
        self.alpha_: float = 1.0

    def fit(self, histories: list[History]) -> AnchoredProphet:
        self.prophet.fit(histories)
        h = histories[0]
        ok = np.isfinite(h.y) & (h.y > 0)
        if ok.sum() >= 8:
            fitted = self.prophet.predict_at(h.t[ok]).yhat
            r = _log_ratio(h.y[ok], fitted)
            errors = {alpha: float(np.mean(np.abs(r[1:] - _ses(r, alpha)[:-1]))) for alpha in ALPHAS}
            self.alpha_ = min(errors, key=errors.get)
        return self

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        if self.prophet.model_ is None:
            self.fit([history])
        ok = np.nonzero(np.isfinite(history.y))[0]
        if not len(ok):
            raise ValueError("prophet_anchored: no finite sample in the history")
        t_f = future_grid(history, horizon_s)
        recent = ok[-LEVEL_WINDOW:]
        n = len(recent)
        yhat_p, lower_p, upper_p = self._shape(np.concatenate([history.t[recent], t_f]), n)
        level = float(_ses(_log_ratio(history.y[recent], yhat_p[:n]), self.alpha_)[-1])
        factor = np.exp(level)
        cap = history_cap(history.y, self.bound_factor)

        def bounded(x: np.ndarray) -> np.ndarray:
            return np.clip(x, 0.0, cap)

        yhat = bounded(yhat_p[n:] * factor)
        lower = np.minimum(bounded(lower_p[n:] * factor), yhat)
        upper = np.maximum(bounded(upper_p[n:] * factor), yhat)
        return Forecast(t_f, yhat, lower, upper, self.band, self.name)

    def _shape(self, times: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Prophet at `times` with its trend held at its value at `times[n - 1]` (the newest sample) from there on:
        the daily/weekly shape and the calendar's effects, without the trend extrapolated across the horizon."""
        trend, yhat, lo, hi = self.prophet.components_at(times)
        drift = np.where(np.arange(len(times)) >= n, trend - trend[n - 1], 0.0)
        yhat, lo, hi = yhat - drift, lo - drift, hi - drift
        floor = 0.0
        return np.maximum(yhat, floor), np.maximum(lo, floor), np.maximum(hi, floor)


#: smoothing weights tried for the level; the recent samples the level is smoothed over
ALPHAS = (0.5, 0.7, 1.0)
LEVEL_WINDOW = 24


def _ses(r: np.ndarray, alpha: float) -> np.ndarray:
    """Simple exponential smoothing: the level after each sample (starting at the first)."""
    out = np.empty(len(r))
    level = float(r[0])
    for i, x in enumerate(r):
        level = alpha * float(x) + (1 - alpha) * level
        out[i] = level
    return out


def _log_ratio(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """log(y / p) with both floored at a small share of the level, so zeros and Prophet's dips stay finite."""
    floor = max(1e-6, 1e-3 * float(np.nanmean(np.abs(y))) if len(y) else 1e-6)
    return np.log(np.maximum(y, floor) / np.maximum(p, floor))
