"""Kalman filter with a local linear trend (level + trend per step), from filterpy.

Dynamo's planner defaults are q_level 1.0, q_trend 0.1, r 10 for request counts.  Here they keep their ratios and
are **scaled to the series**: for a local linear trend the variance of first differences is about
`q_level + 2 r` (trend variance neglected), so all three are multiplied by `c = var(diff(y)) / (q_level + 2 r)`,
with var estimated robustly (1.4826 x MAD of the differences, so a single burst does not set the noise level).
The same defaults then work for a 0-1 KV ratio and for 12,000 requests/s.  Missing samples skip the update.
"""

from __future__ import annotations

import numpy as np

from predictors.naive import LocalForecaster, origin_indices


def robust_diff_var(y: np.ndarray) -> float:
    d = np.diff(y)
    d = d[np.isfinite(d)]
    if len(d) == 0:
        return 0.0
    mad = float(np.median(np.abs(d - np.median(d))))
    s = 1.4826 * mad
    if s == 0.0:
        s = float(np.std(d))
    return s * s


class Kalman(LocalForecaster):
    name = "kalman"

    def __init__(
        self, q_level: float = 1.0, q_trend: float = 0.1, r: float = 10.0, window_s: float = 3600.0, **kw
    ) -> None:
        super().__init__(**kw)
        self.q_level, self.q_trend, self.r = q_level, q_trend, r
        self.window_s = float(window_s)

    def filter_states(self, y: np.ndarray) -> np.ndarray:
        """Posterior (level, trend) after each sample, shape (len(y), 2)."""
        from filterpy.kalman import KalmanFilter

        c = robust_diff_var(y) / (self.q_level + 2 * self.r)
        c = max(c, 1e-12 * max(1.0, float(np.mean(np.abs(y))) ** 2))
        kf = KalmanFilter(dim_x=2, dim_z=1)
        kf.F = np.array([[1.0, 1.0], [0.0, 1.0]])
        kf.H = np.array([[1.0, 0.0]])
        kf.Q = np.diag([self.q_level, self.q_trend]) * c
        kf.R = np.array([[self.r * c]])
        kf.x = np.array([[y[0]], [0.0]])
        kf.P = np.diag([self.r * c, self.q_trend * c * 10])
        zs = [None if not np.isfinite(v) else np.array([[v]]) for v in y]
        means, _, _, _ = kf.batch_filter(zs)
        return means[:, :, 0]

    def _paths(self, t, y, n, step):
        first = int(np.argmax(np.isfinite(y)))  # the filter starts at the first observed sample
        states = self.filter_states(y[first:])
        k = np.arange(1, n + 1)
        path = states[-1, 0] + states[-1, 1] * k
        origins = origin_indices(len(states), self.band_origins, first=1)
        paths = states[origins, 0][:, None] + states[origins, 1][:, None] * k[None, :]
        return path, origins + first, paths
