"""The small quantile model: it learns from the history how much of the last step and of the recent mean to trust."""

from __future__ import annotations

import numpy as np

from infercast.predictors.base import History
from infercast.predictors.naive import LastValue
from infercast.predictors.quantile_ar import QuantileAR

STEP = 600.0


def test_on_noise_around_a_level_it_forecasts_the_level_and_its_band_covers():
    rng = np.random.default_rng(0)
    t = np.arange(0, 3 * 86400, STEP)
    y = 100 + rng.normal(0, 10, len(t))
    m = QuantileAR(seasonal=False).fit([History(t[:300], y[:300])])
    errors, last_errors, inside = [], [], []
    for o in range(300, len(t) - 1):
        h = History(t[: o + 1], y[: o + 1])
        f = m.forecast(h, STEP)
        errors.append(abs(f.yhat[0] - y[o + 1]))
        last_errors.append(abs(LastValue().forecast(h, STEP).yhat[0] - y[o + 1]))
        inside.append(f.yhat_lower[0] <= y[o + 1] <= f.yhat_upper[0])
    # The last value carries the noise of one sample twice over; the recent mean much less of it.
    assert np.mean(errors) < 0.85 * np.mean(last_errors)
    assert 0.7 <= np.mean(inside) <= 0.9  # the P10-P90 band, learned as quantiles


def test_with_too_little_history_it_is_the_last_value():
    t = np.arange(0, 10 * STEP, STEP)
    y = np.linspace(100, 200, len(t))
    h = History(t, y)
    f = QuantileAR().fit([h]).forecast(h, 3 * STEP)
    np.testing.assert_array_equal(f.yhat, np.full(3, 200.0))
