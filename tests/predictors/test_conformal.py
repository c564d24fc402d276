"""Bands calibrated per series and online: whatever the model's own band, the published band holds its stated
coverage on the series it runs on, calm or bursty."""

from __future__ import annotations

import numpy as np

from infercast.predictors.base import Forecast, History, future_grid
from infercast.predictors.conformal import AdaptiveBand


class FixedBand:
    """Last value with a band of a fixed half-width: too narrow or too wide for the series, on purpose."""

    band = (0.1, 0.9)

    def __init__(self, width: float) -> None:
        self.width = width
        self.name = "fixed"

    def fit(self, histories):
        return self

    def forecast(self, history: History, horizon_s: float) -> Forecast:
        t = future_grid(history, horizon_s)
        y = np.full(len(t), history.y[-1])
        return Forecast(t, y, y - self.width, y + self.width, self.band, self.name)


def _coverage_at_horizon(noise: float, width: float, n: int = 900, h: int = 4) -> tuple[float, float]:
    rng = np.random.default_rng(1)
    t = 15.0 * np.arange(n)
    y = 10 + np.cumsum(noise * rng.standard_normal(n))
    model = AdaptiveBand(FixedBand(width), gamma=0.05)
    hits = []
    for i in range(50, n - h):
        fc = model.forecast(History(t[: i + 1], y[: i + 1]), 15.0 * h)
        hits.append(fc.yhat_lower[-1] <= y[i + h] <= fc.yhat_upper[-1])
    late = np.array(hits[-500:])
    return float(late.mean()), model.factors[1]


def test_a_band_far_too_narrow_widens_to_its_stated_coverage():
    cov, up = _coverage_at_horizon(noise=1.0, width=0.2)
    assert 0.72 <= cov <= 0.9  # nominal 0.80 (P10-P90); the raw band would cover about 8%
    assert up > 5


def test_a_band_far_too_wide_narrows_to_its_stated_coverage():
    cov, up = _coverage_at_horizon(noise=0.1, width=1.0)
    assert 0.72 <= cov <= 0.9  # the raw band would cover everything
    assert up < 0.5


def test_a_new_series_starts_from_the_models_own_band():
    model = AdaptiveBand(FixedBand(0.1))
    t = 15.0 * np.arange(100)
    for i in range(30, 100):
        model.forecast(History(t[: i + 1], np.sin(t[: i + 1])), 60.0)
    assert model.updates > 0
    model.forecast(History(t[:20], np.zeros(20)), 60.0)  # the clock went back: another series
    assert model.factors == (1.0, 1.0) and model.updates == 0
