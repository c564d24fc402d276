"""Seasonal-difference traffic forecast: the last value plus the change the same stretch of time took on the
previous days (issue 27 item 4).  Pure numpy; nothing is learned in `fit`.

For an origin `o` and a step `o + k` ahead, with `P` the season (a day):

    yhat(o + k) = y(o) + weight * median over d = 1..days of [ s(o + k - d P) - s(o - d P) ]

where `s` is the series averaged over `smooth_steps` samples either side (0: the samples themselves) and `y(o)` the
last observed value.  The median over days keeps one odd day (an incident, a promotion) out of the change; the
weight shrinks a change the days do not agree on towards the last value (weight 0 is the last value, weight 1 the
full seasonal difference).  Days without data at both ends are left out; with none at all (a history shorter than a
season and a horizon) the forecast is the last value.  The stretch `o - d P + k + smooth_steps` must be in the past
of the origin, so the horizon plus the smoothing must be shorter than the season.

The band is the residual band of the local baselines (`infercast.predictors.naive.residual_band`): the same rule re-run
at the last `band_origins` origins of the history, its errors' quantiles per step ahead.

The defaults (`CHOSEN`) are the settings with the lowest error on the training windows of the traffic protocol
(ServeGen language/m-large, origins in days 1-4, 600 s ahead; docs/forecasting.md, "Traffic"), among the grid
`bench/forecast.py` tries (`choose_traffic`, which says so when its choice differs from these).  There the blend
did not beat the last value (mae 13.57 against 13.52 req/s), so it is scored beside the other models and is not the
service's traffic model.
"""

from __future__ import annotations

import numpy as np

from infercast.predictors.base import DEFAULT_BAND, Forecast, History, future_grid
from infercast.predictors.naive import ffill, origin_indices, residual_band

DAY = 86400.0
#: days, weight, smooth_steps chosen on the training windows (see above)
CHOSEN = {"days": 3, "weight": 0.25, "smooth_steps": 6}


class SeasonalBlend:
    name = "seasonal_blend"

    def __init__(
        self,
        days: int = CHOSEN["days"],
        weight: float = CHOSEN["weight"],
        smooth_steps: int = CHOSEN["smooth_steps"],
        season_s: float = DAY,
        band: tuple[float, float] = DEFAULT_BAND,
        clip: tuple[float, float] | None = None,
        band_origins: int = 240,
    ) -> None:
        if days < 1 or not 0.0 <= weight <= 1.0 or smooth_steps < 0:
            raise ValueError(
                f"seasonal_blend: days >= 1, 0 <= weight <= 1, smooth_steps >= 0; got {days}, {weight}, {smooth_steps}"
            )
        self.days, self.weight, self.smooth_steps = days, weight, smooth_steps
        self.season_s = float(season_s)
        self.band = band
        self.clip = clip
        self.band_origins = band_origins

    def fit(self, histories: list[History]) -> SeasonalBlend:
        return self

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        grid = future_grid(history, horizon_s)
        step = history.step
        n = len(grid)
        period = round(self.season_s / step)
        if n + self.smooth_steps >= period:
            raise ValueError(f"{self.name}: horizon plus smoothing must be shorter than the season")
        y = _dense(history, step)
        y = y[-(self.days * period + self.band_origins + self.smooth_steps + n + 2) :]  # all any origin looks at
        if not np.isfinite(y).any():
            raise ValueError(f"{self.name}: no finite sample in the history")
        origins = origin_indices(len(y), self.band_origins, first=0)
        paths = self.paths(y, np.append(origins, len(y) - 1), n, period)
        path, past = paths[-1], paths[:-1]
        lo, hi = residual_band(y, origins, past, self.band)
        yhat, lower, upper = path, path + lo, path + hi
        if self.clip is not None:
            yhat, lower, upper = (np.clip(a, *self.clip) for a in (yhat, lower, upper))
        return Forecast(grid, yhat, lower, upper, self.band, self.name)

    def paths(self, y: np.ndarray, origins: np.ndarray, n: int, period: int) -> np.ndarray:
        """Forecast paths of `n` steps from each origin (indices into the regular series `y`, NaN where missing)."""
        held = ffill(y)
        s = _smooth(y, self.smooth_steps)
        k = np.arange(1, n + 1)
        changes = np.full((len(origins), n, self.days), np.nan)
        for j, d in enumerate(range(1, self.days + 1)):
            then = origins - d * period  # the origin's time d seasons ago
            ok = then >= 0
            ahead = np.where(ok[:, None], then[:, None] + k[None, :], 0)
            base = np.where(ok, s[np.maximum(then, 0)], np.nan)
            changes[:, :, j] = np.where(ok[:, None], s[ahead] - base[:, None], np.nan)
        have = np.isfinite(changes).any(axis=2)
        change = np.zeros((len(origins), n))
        if have.any():
            change[have] = np.nanmedian(changes[have], axis=1)
        return held[origins][:, None] + self.weight * change


def _dense(history: History, step: float) -> np.ndarray:
    """The history on its regular grid (NaN where a sample is missing), so index arithmetic is time arithmetic."""
    idx = np.round((history.t - history.t[0]) / step).astype(int)
    out = np.full(idx[-1] + 1, np.nan)
    out[idx] = np.where(np.isfinite(history.y), history.y, np.nan)
    return out


def _smooth(y: np.ndarray, m: int) -> np.ndarray:
    """Mean of the finite samples within `m` either side (the sample itself when m = 0); NaN where there is none."""
    if m == 0:
        return y
    ok = np.isfinite(y)
    kernel = np.ones(2 * m + 1)
    total = np.convolve(np.where(ok, y, 0.0), kernel, mode="same")
    count = np.convolve(ok.astype(float), kernel, mode="same")
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan)
