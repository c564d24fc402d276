"""Kalman filter with a local linear trend (level + trend per step), filterpy's equations on floats.

Dynamo's planner defaults are q_level 1.0, q_trend 0.1, r 10 for request counts.  Here they keep their ratios and
are **scaled to the series**: for a local linear trend the variance of first differences is about
`q_level + 2 r` (trend variance neglected), so all three are multiplied by `c = var(diff(y)) / (q_level + 2 r)`,
with var estimated robustly (1.4826 x MAD of the differences, so a single burst does not set the noise level).
The same defaults then work for a 0-1 KV ratio and for 12,000 requests/s.  Missing samples skip the update.
"""

from __future__ import annotations

import numpy as np

from infercast.predictors.naive import LocalForecaster, origin_indices


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
        """Posterior (level, trend) after each sample, shape (len(y), 2).

        filterpy's `KalmanFilter.batch_filter` (predict, then update where the sample is finite, the Joseph form for
        the covariance) written out for this 2-state model on floats: the same numbers (`tests/predictors/
        test_kalman.py` holds them to filterpy's), without a small matrix product per step in numpy, which made this
        filter the predictor's slowest baseline (issue 25)."""
        c = robust_diff_var(y) / (self.q_level + 2 * self.r)
        c = max(c, 1e-12 * max(1.0, float(np.mean(np.abs(y))) ** 2))
        q0, q1, r = self.q_level * c, self.q_trend * c, self.r * c
        x0, x1 = float(y[0]), 0.0
        p00, p01, p10, p11 = r, 0.0, 0.0, self.q_trend * c * 10
        out = np.empty((len(y), 2))
        for i, z in enumerate(y.tolist()):
            # predict: x <- F x, P <- F P F' + Q, F = [[1, 1], [0, 1]]
            x0 += x1
            p00, p01, p10, p11 = p00 + p01 + p10 + p11 + q0, p01 + p11, p10 + p11, p11 + q1
            if z == z and abs(z) != float("inf"):  # update with H = [1, 0], R = r
                s = p00 + r
                k0, k1 = p00 / s, p10 / s
                e = z - x0
                x0 += k0 * e
                x1 += k1 * e
                # Joseph form: P <- (I - K H) P (I - K H)' + K R K'
                a00, a10 = 1.0 - k0, -k1
                b00, b01 = a00 * p00, a00 * p01
                b10, b11 = a10 * p00 + p10, a10 * p01 + p11
                p00, p01 = b00 * a00 + k0 * r * k0, b00 * a10 + b01 + k0 * r * k1
                p10, p11 = b10 * a00 + k1 * r * k0, b10 * a10 + b11 + k1 * r * k1
            out[i, 0], out[i, 1] = x0, x1
        return out

    def _paths(self, t, y, n, step):
        first = int(np.argmax(np.isfinite(y)))  # the filter starts at the first observed sample
        states = self.filter_states(y[first:])
        k = np.arange(1, n + 1)
        path = states[-1, 0] + states[-1, 1] * k
        origins = origin_indices(len(states), self.band_origins, first=1)
        paths = states[origins, 0][:, None] + states[origins, 1][:, None] * k[None, :]
        return path, origins + first, paths
