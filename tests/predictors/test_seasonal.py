"""The seasonal blend: the last value plus the change the same stretch took on the previous days."""

from __future__ import annotations

import numpy as np

from infercast.predictors.base import History
from infercast.predictors.naive import LastValue
from infercast.predictors.seasonal import SeasonalBlend

DAY = 86400.0
STEP = 600.0


def _daily_ramp(days: int, noise: float = 1.0, seed: int = 0) -> History:
    """200 req/s, rising to 500 between 09:00 and 10:00 every day, back down at 18:00."""
    t = np.arange(0, days * DAY, STEP)
    hour = (t % DAY) / 3600
    shape = 200 + 300 * np.clip(hour - 9, 0, 1) * (hour < 18)
    return History(t, shape + np.random.default_rng(seed).normal(0, noise, len(t)))


def test_the_morning_ramp_seen_on_previous_days_is_forecast_where_the_last_value_misses_it():
    h = _daily_ramp(5).upto(4 * DAY + 9 * 3600)  # the fifth morning, at 09:00
    blend = SeasonalBlend(days=3, weight=1.0, smooth_steps=0).forecast(h, 3600)
    last = LastValue().forecast(h, 3600)
    truth = 200 + 300 * np.clip((blend.t % DAY) / 3600 - 9, 0, 1)
    assert np.abs(blend.yhat - truth).max() < 10
    assert np.abs(last.yhat - truth)[-1] > 290
    assert np.all(blend.yhat_lower <= blend.yhat) and np.all(blend.yhat <= blend.yhat_upper)


def test_one_odd_day_does_not_move_the_forecast():
    h = _daily_ramp(5)
    y = h.y.copy()
    odd = (h.t >= 2 * DAY + 9 * 3600) & (h.t < 2 * DAY + 10 * 3600)  # day 2 had an incident during the ramp
    y[odd] = 50.0
    cut = 4 * DAY + 9 * 3600
    clean = SeasonalBlend(days=3, weight=1.0).forecast(h.upto(cut), 3600).yhat
    spoiled = SeasonalBlend(days=3, weight=1.0).forecast(History(h.t, y).upto(cut), 3600).yhat
    assert np.abs(spoiled - clean).max() < 10  # the median of three days keeps the odd one out


def test_without_a_day_of_history_it_is_the_last_value():
    h = _daily_ramp(1, noise=5.0).upto(0.5 * DAY)
    blend = SeasonalBlend(days=3, weight=1.0).forecast(h, 3600)
    np.testing.assert_array_equal(blend.yhat, LastValue().forecast(h, 3600).yhat)


def test_the_in_sample_paths_of_the_band_see_only_their_past():
    h = _daily_ramp(4, noise=5.0)
    m = SeasonalBlend(days=2, weight=0.5, smooth_steps=3)
    period = round(DAY / STEP)
    origins = np.array([2 * period + 50, 3 * period + 10, len(h.y) - 7])
    whole = m.paths(h.y, origins, 6, period)
    for i, o in enumerate(origins):
        alone = m.paths(h.y[: o + 1], np.array([o]), 6, period)[0]
        np.testing.assert_allclose(whole[i], alone)
