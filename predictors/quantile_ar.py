"""A small quantile model of traffic: the change over the next k steps, regressed on what the last samples and the
previous days say about it (issue 27 item 4, one of the candidates the traffic protocol tries).

At each `fit` it learns, from the history it is handed (the last `fit_window_s`), one linear quantile regression per
step ahead k and per quantile (the band's two and the median):

    y(i + k) - y(i)  ~  b0 + b1 (y(i) - y(i-1)) + b2 (y(i) - mean of the last 6) [+ b3 seasonal change(i, k)]

where the seasonal change is the seasonal blend's (`infercast.predictors.seasonal`, weight 1: the median over the
previous `days` of the change the same stretch took then, smoothed).  The forecast is the last value plus the median's
prediction, the band the other two quantiles' (ordered around it).  The first two features are what a local-level
or damped-trend model reads (how far the last sample is off the recent mean, and the last step); the regression
decides how much of each to trust, per horizon.  With fewer than `MIN_ROWS` rows to learn from, it is the last value.
"""

from __future__ import annotations

import warnings

import numpy as np

from infercast.predictors.base import DEFAULT_BAND, Forecast, History, future_grid
from infercast.predictors.naive import ffill
from infercast.predictors.seasonal import DAY, SeasonalBlend, _dense

MIN_ROWS = 30
RECENT = 6  # samples in the recent mean


class QuantileAR:
    name = "quantile_ar"

    def __init__(
        self,
        seasonal: bool = True,
        days: int = 3,
        smooth_steps: int = 6,
        fit_window_s: float = 4 * DAY,
        season_s: float = DAY,
        band: tuple[float, float] = DEFAULT_BAND,
        clip: tuple[float, float] | None = None,
    ) -> None:
        self.seasonal = seasonal
        self.blend = SeasonalBlend(days, 1.0, smooth_steps, season_s=season_s, band_origins=0)
        self.fit_window_s = fit_window_s
        self.season_s = season_s
        self.band = band
        self.clip = clip
        self.y_: np.ndarray | None = None
        self.step_: float = 0.0
        self.coef_: dict[int, np.ndarray] = {}  # horizon steps n -> (n, 3 quantiles, features)

    def fit(self, histories: list[History]) -> QuantileAR:
        h = histories[0]
        keep = h.t >= h.t[-1] - self.fit_window_s - self.blend.days * self.season_s  # the rows and their lags
        self.step_ = h.step
        self.y_ = _dense(History(h.t[keep], h.y[keep]), self.step_)
        self.coef_ = {}
        return self

    def _features(self, y: np.ndarray, idx: np.ndarray, n: int) -> np.ndarray:
        """(len(idx), n, features) at origins `idx` of the regular series `y`, for steps 1..n ahead."""
        held = ffill(y)
        prev = held[np.maximum(idx - 1, 0)]
        recent = np.array([np.nanmean(y[max(0, i - RECENT + 1) : i + 1]) for i in idx])
        cols = [np.ones(len(idx)), held[idx] - prev, held[idx] - recent]
        x = np.repeat(np.stack(cols, axis=1)[:, None, :], n, axis=1)
        if self.seasonal:
            period = round(self.season_s / self.step_)
            change = self.blend.paths(y, idx, n, period) - held[idx][:, None]
            x = np.concatenate([x, np.nan_to_num(change)[:, :, None]], axis=2)
        return x

    def _coefficients(self, n: int) -> np.ndarray:
        """Per step ahead and quantile, the regression's coefficients on the fitted history (zeros: last value)."""
        if n in self.coef_:
            return self.coef_[n]
        from statsmodels.regression.quantile_regression import QuantReg

        y = self.y_
        idx = np.arange(RECENT, len(y) - 1)
        x = self._features(y, idx, n)
        coef = np.zeros((n, 3, x.shape[2]))
        held = ffill(y)
        for k in range(1, n + 1):
            rows = idx[idx + k < len(y)]
            target = y[rows + k] - held[rows]
            xk = x[: len(rows), k - 1, :]
            ok = np.isfinite(target) & np.isfinite(xk).all(axis=1)
            if ok.sum() < MIN_ROWS:
                continue
            for j, q in enumerate((self.band[0], 0.5, self.band[1])):
                with warnings.catch_warnings():  # an iteration-limit warning still leaves a usable fit
                    warnings.simplefilter("ignore")
                    coef[k - 1, j] = QuantReg(target[ok], xk[ok]).fit(q=q).params
        self.coef_[n] = coef
        return coef

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        if self.y_ is None:
            self.fit([history])
        grid = future_grid(history, horizon_s)
        n = len(grid)
        coef = self._coefficients(n)
        period = round(self.season_s / self.step_)
        y = _dense(history, self.step_)[-(self.blend.days * period + self.blend.smooth_steps + n + RECENT + 2) :]
        if not np.isfinite(y).any():
            raise ValueError(f"{self.name}: no finite sample in the history")
        x = self._features(y, np.array([len(y) - 1]), n)[0]  # (n, features)
        last = ffill(y)[-1]
        lower, yhat, upper = (last + np.einsum("kf,kf->k", x, coef[:, j]) for j in range(3))
        lower, upper = np.minimum(lower, yhat), np.maximum(upper, yhat)
        if self.clip is not None:
            yhat, lower, upper = (np.clip(a, *self.clip) for a in (yhat, lower, upper))
        return Forecast(grid, yhat, lower, upper, self.band, self.name)
