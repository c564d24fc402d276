"""The predictive alert's logic (persistence, hysteresis) as the backtest scores it: what an on-call engineer sees
is one page per episode, not one per wobble of the band."""

from __future__ import annotations

import numpy as np
import pytest

from infercast.config import Thresholds
from infercast.predictors.alarm import AlarmPolicy
from infercast.predictors.deployed import alarm_policy
from infercast.predictors.scoring import breach_scores


def test_persistence_drops_one_evaluation_blips_and_costs_that_much_lead():
    upper = np.array([0.5, 0.8, 0.5, 0.5, 0.8, 0.8, 0.8, 0.5])
    assert AlarmPolicy(0.75).run(upper).tolist() == [0, 1, 0, 0, 1, 1, 1, 0]
    # two consecutive evaluations: the blip never pages, the real episode pages one evaluation later
    assert AlarmPolicy(0.75, persistence=2).run(upper).tolist() == [0, 0, 0, 0, 0, 1, 1, 0]


def test_hysteresis_keeps_one_page_through_a_band_wobbling_around_the_trigger():
    upper = np.array([0.76, 0.74, 0.76, 0.73, 0.76, 0.69, 0.74])
    plain = AlarmPolicy(0.75).run(upper)
    held = AlarmPolicy(0.75, hysteresis=0.05).run(upper)
    assert plain.tolist() == [1, 0, 1, 0, 1, 0, 0]  # three pages
    assert held.tolist() == [1, 1, 1, 1, 1, 0, 0]  # one page, cleared once the band is under 0.70


def test_a_gap_in_the_evaluations_restarts_the_count():
    upper = np.array([0.8, 0.8, 0.8])
    contiguous = np.array([True, False, True])
    assert AlarmPolicy(0.75, persistence=2).run(upper, contiguous).tolist() == [0, 0, 1]


def test_the_fleet_files_for_seconds_become_consecutive_evaluations():
    p = alarm_policy(Thresholds(kv_forecast_for_seconds=30, kv_forecast_hysteresis=0.04), 15.0)
    assert (p.persistence, p.hysteresis, p.trigger) == (3, 0.04, 0.75)


def test_deployed_scores_count_fewer_false_alarm_episodes_on_a_noisy_band():
    t = 15.0 * np.arange(400)
    y = np.full(400, 0.5)  # calm: never crosses
    rng = np.random.default_rng(0)
    upper = 0.72 + 0.04 * rng.standard_normal(400)  # wobbles around the trigger
    origins = t[:380]
    raw = breach_scores(t, y, origins, upper[:380], 300.0, 0.75)
    deployed = breach_scores(t, y, origins, upper[:380], 300.0, 0.75, AlarmPolicy(0.75, 2, 0.05))
    assert raw["false_alarm_episodes"] > deployed["false_alarm_episodes"] > 0
    assert deployed["policy"] == {"persistence": 2, "hysteresis": 0.05}


def test_a_policy_refuses_nonsense():
    with pytest.raises(ValueError):
        AlarmPolicy(0.75, persistence=0)
    with pytest.raises(ValueError):
        AlarmPolicy(0.75, hysteresis=0.8)
