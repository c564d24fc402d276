"""The calendar's announced rate in the traffic forecast: before the flash sale the forecast says 12,000 req/s where
the sale will be, once it is under way it follows what is seen, and it comes back down when the sale ends."""

from __future__ import annotations

import math

import numpy as np
import pytest

from infercast.config import PredictorConfig
from infercast.predictors.announced import AnnouncedTraffic
from infercast.predictors.backtest import run_backtest, score_runs
from infercast.predictors.base import History
from infercast.predictors.deployed import service_forecaster, set_traffic_share
from infercast.predictors.naive import LastValue
from infercast.predictors.prophet_model import EventWindow
from infercast.predictors.service import traffic_shares

SALE = EventWindow("event_flash_sale", 600.0, 1500.0, expected_rps=12000.0)
CLIP = (0.0, math.inf)


def _sale(t_end: float, actual: float = 12000.0) -> History:
    """200 req/s, the sale's `actual` rate over [600, 1500) s, 200 after."""
    t = np.arange(0.0, t_end + 1, 15.0)
    return History(t, np.where((t >= 600) & (t < 1500), actual, 200.0))


def test_before_the_sale_the_forecast_is_the_announced_rate_where_the_sale_will_be():
    fc = AnnouncedTraffic(LastValue(clip=CLIP), [SALE]).forecast(_sale(450.0), 300.0)
    inside = fc.t >= 600
    assert np.allclose(fc.yhat[inside], 12000.0) and np.allclose(fc.yhat_upper[inside], 12000.0)
    assert np.allclose(fc.yhat[~inside], 200.0)  # before the start: the inner model's
    assert fc.yhat_lower[inside].max() < 12000.0  # an announcement is not a guarantee: the lower band stays low


def test_the_series_share_spreads_the_fleet_wide_rate():
    m = AnnouncedTraffic(LastValue(clip=CLIP), [SALE])
    set_traffic_share(m, 0.25)
    fc = m.forecast(_sale(450.0), 300.0)
    assert np.allclose(fc.yhat[fc.t >= 600], 3000.0)


def test_under_way_it_follows_what_is_seen_and_comes_back_down_after_the_end():
    m = AnnouncedTraffic(LastValue(clip=CLIP), [SALE])
    smaller = m.forecast(_sale(900.0, actual=6000.0), 300.0)
    assert np.allclose(smaller.yhat, 6000.0)  # the sale came in at half what was announced: the data wins
    ending = m.forecast(_sale(1350.0), 300.0)
    assert np.allclose(ending.yhat[ending.t < 1500], 12000.0)
    assert np.allclose(ending.yhat[ending.t >= 1500], 200.0)  # the level before the sale
    assert (ending.yhat_lower <= ending.yhat).all() and (ending.yhat <= ending.yhat_upper).all()


def test_without_an_expected_rate_nothing_changes():
    plain = EventWindow("event_launch", 600.0, 1500.0)
    h = _sale(450.0)
    a = AnnouncedTraffic(LastValue(clip=CLIP), [plain]).forecast(h, 300.0)
    b = LastValue(clip=CLIP).forecast(h, 300.0)
    assert np.array_equal(a.yhat, b.yhat) and np.array_equal(a.yhat_upper, b.yhat_upper)


def test_on_a_sale_the_announced_rate_cuts_the_error_against_the_same_model_without_it():
    """The ablation in miniature: the same inner model, with and without the calendar, on an announced sale."""
    h = _sale(1800.0)
    with_cal, without = AnnouncedTraffic(LastValue(clip=CLIP), [SALE]), LastValue(clip=CLIP)
    with_cal.inner.name = "with"  # type: ignore[misc]
    runs = run_backtest(h, [with_cal, without], 300.0, warmup_s=300.0)
    scores = score_runs(h, runs, 300.0)
    assert scores["with"]["mae"] < 0.2 * scores["last_value"]["mae"]


def test_the_service_pipeline_reads_the_fleet_files_expected_rate():
    from infercast.config import load_config

    fleet = load_config("flash-sale")
    m = service_forecaster("rps", PredictorConfig(), model="kalman", events=fleet.events)
    fc = m.forecast(_sale(450.0), 300.0)
    assert fc.yhat[fc.t >= 600].min() == pytest.approx(12000.0)
    bare = service_forecaster("rps", PredictorConfig(), model="kalman", events=())
    assert bare.forecast(_sale(450.0), 300.0).yhat.max() < 1000.0


def test_traffic_shares_come_from_each_rows_newest_rate():
    y = np.array([[100.0, 300.0, np.nan], [50.0, 100.0, 100.0], [np.nan, np.nan, np.nan]])
    assert np.allclose(traffic_shares(y), [0.75, 0.25, 0.0])
    assert np.allclose(traffic_shares(np.zeros((2, 3))), [0.5, 0.5])
