"""Prometheus' `predict_linear(v[15m], h)` as a forecaster, with PromQL's exact least-squares semantics.

PromQL (promql/functions.go `funcPredictLinear`, `linearRegression`): ordinary least squares over the samples in
the range `[t - 15m, t]` with x measured in seconds from the evaluation time `t`, so the intercept is the fitted
value at `t` (not at the last sample); the prediction is `intercept + slope * h`.  Fewer than two samples give no
result; a constant range gives slope 0.  Here `t` is the history's last sample time, and the path over the horizon
is `predict_linear` evaluated for every `h` on the grid.  `tests/predictors/test_linear_promql.py` compares this
with a real Prometheus.
"""

from __future__ import annotations

import numpy as np

from infercast.predictors.naive import LocalForecaster, origin_indices

PROMQL_WINDOW_S = 900.0


def promql_linear_regression(t: np.ndarray, y: np.ndarray, t_eval: float) -> tuple[float, float]:
    """(slope per second, intercept at `t_eval`) exactly as PromQL's `linearRegression` computes them."""
    if len(y) < 2:
        return float("nan"), float("nan")
    if np.all(y == y[0]):
        return 0.0, float(y[0])
    x = t - t_eval
    n = len(x)
    sum_x, sum_y = float(np.sum(x)), float(np.sum(y))
    cov_xy = float(np.sum(x * y)) - sum_x * sum_y / n
    var_x = float(np.sum(x * x)) - sum_x * sum_x / n
    slope = cov_xy / var_x
    return slope, sum_y / n - slope * sum_x / n


def predict_linear(t: np.ndarray, y: np.ndarray, t_eval: float, horizons_s: np.ndarray, window_s: float) -> np.ndarray:
    """`predict_linear(v[window], h)` at `t_eval` for each h; samples in `[t_eval - window, t_eval]` (2.x: closed)."""
    sel = (t >= t_eval - window_s) & (t <= t_eval) & np.isfinite(y)
    slope, intercept = promql_linear_regression(t[sel], y[sel], t_eval)
    if not np.isfinite(slope):
        # PromQL returns nothing for fewer than two samples; as a forecaster the last value is the honest stand-in.
        return np.full(len(horizons_s), y[sel][-1] if sel.any() else np.nan)
    return intercept + slope * horizons_s


class PredictLinear(LocalForecaster):
    """The baseline a Prometheus user writes: `predict_linear(metric[15m], 300)`."""

    name = "predict_linear"

    def __init__(self, window_s: float = PROMQL_WINDOW_S, **kw) -> None:
        super().__init__(**kw)
        self.range_s = float(window_s)
        self.window_s = max(self.window_s, self.range_s * 2)

    def _paths(self, t, y, n, step):
        h = step * np.arange(1, n + 1)
        path = predict_linear(t, y, t[-1], h, self.range_s)
        origins = origin_indices(len(y), self.band_origins, first=1)
        paths = np.array([predict_linear(t, y, t[o], h, self.range_s) for o in origins]).reshape(len(origins), n)
        return path, origins, paths
