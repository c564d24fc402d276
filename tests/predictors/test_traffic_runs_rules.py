"""`bench/traffic_runs.py`'s two rules, on made-up scores: when the calendar's announced rates ship, and when a
candidate replaces the service's inner traffic model (both its mean and its worst ratio lower, ServeGen's training
days counted)."""

from __future__ import annotations

import pytest

from tests.benches import load_bench


@pytest.fixture(scope="module")
def tr():
    return load_bench("traffic_runs", "bench_traffic_runs_rules")


def _run(tr, announced: bool, best: str = "last_value", **ratio: float) -> dict:
    """A run whose best baseline `best` has mae 10, the other baselines 1.3 times that, every other model `ratio`
    times it (default 1.2)."""
    r = {n: 1.3 for n in tr.BASELINES} | {n: 1.2 for n in (tr.SERVICE, tr.ABLATION, tr.NO_CALENDAR, *tr.CANDIDATES)}
    r |= ratio | {best: 1.0}
    return {"announced": announced, "best_baseline": best, "mae": {n: 10 * v for n, v in r.items()}, "ratio": r}


def test_announced_rates_ship_when_they_never_hurt_and_beat_the_best_baseline_on_every_sale(tr):
    sale = _run(tr, True, service=0.2, service_without_expected_rps=1.05)
    calm = _run(tr, False, service=1.1, service_without_expected_rps=1.1)
    assert tr.verdicts({"sale": sale, "calm": calm})["expected_rps_ships"]
    hurts = _run(tr, False, service=1.2, service_without_expected_rps=1.1)
    assert not tr.verdicts({"sale": sale, "calm": hurts})["expected_rps_ships"]
    no_gain = _run(tr, True, service=1.0, service_without_expected_rps=1.05)
    assert not tr.verdicts({"sale": no_gain})["expected_rps_ships"]


def test_a_candidate_replaces_the_inner_model_only_when_both_its_mean_and_worst_are_lower(tr):
    a = _run(tr, False, service_without_calendar=1.1, prophet_anchored=1.0, local_level=0.9)
    b = _run(tr, False, "kalman", service_without_calendar=1.1, prophet_anchored=1.05, local_level=1.5)
    v = tr.verdicts({"a": a, "b": b})
    # local_level: mean 1.2 over the inner model's 1.1; the baselines: a worst of 1.3
    assert v["inner_better"] == ["prophet_anchored"]
    assert v["summary"]["prophet_anchored"] == {"mean": 1.025, "worst": 1.05, "n": 2}


def test_servegens_training_days_join_the_inner_model_rule(tr):
    a = _run(tr, False, service_without_calendar=1.1, prophet_anchored=1.0)
    b = _run(tr, False, "kalman", service_without_calendar=1.1, prophet_anchored=1.0)
    assert tr.verdicts({"a": a, "b": b})["inner_better"] == ["prophet_anchored"]
    maes = {"last_value": 10.0, "predict_linear": 15.0, "holt_winters": 12.0, "kalman": 12.0}
    days = {**maes, "service": 10.5, "prophet_anchored": 13.0, "local_level": 11.0}
    v = tr.verdicts({"a": a, "b": b}, days)
    assert v["servegen_train_included"] and v["summary"]["prophet_anchored"]["n"] == 3
    assert v["inner_better"] == []  # 1.3 on the ServeGen days: its worst is now above the inner model's 1.1


def test_a_servegen_training_hour_is_the_hours_requests_at_the_services_step(tr, tmp_path, repo_root):
    """The real-trace training hours (issue 37, item 5): one hour of a ServeGen model's clients replayed at request
    level, binned at the service's 15 s, the same requests on every rerun.  On the shipped 3-client slice (days 0-1),
    laid out as the full traces are (`--traces DIR` holds `servegen/data/language/m-large`)."""
    target = tmp_path / "servegen" / "data" / "language"
    target.mkdir(parents=True)
    (target / "m-large").symlink_to(repo_root / "tests" / "data" / "traces" / "servegen" / "language" / "m-large")
    h, events = tr._servegen_hour(tmp_path, 1, 9)
    assert events == () and h.series_id == "servegen-d1-09h"
    assert len(h.t) == 3600 / tr.STEP_S and h.t[1] - h.t[0] == tr.STEP_S
    # the hour's requests are its windows' rates (a Poisson count's noise aside: 4 sigma)
    from infercast.simulator.replay.traces.servegen import servegen_rates

    _, rates = servegen_rates(target / "m-large", 1 * 86400 + 9 * 3600, 1 * 86400 + 10 * 3600)
    expected = float(rates.mean()) * 3600
    assert abs(float(h.y.sum()) * tr.STEP_S - expected) < 4 * expected**0.5
    again, _ = tr._servegen_hour(tmp_path, 1, 9)
    assert (again.y == h.y).all()
