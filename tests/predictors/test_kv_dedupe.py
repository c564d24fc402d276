"""A window the batched tick holds twice is forecast once, with the same published values (issue 41 item 4).

A (pool, version) of one instance has its mean KV usage and its fullest instance's equal: the batched pass would hand
the network the same window and the same covariates twice.  `same_windows` finds those rows (same group, the same
bits) and the pass forecasts each once; what the predictor publishes must be the same floats as forecasting every
row, on a fleet of one- and several-instance pools with holes, NaN, late and vanishing pools and an event.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.config import PredictorConfig
from infercast.predictors.kv_batch import same_windows
from infercast.predictors.prophet_model import EventWindow
from infercast.predictors.service import PredictorLoop
from tests.predictors.test_service_batch import T0, _by_key, _fleet, _lstm


@settings(max_examples=200, deadline=None)
@given(
    groups=st.lists(st.sampled_from([("a", "v1"), ("b", "v1"), ("b", "v2"), ("c", "")]), min_size=1, max_size=12),
    seed=st.integers(0, 2**32 - 1),
    width=st.integers(1, 6),
)
def test_same_windows_merges_only_rows_of_one_group_with_the_same_bits(groups, seed, width):
    rng = np.random.default_rng(seed)
    pool = rng.choice([0.1, 0.5, np.nan], size=(3, width))  # few distinct windows, so equal ones are common
    y = pool[rng.integers(0, 3, size=len(groups))]
    src = same_windows(groups, y)
    memo: dict = {}
    for _ in range(2):  # a memo kept from call to call (the loop's, tick to tick) changes nothing
        assert same_windows(groups, y, memo).tolist() == src.tolist()
    other = [*groups[1:], groups[0]]  # other groups: the memo is not used for them
    assert same_windows(other, y, memo).tolist() == same_windows(other, y).tolist()
    for i, j in enumerate(src.tolist()):
        # merged only into an earlier, kept row of its own group with the same bits (NaN where NaN)
        assert j <= i and src[j] == j and groups[j] == groups[i]
        assert np.array_equal(y[i], y[j], equal_nan=True)
        first = groups.index(groups[i])
        if np.array_equal(y[i], y[first], equal_nan=True):  # one instance: mean and max are one window, merged
            assert j == first


def test_forecasting_a_repeated_window_once_publishes_the_same_values():
    """Two loops, one forecasting every row and one each distinct window once, on the same fleet for 60 ticks (the
    bands learn, the event's prior lifts bands): the same samples, the same floats."""
    step = 15.0
    cfg = PredictorConfig(history_seconds=3600.0, step_seconds=step, horizon_seconds=300.0, stale_after_seconds=120.0)
    lstm = _lstm()
    events = [EventWindow("sale", T0 + step * 300, T0 + step * 340)]
    store = _fleet(24, step)
    kw = {"trigger": 0.75, "events": events, "lstm": lstm, "rps_model": "kalman"}
    once, every = PredictorLoop(cfg, **kw), PredictorLoop(cfg, **kw)
    every.dedupe_windows = False
    merged = []
    import infercast.predictors.kv_batch as kb

    def counting(groups, y, *memo):
        out = same_windows(groups, y, *memo)
        merged.append(int((out != np.arange(len(out))).sum()))
        return out

    kb.same_windows = counting
    try:
        for k in range(200, 400, 3):
            now = T0 + step * k
            a, b = once.tick(now, store), every.tick(now, store)
            assert _by_key(a) == _by_key(b)
    finally:
        kb.same_windows = same_windows
    assert sum(merged) > 0, "the fleet's one-instance pools should have had their windows forecast once"
