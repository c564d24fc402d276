"""Prophet: seasonality and the event calendar do what a user would expect (small series, fast fits)."""

from __future__ import annotations

import numpy as np
import pytest

from infercast.config import Event
from infercast.predictors.base import History
from infercast.predictors.naive import SeasonalNaive
from infercast.predictors.prophet_model import ProphetForecaster, event_windows

pytest.importorskip("prophet")


def test_events_from_seconds_and_iso_times():
    evs = event_windows(
        [
            Event(name="flash sale", start="600", end="1800", lower_window_seconds=60),
            Event(name="v5 upgrade", kind="upgrade", start="1970-01-01T01:00:00", end="1970-01-01T02:00:00"),
        ]
    )
    assert [(e.name, e.start_s, e.end_s) for e in evs] == [
        ("event_flash_sale", 540.0, 1800.0),
        ("event_v5_upgrade", 3600.0, 7200.0),
    ]
    with pytest.raises(ValueError, match="neither seconds nor an ISO time"):
        event_windows([Event(name="x", start="soon", end="later")])


def test_daily_seasonality_forecasts_the_evening_peak():
    t = np.arange(0, 6 * 86400, 600.0)
    rng = np.random.default_rng(0)
    y = 200 + 150 * np.maximum(0, np.sin(2 * np.pi * (t - 6 * 3600) / 86400)) + rng.normal(0, 5, len(t))
    f = ProphetForecaster(uncertainty_samples=50).forecast(History(t, y), 86400)
    truth = 200 + 150 * np.maximum(0, np.sin(2 * np.pi * (f.t - 6 * 3600) / 86400))
    peak = np.argmax(truth)
    assert abs(f.yhat[peak] - truth[peak]) < 25  # within 7% at the day's peak
    assert np.all(f.yhat_lower <= f.yhat) and np.all(f.yhat <= f.yhat_upper)


def test_event_regressor_learns_a_promotion_and_applies_it_to_the_next_one():
    # Two promotions a day apart (5x traffic for an hour); the model has seen the first one.  Seasonal naive is
    # right by construction here, so compare to a Prophet without the calendar instead.
    t = np.arange(0, 3 * 86400, 600.0)
    promo = ((t % 86400) >= 12 * 3600) & ((t % 86400) < 13 * 3600)
    y = np.where(promo, 1000.0, 200.0) + np.random.default_rng(1).normal(0, 5, len(t))
    events = [
        Event(name=f"promo{d}", start=str(d * 86400 + 12 * 3600), end=str(d * 86400 + 13 * 3600 - 1)) for d in range(3)
    ]
    # One event name per day would be three regressors; the calendar uses the same name for a recurring event.
    events = [Event(name="promo", start=e.start, end=e.end) for e in events]
    cut = 2 * 86400 + 11 * 3600  # one hour before the third promotion
    h = History(t[t <= cut], y[t <= cut])
    with_cal = ProphetForecaster(events=events, uncertainty_samples=50, daily=False).forecast(h, 2 * 3600)
    without = ProphetForecaster(uncertainty_samples=50, daily=False).forecast(h, 2 * 3600)
    during = (with_cal.t % 86400 >= 12 * 3600) & (with_cal.t % 86400 < 13 * 3600)
    assert np.mean(with_cal.yhat[during]) > 800
    assert np.mean(without.yhat[during]) < 500
    assert SeasonalNaive(86400).forecast(h, 2 * 3600).yhat[during].mean() > 900


def test_refits_itself_when_the_history_has_grown_by_a_quarter():
    t = np.arange(0, 3600, 15.0)
    y = 50 + 0.01 * t
    m = ProphetForecaster(uncertainty_samples=0)
    m.fit([History(t[:40], y[:40])])  # 585 s of history
    m.forecast(History(t[:45], y[:45]), 300)  # +75 s: 13% more, keeps the fitted model
    assert m.fitted_until_ == t[39]
    m.forecast(History(t[:60], y[:60]), 300)  # +300 s: 51% more, refits on what it was handed
    assert m.fitted_until_ == t[59]
