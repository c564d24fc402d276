"""Holt's double exponential smoothing (level + damped additive trend), fitted by statsmodels on the recent window.

The smoothing parameters are re-estimated at every forecast on the last `window_s` of history (least squares,
statsmodels' `ExponentialSmoothing(trend="add")`).  The trend is damped (phi estimated, at most 0.98) because an
undamped trend extrapolated 300 s ahead from a burst overshoots badly; `damped=False` gives textbook Holt.  No
seasonal term: at a 15 s step a daily season is 5,760 samples, which is Prophet's job.  In-sample paths for the band
use the fitted level and trend at each origin (the smoothing only ever used data before the origin; the parameters
used the whole window).
"""

from __future__ import annotations

import warnings

import numpy as np

from infercast.predictors.naive import LocalForecaster, interpolate, origin_indices


class HoltWinters(LocalForecaster):
    name = "holt_winters"

    def __init__(self, damped: bool = True, window_s: float = 3600.0, **kw) -> None:
        super().__init__(**kw)
        self.damped = damped
        self.window_s = float(window_s)

    def _paths(self, t, y, n, step):
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        fin = np.nonzero(np.isfinite(y))[0]
        first, last = int(fin[0]), int(fin[-1])
        late = len(y) - 1 - last  # missing samples at the end: the path starts that many steps further out
        # statsmodels takes no NaN: holes between observed samples are interpolated.
        y = interpolate(y[first : last + 1])
        if len(y) < 6 or np.ptp(y) == 0:
            origins = origin_indices(len(y), self.band_origins, first=0)
            return np.full(n, y[-1]), origins + first, np.repeat(y[origins][:, None], n, axis=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # convergence chatter on flat or short windows
            model = ExponentialSmoothing(
                y,
                trend="add",
                damped_trend=self.damped,
                initialization_method="estimated",
                bounds={"damping_trend": (0.8, 0.98)} if self.damped else None,
            )
            res = model.fit(optimized=True)
        phi = float(res.params.get("damping_trend", 1.0)) if self.damped else 1.0
        if not np.isfinite(phi):
            phi = 1.0
        # sum_{j=1..k} phi^j: the damped trend multiplier at k steps ahead.
        mult = np.cumsum(phi ** np.arange(1, n + late + 1))
        level, trend = np.asarray(res.level), np.asarray(res.trend)
        path = (level[-1] + trend[-1] * mult)[late:]
        origins = origin_indices(len(y), self.band_origins, first=1)
        paths = level[origins][:, None] + trend[origins][:, None] * mult[None, :n]
        return path, origins + first, paths
