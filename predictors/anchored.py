"""Traffic forecasts anchored to the current level: Prophet's shape and calendar, an AR(1) of its recent residuals,
and a bound from the history.  Pure apart from Prophet's own fitting.

Prophet alone forecasts traffic as trend + daily/weekly shape + event effects, fitted over hours or days; at 5-10
minutes ahead it is often further from the truth than the last value, because the level it carries is the fit's,
not the one the fleet is seeing now (on ServeGen clients 2.3-2.4x the last value's error), and a trend fitted
across a surge extrapolates it (153,655 req/s five minutes after the flash sale's 12,000).  `AnchoredProphet`:

1. **Shape**: Prophet (`predictors.prophet_model`, with the event calendar) forecasts the path `p(t)` over the
   horizon and its in-sample values over the last samples.
2. **Level**: the log residuals `r = log(y / p)` of the recent samples, smoothed by simple exponential smoothing
   into a level `l` (a local-level model of Prophet's error), carried forward by an AR(1), `l_k = phi^k l`.  At each
   `fit`, on the fitted span's own residuals: `alpha` (from 0.1 to 1) minimises the one-step error of the smoothed
   level, `phi` is the lag-1 autocorrelation of the residuals (clipped to [0, 1]); neither looks past the fit.
   The forecast is `p(t_k) exp(l_k)`: with alpha 1 and phi 1, the last value moved along Prophet's shape; smaller
   alpha averages the noise of single windows out of the level; phi near 0 falls back to Prophet's own level.
3. **Bound**: never above `bound_factor` x the highest value in the history (and never below 0), for the path and
   the band: the history says what the fleet has ever seen; a forecast beyond it by more than half again is an
   extrapolation, not a forecast.  A learned event (an earlier occurrence in the history) raises the bound with it.

The band is Prophet's, moved by the same factor; `predictors.conformal` calibrates it online in the service.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from predictors.base import DEFAULT_BAND, Forecast, History, future_grid
from predictors.prophet_model import ProphetForecaster


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
        self.phi_: float = 0.9
        self.alpha_: float = 1.0

    def fit(self, histories: list[History]) -> AnchoredProphet:
        self.prophet.fit(histories)
        h = histories[0]
        ok = np.isfinite(h.y) & (h.y > 0)
        if ok.sum() >= 8:
            fitted = self.prophet.predict_at(h.t[ok]).yhat
            r = _log_ratio(h.y[ok], fitted)
            a, b = r[1:], r[:-1]
            den = float(np.dot(b - b.mean(), b - b.mean()))
            if den > 0:
                self.phi_ = float(np.clip(np.dot(a - a.mean(), b - b.mean()) / den, 0.0, 1.0))
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
        t_last = float(history.t[recent[-1]])
        p = self.prophet.predict_at(np.concatenate([history.t[recent], t_f]))
        n = len(recent)
        level = float(_ses(_log_ratio(history.y[recent], p.yhat[:n]), self.alpha_)[-1])
        p = type(p)(p.t[n:], p.yhat[n:], p.yhat_lower[n:], p.yhat_upper[n:], p.band, p.model)
        k = np.arange(1, len(t_f) + 1) + round((float(history.t[-1]) - t_last) / history.step)
        factor = np.exp(level * self.phi_**k)
        cap = self.bound_factor * float(np.nanmax(history.y[ok]))
        cap = cap if cap > 0 else math.inf

        def bounded(x: np.ndarray) -> np.ndarray:
            return np.clip(x, 0.0, cap)

        yhat = bounded(p.yhat * factor)
        lower = np.minimum(bounded(p.yhat_lower * factor), yhat)
        upper = np.maximum(bounded(p.yhat_upper * factor), yhat)
        return Forecast(t_f, yhat, lower, upper, self.band, self.name)


#: smoothing weights tried for the level; the recent samples the level is smoothed over
ALPHAS = (0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
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
