"""Breach scores (`infercast.predictors.scoring.breach_scores`): computed as documented, and unable to flatter a band
that alarms all the time or never."""

from __future__ import annotations

import numpy as np
import pytest

from infercast.predictors.scoring import breach_scores, breach_starts, calm_before

STEP = 15.0
H = 300.0


def _hour_with_two_breaches() -> tuple[np.ndarray, np.ndarray]:
    """One hour at 15 s: KV at 0.5, over 0.75 from 1200 s to 1500 s and from 2400 s to 2460 s."""
    t = np.arange(0, 3600, STEP)
    y = np.full(len(t), 0.5)
    y[(t >= 1200) & (t < 1500)] = 0.9
    y[(t >= 2400) & (t < 2460)] = 0.8
    return t, y


def test_an_upper_band_stuck_at_one_does_not_score_as_a_perfect_forecaster():
    """Issue 8, item 5: a band whose top is always 1.0 used to score recall 1, precision 1, lead 300 s and no false
    alarms.  What an operator would see from such a pager: it pages all the time."""
    t, y = _hour_with_two_breaches()
    b = breach_scores(t, y, t, np.ones(len(t)), H, 0.75)
    # Of the origins below the threshold whose next 5 minutes are observed, only those within 300 s before a
    # crossing see one: 2 x 20 of them.  Every other one is a false alarm.
    assert b["origins_scored"] == len(t) - 20 - 4 - 20  # 20 + 4 samples over the threshold, the last 20 unjudged
    assert b["origins_crossing"] == 40
    assert b["origin_precision"] == pytest.approx(40 / b["origins_scored"])
    assert b["origin_precision"] < 0.3 and b["origin_recall"] == 1.0
    assert b["origin_f1"] == pytest.approx(2 * 40 / (2 * 40 + b["origins_scored"] - 40))
    # It catches both breaches, but its pages started long before them (at the start, and after the first one).
    assert b["event_recall"] == 1.0 and b["median_lead_seconds"] > H
    # The steps more than 5 minutes ahead of a crossing are false alarms: one episode before each breach and one
    # after the last (the last 20 origins are unjudged: their 5 minutes run past the data).
    assert b["false_alarm_episodes"] == 3 and b["false_alarms_per_hour"] == pytest.approx(3.0)


def test_a_band_that_never_alarms_catches_nothing():
    t, y = _hour_with_two_breaches()
    b = breach_scores(t, y, t, np.zeros(len(t)), H, 0.75)
    assert b["origin_recall"] == 0.0 and b["origin_precision"] is None and b["origin_f1"] == 0.0
    assert b["event_recall"] == 0.0 and b["median_lead_seconds"] is None
    assert b["false_alarms_per_hour"] == 0.0


def test_breach_scores_by_hand():
    t, y = _hour_with_two_breaches()
    upper = np.full(len(t), 0.6)
    upper[(t >= 1020) & (t < 1200)] = 0.8  # alarm from 1020 s: 180 s ahead of the first breach (12 steps)
    upper[(t >= 3000) & (t < 3060)] = 0.8  # 4 alarms followed by nothing: one false episode
    upper[(t >= 600) & (t < 630)] = 0.8  # 2 alarms more than 300 s before the first breach: false, a second episode
    b = breach_scores(t, y, t, upper, H, 0.75)
    assert breach_starts(t, y, 0.75).tolist() == [1200.0, 2400.0]
    # Origins: 40 before a crossing (20 per breach); 12 true alarms (1020-1185 s), 6 false (600, 615, 3000-3045).
    assert b["origins_crossing"] == 40 and b["alarms"] == 18 and b["true_alarms"] == 12
    assert b["origin_precision"] == pytest.approx(12 / 18)
    assert b["origin_recall"] == pytest.approx(12 / 40)
    assert b["origin_f1"] == pytest.approx(2 * 12 / (2 * 12 + 6 + 28))
    # The second breach (2400 s) had no alarm: missed.
    assert b["breaches"] == 2 and b["detected"] == 1 and b["event_recall"] == 0.5
    assert b["median_lead_seconds"] == 180.0
    # Both breaches had more than 5 minutes under the threshold before them: 300 s was possible for each; the
    # first got 180 of them, the missed one 0.
    assert b["possible_lead_median_seconds"] == 300.0
    assert b["lead_share"] == pytest.approx((180 / 300 + 0) / 2)
    assert b["calm_breaches"] == 2 and b["calm_detected"] == 1 and b["calm_median_lead_seconds"] == 90.0
    assert b["false_alarm_steps"] == 6 and b["false_alarm_episodes"] == 2
    assert b["false_alarms_per_hour"] == pytest.approx(2.0)  # origins span one hour


def test_the_lead_runs_from_the_first_alarm_of_the_episode_even_beyond_the_horizon():
    t, y = _hour_with_two_breaches()
    upper = np.full(len(t), 0.6)
    upper[(t >= 600) & (t < 1200)] = 0.8  # one page from 600 s, kept on until the crossing at 1200 s
    b = breach_scores(t, y, t, upper, H, 0.75)
    assert b["detected"] == 1 and b["median_lead_seconds"] == 600.0
    # Its first 20 steps (600-885 s) had no crossing within 5 minutes: one false episode.
    assert b["false_alarm_steps"] == 20 and b["false_alarm_episodes"] == 1


def test_alarms_while_already_over_the_threshold_do_not_count():
    t = np.arange(0, 1800, STEP)
    y = np.where(t >= 600, 0.9, 0.5)
    upper = np.where(t >= 600, 0.95, 0.5)  # only "predicts" the breach once it is already there
    b = breach_scores(t, y, t, upper, H, 0.75)
    assert b["breaches"] == 1 and b["event_recall"] == 0.0 and b["alarms"] == 0
    # The origins over the threshold are not scored: there the threshold alert speaks, not the forecast.
    assert b["origins_scored"] == 40 and b["origin_recall"] == 0.0


def test_the_lead_share_is_against_the_lead_the_calm_before_each_breach_allowed():
    """Issue 27, item 1: breaches that recur every 90 s leave at most 75 s of lead to any pager (it may page only
    while the series is under the threshold).  Paging all the time gets all of it, paging one step ahead a fifth;
    none of the breaches had 5 calm minutes before it, so the calm-breach lead says nothing here, and says so."""
    t = np.arange(0, 3600, STEP)
    y = np.where((t % 90) == 75, 0.8, 0.5)  # one sample over 0.75 every 90 s
    assert calm_before(t, y, 0.75, 165.0) == 75.0 and calm_before(t, y, 0.75, 75.0) == 75.0
    always = breach_scores(t, y, t, np.ones(len(t)), H, 0.75)
    late = breach_scores(t, y, t, np.where((t % 90) == 60, 0.8, 0.5), H, 0.75)  # pages one step before each
    assert always["possible_lead_median_seconds"] == 75.0
    assert always["event_recall"] == late["event_recall"] == 1.0
    assert always["lead_share"] == 1.0 and late["lead_share"] == pytest.approx(15 / 75)
    assert always["calm_breaches"] == late["calm_breaches"] == 0 and always["calm_median_lead_seconds"] is None
    never = breach_scores(t, y, t, np.zeros(len(t)), H, 0.75)
    assert never["lead_share"] == 0.0 and never["breaches"] == always["breaches"] > 30


class _Path:
    """A test forecaster: the last value, extrapolated along the slope of the last 8 samples when `sees_trend`
    (else held), with a band of +-0.01 around that path."""

    def __init__(self, name: str, sees_trend: bool) -> None:
        self.name, self.sees_trend = name, sees_trend

    def fit(self, histories):
        return self

    def forecast(self, history, horizon_s):
        from infercast.predictors.base import Forecast, future_grid

        tf = future_grid(history, horizon_s)
        last = float(history.y[-1])
        slope = float(np.polyfit(history.t[-8:], history.y[-8:], 1)[0]) if self.sees_trend else 0.0
        path = np.clip(last + slope * (tf - history.t[-1]), 0.0, 1.0)
        return Forecast(tf, path, path - 0.01, path + 0.01, (0.1, 0.9), self.name)


def test_the_lead_share_separates_a_forecaster_that_sees_a_ramp_from_last_value():
    """Issue 27, item 1, on a synthetic ramp (an hour at 15 s: KV at 0.5, a 10-minute ramp to 0.95 from 2100 s,
    over 0.75 from about 2440 s, back to 0.5 at 3000 s), through the backtest: a forecaster that extrapolates the
    ramp pages the whole horizon ahead, the last value only once the series is within its band of the threshold.
    The references bracket the score: always_alarm gets all the lead there was and pays in false pages, never_alarm
    gets none."""
    from infercast.predictors.backtest import run_backtest, score_runs
    from infercast.predictors.base import History
    from infercast.predictors.reference import references

    t = np.arange(0, 3600, STEP)
    y = np.where(t < 2100, 0.5, np.where(t < 2700, 0.5 + 0.45 * (t - 2100) / 600, np.where(t < 3000, 0.95, 0.5)))
    y = y + np.random.default_rng(0).normal(0, 0.002, len(t))
    models = [_Path("trend", True), _Path("last", False), *references(0.75, (0.0, 1.0))]
    runs = run_backtest(History(t, y), models, H, warmup_s=900.0)
    b = {k: v["breach"] for k, v in score_runs(History(t, y), runs, H, 0.75).items()}
    assert all(x["breaches"] == x["calm_breaches"] == 1 for x in b.values())
    assert b["trend"]["lead_share"] >= 0.75 and b["trend"]["calm_median_lead_seconds"] >= 225
    assert b["last"]["lead_share"] <= 0.1 and b["last"]["calm_median_lead_seconds"] <= 30
    assert b["trend"]["false_alarms_per_hour"] == b["last"]["false_alarms_per_hour"] == 0.0
    assert b["always_alarm"]["lead_share"] == 1.0 and b["always_alarm"]["calm_median_lead_seconds"] == H
    assert b["always_alarm"]["false_alarms_per_hour"] >= 2.0  # before the ramp, and after the fall
    assert b["never_alarm"]["lead_share"] == 0.0 and b["never_alarm"]["calm_median_lead_seconds"] == 0.0
