"""The onset within one scrape (`infercast.actuators.signals`) and the run's ledger of changes, flaps and decision
delay (`infercast.actuators.ledger`), as `infercast twin run --json` reports them."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from infercast.actuators.actions import ScalePool, SetAdmission, SetPoolBounds
from infercast.actuators.ledger import count_changes, count_flaps, decision_delay, setting_changes
from infercast.actuators.signals import Arrivals, arrivals, increases, onset


def _counter(rates: list[float], step: float = 15.0, start: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    t = start + step * np.arange(len(rates) + 1)
    return t, np.concatenate(([0.0], np.cumsum(np.asarray(rates) * step)))


def test_a_step_in_arrivals_is_seen_in_the_scrape_it_lands_in():
    """Ten minutes at 200 req/s, then one 15 s interval at 1,200: the last interval says surge, against a rate over
    the last minute that has moved only a quarter of the step."""
    g = np.arange(0.0, 41 * 15.0, 15.0)
    t, v = _counter([200.0] * 39 + [1200.0])
    a = arrivals(increases([(t, v)], g), increases([], g), 15.0)
    assert a.last_rps == 1200.0 and a.baseline_rps == 200.0
    assert "arrivals 1200.0 req/s" in onset(a, 0.0, 0.0)


def test_the_first_samples_of_a_run_are_history_not_a_surge():
    """At the start of a run the store has a minute of data: the counters' first values are not arrivals."""
    g = np.arange(-585.0, 30.0, 15.0)
    t, v = _counter([200.0, 200.0], start=0.0)
    inc = increases([(t, v + 5000.0)], g)
    assert np.isnan(inc[:-2]).all()
    a = arrivals(inc, inc, 15.0)
    assert onset(a, 0.0, 0.0) == ""


def test_a_counter_born_in_the_surge_counts_from_zero():
    g = np.arange(0.0, 61.0, 15.0)
    ok = _counter([10.0] * 4)
    rejected = (np.array([60.0]), np.array([900.0]))  # first seen at 60 s: 900 refusals in the last interval
    assert increases([ok, rejected], g)[-1] == 150.0 + 900.0


def test_a_calm_pool_and_a_quiet_one_are_not_surges():
    assert onset(Arrivals(210.0, 200.0, 40.0, 15.0, 39), 0.0, 0.0) == ""
    # three times the arrivals, but three requests more: noise on a quiet pool
    assert onset(Arrivals(0.3, 0.1, 0.0, 15.0, 39), 0.0, 0.0) == ""
    assert "waiting" in onset(Arrivals(200.0, 200.0, 40.0, 15.0, 39), 39.0, 0.0)


def test_changes_count_each_setting_and_skip_what_changed_nothing():
    history = [
        (600.0, SetPoolBounds("short", 11, 11), SetPoolBounds("short", 7, 11)),
        (615.0, ScalePool("short", 11), ScalePool("short", 7)),
        (615.0, SetAdmission(memory_limit=0.75, normal_queue_seconds=1.0), SetAdmission(memory_limit=0.8,
                                                                                         normal_queue_seconds=1.0)),
    ]  # fmt: skip
    assert count_changes(setting_changes(history)) == {
        "admission:memory_limit": 1,
        "scale_pool:replicas:short": 1,
        "set_pool_bounds:floor:short": 1,
    }


def test_a_flap_is_tighten_relax_tighten_within_the_dwell():
    def scale(t: float, before: int, after: int):
        return (t, ScalePool("p", after), ScalePool("p", before))

    flapping = setting_changes([scale(0, 5, 7), scale(60, 7, 5), scale(120, 5, 7)])
    assert count_flaps(flapping, dwell_seconds=300.0) == {"scale_pool:replicas:p": 1}
    assert count_flaps(flapping, dwell_seconds=100.0) == {}, "a change back after the dwell is not a flap"
    assert count_flaps(setting_changes([scale(0, 5, 7), scale(60, 7, 9), scale(120, 9, 11)]), 300.0) == {}


def test_decision_delay_is_from_the_onset_to_the_first_action():
    assert decision_delay([30.0, 615.0, 630.0], 600.0, lookahead=300.0) == 15.0
    assert decision_delay([480.0, 615.0], 600.0, lookahead=300.0) == -120.0, "acting ahead is a negative delay"
    assert decision_delay([615.0], None, lookahead=300.0) is None, "no surge: null"
    assert decision_delay([], 600.0, lookahead=300.0) is None


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 20), min_size=1, max_size=30), st.floats(1.0, 1000.0))
def test_flaps_never_exceed_changes(values, dwell):
    history = [(15.0 * i, ScalePool("p", b), ScalePool("p", a)) for i, (a, b) in enumerate(itertools.pairwise(values))]
    changes = setting_changes(history)
    flaps = count_flaps(changes, dwell)
    assert sum(flaps.values()) <= max(0, len(changes) - 2)
    assert all(c.before != c.after for c in changes)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 6), min_size=1, max_size=25), st.integers(1, 20))
@example([0, 1, 0, 1], 2)  # a third move exactly the dwell after the first
def test_the_steadiness_counts_are_the_ledgers(values, dwell_ticks):
    """One counter of changes and flaps (issue 42 review): what the steadiness tests assert on and what `infercast
    twin run --json` reports count the same run the same way (before, the two disagreed at the dwell's edge: a
    third move exactly `dwell` after the first was a flap for one and not for the other)."""
    from infercast.actuators.steadiness import setting_changes as rows_of
    from infercast.actuators.steadiness import steadiness

    dwell = 15.0 * dwell_ticks
    history = [(15.0 * i, ScalePool("p", b), ScalePool("p", a)) for i, (a, b) in enumerate(itertools.pairwise(values))]
    ledger = setting_changes(history)
    s = steadiness(rows_of([(t, a) for t, a, _ in history]), dwell, {"replicas:p": values[0]})
    assert s.total_changes == sum(count_changes(ledger).values())
    assert s.total_flaps == sum(count_flaps(ledger, dwell).values())
