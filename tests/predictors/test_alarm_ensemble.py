"""The ensemble alarms `bench/tune_alarm.py` tries beside the deployed one (the forecast's band alone): the band
`or` / `max` Prometheus' `predict_linear(usage[15m], 300)`.  What an on-call engineer would see: a steady ramp that
predict_linear extrapolates pages minutes ahead even when the forecast's band does not see it coming, and a flat
series never pages.  (On the tuning runs the ensembles score exactly as the band alone, so the rule keeps the band:
docs/forecasting.md.)"""

from __future__ import annotations

import numpy as np
import pytest

from infercast.predictors.alarm import AlarmPolicy
from infercast.predictors.base import History
from infercast.predictors.scoring import breach_scores
from tests.benches import load_bench

STEP = 15.0
#: the alert as deployed: over 0.75 for 30 s (three evaluations), no hysteresis
POLICY = AlarmPolicy(0.75, persistence=3)
#: a steady ramp (no noise), off the sample grid so no crossing sits on a rounding edge
RAMP = 0.301 + 0.0003 * STEP * np.arange(140)


@pytest.fixture(scope="module")
def tune():
    return load_bench("tune_alarm", "bench_tune_alarm")


def _page(tune, alarm: str, y: np.ndarray, band_above_last: float) -> dict:
    """Scores of the alert reading `alarm` on series `y`, the forecast's band being the last value plus a margin (a
    band that does not see a ramp coming)."""
    t = STEP * np.arange(len(y))
    h = History(t, y)
    origins = t[t >= 900.0]  # predict_linear's 15 minutes of history
    band = np.interp(origins, t, y) + band_above_last
    extra = tune._baseline_signals(h, origins)
    contiguous = np.ones(len(origins), bool)
    fired = tune._fires(POLICY, alarm, band, extra, contiguous)
    return breach_scores(t, y, origins, np.where(fired, 1.0, 0.0), 300.0, 0.75)


@pytest.mark.parametrize("alarm", ["band or linear", "max(band, linear)"])
def test_a_steady_ramp_pages_minutes_ahead_through_predict_linear_where_the_band_alone_misses_it(tune, alarm):
    # 0.301 rising 0.018 per minute: first sample over 0.75 at 1500 s; predict_linear(300 s) over it from 1200 s
    y = RAMP
    alone = _page(tune, "band", y, 0.0)
    both = _page(tune, alarm, y, 0.0)
    assert (alone["breaches"], alone["detected"]) == (1, 0), "the band alone should not see the ramp coming"
    assert both["detected"] == 1, f"{alarm} should page the ramp's crossing"
    # predict_linear is over 0.75 from 300 s before the crossing; `for: 30s` costs two evaluations of it
    assert both["median_lead_seconds"] == pytest.approx(270.0)
    assert both["false_alarm_episodes"] == 0


@pytest.mark.parametrize("alarm", ["band", "band or linear", "max(band, linear)"])
def test_a_flat_series_never_pages(tune, alarm):
    rng = np.random.default_rng(0)
    y = 0.60 + 0.005 * rng.standard_normal(240)
    s = _page(tune, alarm, y, 0.05)
    assert s["alarms"] == 0, f"{alarm} paged a flat series at 0.60"
    assert s["false_alarms_per_hour"] == 0.0


def test_every_alarm_the_tuner_tries_is_scored_and_the_band_alone_is_the_simplest(tune):
    assert tune.ALARMS[0] == "band"
    for alarm in tune.ALARMS:
        assert _page(tune, alarm, RAMP, 0.0)["breaches"] == 1
