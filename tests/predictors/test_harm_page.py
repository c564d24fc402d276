"""The page built for harm (`infercast.predictors.harm_page`): what an on-call engineer sees is a page that fires on
the KV band only when the fleet is also under pressure (queue growing, allocation failures, a surge), through the
same `for:` and hysteresis as the deployed alert; and the setting the code ships is the one the training-run bench
chose (docs/results/tune-harm-page.json)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.predictors import harm_page
from infercast.predictors.alarm import AlarmPolicy
from infercast.predictors.harm_page import PRESSURES, HarmPage, fire, pressures

ROOT = Path(__file__).resolve().parents[2]
STEP = 15.0


def _series(n: int, waiting=None, failures=None, rps=None, long_share=None):
    t = np.arange(n) * STEP
    feats = {
        "waiting": np.zeros(n) if waiting is None else np.asarray(waiting, float),
        "alloc_failures_total": np.zeros(n) if failures is None else np.asarray(failures, float),
        "rps": np.full(n, 10.0) if rps is None else np.asarray(rps, float),
        "long_share": np.full(n, 0.1) if long_share is None else np.asarray(long_share, float),
    }
    return t, feats


def test_a_queue_that_grows_is_pressure_and_one_that_drains_is_not():
    w = np.zeros(40)
    w[20:] = np.arange(20)  # queueing from sample 20 on, growing
    t, f = _series(40, waiting=w)
    p = pressures(t, f, t, HarmPage())
    assert not p["queue"][:21].any()
    assert p["queue"][22:].all()
    t, f = _series(40, waiting=np.linspace(20, 0, 40))  # a queue draining: not pressure
    assert not pressures(t, f, t, HarmPage())["queue"].any()


def test_allocation_failures_in_the_last_minute_are_pressure():
    fails = np.zeros(40)
    fails[25:] = 3.0  # three failures at sample 25 (cumulative counter)
    t, f = _series(40, failures=fails)
    p = pressures(t, f, t, HarmPage())["failures"]
    assert not p[:25].any() and p[25:29].all() and not p[30:].any()


def test_a_doubling_of_the_rate_or_a_jump_of_the_long_share_is_a_surge():
    r = np.full(60, 10.0)
    r[40:] = 20.0
    t, f = _series(60, rps=r)
    p = pressures(t, f, t, HarmPage(surge_ratio=1.5))["surge"]
    assert not p[:40].any() and p[41]
    ls = np.full(60, 0.15)
    ls[40:] = 0.63  # seed 000's long-context share, 15% -> 63%
    t, f = _series(60, long_share=ls)
    assert pressures(t, f, t, HarmPage(long_rise=0.2))["surge"][41]


def test_the_band_alone_is_the_deployed_alert_logic():
    rng = np.random.default_rng(1)
    upper = rng.uniform(0.6, 1.0, 200)
    t, f = _series(200)
    page = HarmPage(trigger=0.85, persistence=3, hysteresis=0.05)
    expect = AlarmPolicy(0.85, 3, 0.05).run(upper)
    assert np.array_equal(fire(page, t, upper, t, f), expect)


@settings(max_examples=60, deadline=None)
@given(
    upper=st.lists(st.floats(0.0, 1.2), min_size=5, max_size=80),
    waiting=st.lists(st.integers(0, 5), min_size=80, max_size=80),
    fails=st.lists(st.integers(0, 2), min_size=80, max_size=80),
    trigger=st.sampled_from([0.75, 0.9]),
    persistence=st.integers(1, 4),
    hysteresis=st.sampled_from([0.0, 0.05]),
    needs=st.lists(st.sampled_from(PRESSURES), unique=True, max_size=3),
)
def test_requiring_pressure_never_adds_a_page_and_the_future_never_changes_the_past(
    upper, waiting, fails, trigger, persistence, hysteresis, needs
):
    n = len(upper)
    t, f = _series(n, waiting=waiting[:n], failures=np.cumsum(fails[:n]))
    base = HarmPage(trigger=trigger, persistence=persistence, hysteresis=hysteresis)
    page = HarmPage(trigger=trigger, needs=tuple(needs), persistence=persistence, hysteresis=hysteresis)
    alone = fire(base, t, np.asarray(upper), t, f)
    with_needs = fire(page, t, np.asarray(upper), t, f)
    assert not (with_needs & ~alone).any()
    # a different future (after sample k) changes no flag at or before k
    k = n // 2
    f2 = {name: v.copy() for name, v in f.items()}
    f2["waiting"][k + 1 :] += 7
    f2["alloc_failures_total"][k + 1 :] += 5
    u2 = np.asarray(upper).copy()
    u2[k + 1 :] = 1.0 - u2[k + 1 :]
    assert np.array_equal(fire(page, t, u2, t, f2)[: k + 1], with_needs[: k + 1])


def test_bad_settings_and_mismatched_input_are_clear_errors():
    with pytest.raises(ValueError, match="unknown pressures"):
        HarmPage(needs=("vibes",))
    t, f = _series(10)
    with pytest.raises(ValueError, match="band values"):
        fire(HarmPage(), t, np.zeros(3), t, f)


def test_the_shipped_setting_is_the_one_the_training_bench_chose():
    path = ROOT / "docs" / "results" / "tune-harm-page.json"
    if not path.exists():  # nothing chosen yet: nothing may ship
        assert harm_page.CHOSEN is None
        return
    chosen = json.loads(path.read_text())["chosen"]["setting"]
    assert harm_page.CHOSEN is not None, "the bench chose a setting; the code must ship it"
    assert harm_page.CHOSEN.as_dict() == chosen
