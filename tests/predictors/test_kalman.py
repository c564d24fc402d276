"""The Kalman baseline's filter on floats gives filterpy's numbers (issue 25 moved it off filterpy for speed)."""

from __future__ import annotations

import numpy as np
import pytest

from infercast.predictors.kalman import Kalman, robust_diff_var


def _filterpy_states(k: Kalman, y: np.ndarray) -> np.ndarray:
    """The filter as it was: filterpy's KalmanFilter.batch_filter."""
    from filterpy.kalman import KalmanFilter

    c = robust_diff_var(y) / (k.q_level + 2 * k.r)
    c = max(c, 1e-12 * max(1.0, float(np.mean(np.abs(y))) ** 2))
    kf = KalmanFilter(dim_x=2, dim_z=1)
    kf.F = np.array([[1.0, 1.0], [0.0, 1.0]])
    kf.H = np.array([[1.0, 0.0]])
    kf.Q = np.diag([k.q_level, k.q_trend]) * c
    kf.R = np.array([[k.r * c]])
    kf.x = np.array([[y[0]], [0.0]])
    kf.P = np.diag([k.r * c, k.q_trend * c * 10])
    means, _, _, _ = kf.batch_filter([None if not np.isfinite(v) else np.array([[v]]) for v in y])
    return means[:, :, 0]


@pytest.mark.parametrize("seed", range(6))
def test_the_filter_matches_filterpy(seed):
    pytest.importorskip("filterpy")
    rng = np.random.default_rng(seed)
    n = int(rng.integers(2, 1500))
    scale = [1.0, 12_000.0, 1e-4][seed % 3]  # a KV ratio, a request rate, a near-flat series
    y = scale * (0.5 + np.cumsum(rng.normal(0, 0.01, n)) + 0.3 * (np.arange(n) > n // 2))
    y[rng.random(n) < 0.1] = np.nan
    y[0] = scale * 0.5
    if seed == 5:
        y[1:] = y[0]  # constant: the floor on the noise scale
    k = Kalman(q_level=[1.0, 0.5][seed % 2], q_trend=0.1, r=10.0)
    got, want = k.filter_states(y), _filterpy_states(k, y)
    np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12 * scale)
