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


def _both_paths(model: ProphetForecaster, times: np.ndarray, seed: int = 7):
    """The fast path's and Prophet's own `predict`'s (trend, yhat, lower, upper), each from the same random seed."""
    np.random.seed(seed)
    fast = model.components_at(times)
    plan, model.plan_ = model.plan_, None
    try:
        np.random.seed(seed)
        slow = model.components_at(times)
    finally:
        model.plan_ = plan
    return fast, slow


@pytest.mark.parametrize("samples", [0, 200])
def test_the_fast_forecast_is_prophets_own(samples):
    # Daily shape, a recurring promotion (an event regressor) and a real epoch (days since 1970 in the Fourier terms).
    t = np.arange(0, 3 * 86400, 600.0)
    promo = (t % 86400 >= 12 * 3600) & (t % 86400 < 13 * 3600)
    y = 200 + 80 * np.sin(2 * np.pi * t / 86400) + 300 * promo + np.random.default_rng(2).normal(0, 5, len(t))
    events = [
        Event(name="promo", start=str(d * 86400 + 12 * 3600), end=str(d * 86400 + 13 * 3600 - 1)) for d in range(4)
    ]
    cut = 2 * 86400 + 11 * 3600
    h = History(t[t <= cut], y[t <= cut])
    m = ProphetForecaster(events=events, epoch_s=1.7e9, daily=True, uncertainty_samples=samples).fit([h])
    assert m.plan_ is not None and m.regressors_ == ["event_promo"]
    # What the anchored model asks for: the newest samples and the next 3 hours, across the next promotion.
    times = np.concatenate([h.t[-24:], h.t[-1] + 600.0 * np.arange(1, 19)])
    fast, slow = _both_paths(m, times)
    for a, b in zip(fast, slow, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    _trend, yhat, lower, upper = fast
    during = (times % 86400 >= 12 * 3600) & (times % 86400 < 13 * 3600) & (times > cut)
    assert yhat[during].mean() > yhat[~during & (times > cut)].mean() + 200  # the promotion is in the forecast
    if samples:  # a band that widens into the future, as Prophet's does: the fitted span has none of its trend draws
        assert np.all(lower <= yhat) and np.all(yhat <= upper)
        assert (upper - lower)[-1] > (upper - lower)[0]


def test_the_band_has_prophets_distribution_without_a_shared_seed():
    t = np.arange(0, 2 * 86400, 900.0)
    y = 100 + 0.001 * t + np.random.default_rng(3).normal(0, 4, len(t))
    m = ProphetForecaster(uncertainty_samples=1000).fit([History(t, y)])
    times = t[-1] + 900.0 * np.arange(1, 25)
    np.random.seed(1)
    fast = m.components_at(times)
    plan, m.plan_ = m.plan_, None
    np.random.seed(2)
    slow = m.components_at(times)
    m.plan_ = plan
    width_fast, width_slow = fast[3] - fast[2], slow[3] - slow[2]
    np.testing.assert_allclose(width_fast, width_slow, rtol=0.15)  # Monte Carlo error of 1000 draws


def test_models_the_plan_does_not_cover_go_through_prophet():
    t = np.arange(0, 86400, 600.0)
    y = 100 + np.random.default_rng(4).normal(0, 4, len(t))
    m = ProphetForecaster(growth="flat", uncertainty_samples=0).fit([History(t, y)])
    assert m.plan_ is None
    f = m.forecast(History(t, y), 3600)
    assert np.all(np.abs(f.yhat - 100) < 5)
