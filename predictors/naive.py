"""Last value and seasonal naive, plus what every local baseline shares: the window and the residual band.

Local models (last value, predict_linear, Holt-Winters, Kalman) learn nothing in `fit`; in `forecast` they look at
the recent window of the history they are handed.

**How baseline bands are made (empirical residual quantiles).**  The model is re-run as it would have run at each
of the last `band_origins` (240) sample times inside the window it was handed (only data before each origin is used for
the state at that origin).  For each step-ahead k the errors `y[origin + k] - path_origin[k]` are collected, and
the band at k is `yhat[k] + quantile(errors_k, lower)` to `yhat[k] + quantile(errors_k, upper)`.  Where fewer than
`MIN_RESIDUALS` errors exist for some k (short histories), the widest well-estimated step is scaled by
`sqrt(k / k0)` (random-walk growth); with none at all, the spread of first differences times sqrt(k) is used.
"""

from __future__ import annotations

import math

import numpy as np

from infercast.predictors.base import DEFAULT_BAND, Forecast, History, future_grid

MIN_RESIDUALS = 8


def residual_band(
    y: np.ndarray, origins: np.ndarray, paths: np.ndarray, band: tuple[float, float]
) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (lower, upper) per step ahead from in-sample errors; see the module docstring.

    `y` the window's values, `origins` indices into `y`, `paths[m, k]` the forecast made at `origins[m]` for
    `origins[m] + k + 1`.
    """
    m, n = paths.shape if paths.ndim == 2 else (0, 0)
    lo = np.full(n, np.nan)
    hi = np.full(n, np.nan)
    if m:
        target = origins[:, None] + np.arange(1, n + 1)[None, :]
        valid = target < len(y)
        actual = np.where(valid, y[np.minimum(target, len(y) - 1)], np.nan)
        err = actual - paths
        err[~np.isfinite(err)] = np.nan  # +-inf errors are dropped like NaN ones
        count = np.count_nonzero(~np.isnan(err), axis=0)
        enough = count >= MIN_RESIDUALS
        if enough.any():
            ranked = np.sort(err[:, enough], axis=0)  # NaN sort last: each column's finite errors come first
            lo[enough] = column_quantile(ranked, count[enough], band[0])
            hi[enough] = column_quantile(ranked, count[enough], band[1])
    good = np.nonzero(np.isfinite(lo))[0]
    steps = np.arange(1, len(lo) + 1)
    if len(good):
        k0 = good[-1]
        fill = ~np.isfinite(lo)
        scale = np.sqrt(steps[fill] / steps[k0])
        lo[fill], hi[fill] = lo[k0] * scale, hi[k0] * scale
    else:
        d = np.diff(y[np.isfinite(y)])
        s = float(np.std(d)) if len(d) >= 2 else 0.0
        z_lo, z_hi = _normal_ppf(band[0]), _normal_ppf(band[1])
        lo, hi = z_lo * s * np.sqrt(steps), z_hi * s * np.sqrt(steps)
    # A band must contain its centre: quantiles of a biased error set can both be on one side.
    return np.minimum(lo, 0.0), np.maximum(hi, 0.0)


def column_quantile(ranked: np.ndarray, count: np.ndarray, q: float) -> np.ndarray:
    """`np.quantile(column[:count], q)` of each column of `ranked` (sorted, each column's `count` values first), by
    numpy's own default ("linear") method and floating-point operations in the same order, so the values are the
    same (to the bit, but for which of -0.0 and 0.0 a tie of zeros gives; tests/predictors/test_contract.py checks
    it against `np.quantile` for any input).  One sort of the whole matrix instead of two `np.quantile` calls per
    step ahead: the calls cost the twin's `predictive` arm about 8% of its time (`bench/twin.py --before`)."""
    virtual = (count - 1) * q
    below = np.floor(virtual)
    last = virtual >= count - 1  # q = 1, or one value: numpy takes the last value, its index -1 ...
    gamma = virtual - np.where(last, -1.0, below)  # ... and its weight from that index (it matters to a -0.0)
    first = below.astype(np.intp)
    second = np.where(last, first, first + 1)
    first = np.where(last, count - 1, first)
    second = np.where(last, count - 1, second)
    cols = np.arange(ranked.shape[1])
    a, b = ranked[first, cols], ranked[second, cols]
    diff = b - a
    out = a + diff * gamma
    upper = gamma >= 0.5  # numpy's _lerp: from the upper neighbour past the midpoint
    out[upper] = (b - diff * (1 - gamma))[upper]
    return out


def _normal_ppf(q: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(q))


class LocalForecaster:
    """Shared shape of the local baselines: subclasses implement `_paths(t, y, n, step)`.

    `t`, `y` are the window on its regular grid, NaN where a sample is missing.  `_paths` returns the forecast path
    of `n` steps from the end of the window, and the in-sample paths from earlier origins (indices into the window)
    used for the band.
    """

    name = "local"
    #: seconds of history each forecast looks at (the rest of the history is ignored)
    window_s: float = 3600.0
    band_origins: int = 240

    def __init__(self, band: tuple[float, float] = DEFAULT_BAND, clip: tuple[float, float] | None = None) -> None:
        self.band = band
        self.clip = clip

    def fit(self, histories: list[History]) -> LocalForecaster:
        return self

    def _paths(self, t: np.ndarray, y: np.ndarray, n: int, step: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def window_seconds(self, step: float) -> float:
        """Seconds of history a forecast at this sample step looks at."""
        return self.window_s

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        grid = future_grid(history, horizon_s)
        step = history.step
        # The window keeps missing samples as NaN, so index arithmetic stays time arithmetic on the regular grid
        # (each model skips NaN its own way) and the path is anchored at the history's end even when the last
        # samples are missing.
        window = self.window_seconds(step)
        keep = history.t >= history.t[-1] - window
        t, y = history.t[keep], np.where(np.isfinite(history.y[keep]), history.y[keep], np.nan)
        if not np.isfinite(y).any():
            raise ValueError(f"{self.name}: no finite sample in the last {window:g} s")
        path, origins, paths = self._paths(t, y, len(grid), step)
        if not np.isfinite(path).all():
            raise ValueError(f"{self.name}: no forecast from this history (too few finite samples)")
        lo, hi = residual_band(y, origins, paths, self.band)
        yhat, lower, upper = path, path + lo, path + hi
        if self.clip is not None:
            yhat, lower, upper = (np.clip(a, *self.clip) for a in (yhat, lower, upper))
        return Forecast(grid, yhat, lower, upper, self.band, self.name)


def ffill(y: np.ndarray) -> np.ndarray:
    """Each NaN replaced by the last finite value before it (NaN before the first one)."""
    idx = np.where(np.isfinite(y), np.arange(len(y)), -1)
    idx = np.maximum.accumulate(idx)
    out = np.where(idx >= 0, y[np.maximum(idx, 0)], np.nan)
    return out


def interpolate(y: np.ndarray) -> np.ndarray:
    """NaN filled linearly between finite neighbours (held flat past the ends)."""
    ok = np.isfinite(y)
    if ok.all():
        return y
    x = np.arange(len(y))
    return np.interp(x, x[ok], y[ok])


def origin_indices(length: int, count: int, first: int = 1) -> np.ndarray:
    """The last `count` origins of a window of `length` samples, never before index `first`."""
    return np.arange(max(first, length - count), length)


def held_paths(held: np.ndarray, n: int, band_origins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A model that holds a level (`held`, one per sample): its path (the last level over the `n` steps), the
    band's origins (the last `band_origins` samples) and the path each of them held."""
    origins = origin_indices(len(held), band_origins, first=0)
    return np.full(n, held[-1]), origins, np.repeat(held[origins][:, None], n, axis=1)


class LastValue(LocalForecaster):
    """Tomorrow is today: the last observed value for the whole horizon."""

    name = "last_value"

    def _paths(self, t, y, n, step):
        return held_paths(ffill(y), n, self.band_origins)


class SeasonalNaive:
    """The value one season ago (same hour yesterday, or last week): the baseline Prophet must beat on traffic.

    Forecasts each future time with the observed value at `time - season_s` (nearest sample within half a step);
    NaN where that is missing.  The band comes from the spread of season-over-season errors in the history.
    """

    def __init__(self, season_s: float = 86400.0, band: tuple[float, float] = DEFAULT_BAND) -> None:
        self.season_s = float(season_s)
        self.band = band
        self.name = "seasonal_naive_" + ("week" if math.isclose(season_s, 7 * 86400) else f"{season_s:g}s")
        if math.isclose(season_s, 86400):
            self.name = "seasonal_naive_day"

    def fit(self, histories: list[History]) -> SeasonalNaive:
        return self

    def _lookup(self, history: History, times: np.ndarray) -> np.ndarray:
        step = history.step
        idx = np.searchsorted(history.t, times)
        out = np.full(len(times), np.nan)
        for j, (i, tt) in enumerate(zip(idx, times, strict=True)):
            for c in (i - 1, i):
                if 0 <= c < len(history.t) and abs(history.t[c] - tt) <= step / 2:
                    out[j] = history.y[c]
        return out

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        grid = future_grid(history, horizon_s)
        yhat = self._lookup(history, grid - self.season_s)
        past = self._lookup(history, history.t - self.season_s)
        err = history.y - past
        err = err[np.isfinite(err)]
        if len(err) >= MIN_RESIDUALS:
            lo, hi = np.quantile(err, self.band[0]), np.quantile(err, self.band[1])
        else:
            lo = hi = 0.0
        return Forecast(grid, yhat, yhat + min(lo, 0.0), yhat + max(hi, 0.0), self.band, self.name)
