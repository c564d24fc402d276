"""`bench/tune_alarm.py`'s choosing runs and rule: which ServeGen hours it replays (never the scored hour or the
LSTM's), the shapes of its synthetic ramp and on/off runs, and what the rule picks when a setting pages more
crossings, when two alerts tie, and when no setting meets it (the deployed alert stays)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.benches import load_bench


@pytest.fixture(scope="module")
def tune():
    return load_bench("tune_alarm", "bench_tune_alarm_runs")


def test_the_busiest_hours_are_replayed_except_those_scored_or_used_by_the_lstm(tune):
    t = 600.0 * np.arange(144)  # a day of ServeGen's 600 s windows
    rates = np.ones(144)
    rates[60:66] = 9.0  # the busiest hour, [36000, 39600): say it is the scored one
    rates[10:16] = 5.0  # [6000, 9600)
    rates[100:106] = 4.0  # [60000, 63600)
    picked = tune.bursty_hours(t, rates, [(36000.0, 39600.0)], 2)
    assert picked == [6000.0, 60000.0]
    for s in picked:  # no overlap with the excluded hour, nor with each other
        assert s + 3600.0 <= 36000.0 or s >= 39600.0
    assert abs(picked[0] - picked[1]) >= 3600.0


def test_the_choosing_hours_never_touch_the_scored_hour_or_the_lstm_slices(tune):
    scored = {"servegen/data/reason/deepseek-r1": (78000.0, 81600.0)}
    for src, (a, b) in scored.items():
        assert (a, b) in tune.EXCLUDED_HOURS[src]
    assert (53400.0, 57000.0) in tune.EXCLUDED_HOURS["servegen/data/multimodal/mm-image"]


def test_the_ramp_doubles_the_rate_over_20_minutes_after_15_calm_ones_and_the_bursts_come_every_10_minutes(tune):
    base = tune.BASE_RPS
    ramp = tune.shaped_rate("ramp", np.array([0.0, 899.0, 1500.0, 2100.0, 2600.0, 2700.0, 3500.0]))
    assert ramp.tolist() == pytest.approx([base, base, 1.5 * base, 2 * base, 2 * base, base, base])
    t = np.arange(0.0, 3600.0, 1.0)
    on = tune.shaped_rate("onoff", t) > base
    assert not on[t < 600.0].any()
    assert on.mean() == pytest.approx(5 * 120 / 3600)  # five 2-minute bursts in the 50 minutes after the calm
    assert on[(t >= 1200.0) & (t < 1320.0)].all() and not on[(t >= 1320.0) & (t < 1800.0)].any()


def test_a_shaped_trace_follows_its_rate(tune):
    trace = tune.shaped_trace("ramp", 1)
    early = ((trace.arrivals_s >= 0) & (trace.arrivals_s < 900)).sum() / 900.0
    held = ((trace.arrivals_s >= 2100) & (trace.arrivals_s < 2700)).sum() / 600.0
    assert early == pytest.approx(tune.BASE_RPS, rel=0.1)
    assert held == pytest.approx(2 * tune.BASE_RPS, rel=0.1)
    assert len(trace.prompt_tokens) == len(trace) and (trace.prompt_tokens > 8192).mean() == pytest.approx(
        0.15, abs=0.03
    )


def _row(tune, alarm="band", detected=10, lead=100.0, fa=0.5, calm=0, first="4/4", for_s=30):
    return {
        "alarm": alarm,
        "for_seconds": for_s,
        "hysteresis": 0.0,
        "onset_seconds": 30,
        "false_alarms_per_hour": fa,
        "calm_false_alarms": calm,
        "detected": detected,
        "median_lead_seconds": lead,
        "first_crossings_paged": first,
    }


def test_the_rule_prefers_more_crossings_paged_then_lead_then_the_simpler_alert(tune):
    more = _row(tune, "band or linear", detected=11, lead=60.0)
    fewer = _row(tune, "band", detected=10, lead=200.0)
    assert max([fewer, more], key=tune._rank) is more
    tie = _row(tune, "band or linear", detected=10, lead=200.0)
    assert max([tie, fewer], key=tune._rank) is fewer  # the same pages: the band alone, one expression


@pytest.mark.parametrize(
    ("change", "meets"),
    [({}, True), ({"calm": 1}, False), ({"fa": 1.2}, False), ({"first": "3/4"}, False)],
)
def test_a_setting_meets_the_rule_only_without_calm_pages_under_one_false_alarm_an_hour_and_every_sale_paged(
    tune, change, meets
):
    assert tune._meets(_row(tune, **change), 4) is meets


def test_the_docs_say_when_no_setting_met_the_rule_and_the_deployed_alert_stays(tune):
    row = {
        **_row(tune, fa=1.8),
        "event_recall": 0.9,
        "breaches": 20,
        "lead_share": 0.9,
        "bursty_detected": "9/10",
        "bursty_false_alarms_per_hour": 2.0,
        "rule_met": False,
    }
    dep = {k: row[k] for k in ("alarm", "for_seconds", "hysteresis", "onset_seconds")}
    result = {
        "choice": row,
        "deployed": dep,
        "data": {"surge_seeds": [700], "calm_seeds": [710], "bursty": ["ramp-750"]},
        "met_by": 0,
        "candidates": [row],
        "rule": "the rule",
        "by_alarm": {"band": {"met_by": 0, "best": None, "closest": row}},
    }
    text = tune.render_choice(result)
    assert "none did, so the setting deployed before stays" in text
    assert "(closest: fewest false alarms/h)" in text
    assert "bursty runs ramp-750" in text


def test_the_deployed_setting_is_read_from_the_config_defaults(tune):
    from infercast.config import PredictorConfig, Thresholds

    dep = tune.deployed_setting()
    assert dep["alarm"] == "band"
    assert dep["for_seconds"] == Thresholds().kv_forecast_for_seconds
    assert dep["hysteresis"] == Thresholds().kv_forecast_hysteresis
    assert dep["onset_seconds"] == PredictorConfig().event_onset_seconds
