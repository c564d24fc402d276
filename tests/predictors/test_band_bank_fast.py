"""The online band's array form takes shortcuts on a steady tick and must learn exactly what it did without them
(issue 41 item 4).

`AdaptiveBandBank` (the batched tick's online band) reuses the last call's rows when the same series come in the same
order, reads its state as whole arrays when those rows are every row in order, and compacts the pending forecasts
with one order when every row keeps the same ones.  With `fast = False` it takes the general path on every call; on
any sequence of calls (series added, dropped, reordered, NaN outcomes, a clock going back) both must return the same
bands and hold the same state, bit for bit: the published bands do not move.  `forecast` in its two halves (`learn`,
then `widen`: the batched tick learns while the network runs) is `forecast`.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.predictors.conformal import AdaptiveBandBank

STEP = 15.0
STATE = ("log_up", "log_lo", "updates", "last_t", "pend_t", "pend_lo", "pend_up", "pend_n")


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 40),
    ticks=st.integers(1, 40),
    horizon=st.integers(1, 6),
    churn=st.sampled_from([0.0, 0.1, 0.5]),
)
def test_the_shortcuts_learn_and_band_exactly_as_the_general_path(seed, n, ticks, horizon, churn):
    rng = np.random.default_rng(seed)
    fast, general = AdaptiveBandBank(0.05, (0.0, 1.0)), AdaptiveBandBank(0.05, (0.0, 1.0))
    general.fast = False
    keys_all = [("kv", (f"p{i}", "v")) for i in range(n)]
    width = 12
    clock = 100
    order = list(range(n))
    for _ in range(ticks):
        if rng.random() < churn:  # series come and go, or arrive in another order
            order = [i for i in rng.permutation(n).tolist() if rng.random() > 0.2] or [0]
        clock += 1 if rng.random() > 0.05 else -3  # now and then the clock goes back (a new series, for the band)
        t = STEP * np.arange(clock - width + 1, clock + 1)
        keys = [keys_all[i] for i in order]
        m = len(keys)
        y = np.clip(0.5 + rng.normal(0, 0.2, (m, width)), 0, 1)
        y[rng.random((m, width)) < 0.1] = np.nan
        start = rng.integers(0, width // 2, m) * (rng.random(m) < 0.3)
        t_future = t[-1] + STEP * np.arange(1, horizon + 1)
        yhat = np.clip(0.5 + rng.normal(0, 0.1, (m, horizon)), 0, 1)
        lower = yhat - np.abs(rng.normal(0, 0.05, (m, horizon)))
        upper = yhat + np.abs(rng.normal(0, 0.05, (m, horizon)))
        if rng.random() < 0.5:
            a = fast.forecast(list(keys), t, y, start, t_future, lower, yhat, upper)
        else:  # in its two halves, as the batched tick calls it (learning while the network runs)
            a = fast.widen(fast.learn(list(keys), t, y, start), t_future, lower, yhat, upper)
        b = general.forecast(list(keys), t, y, start, t_future, lower, yhat, upper)
        for u, v in zip(a, b, strict=True):
            assert _equal(u, v)
        assert fast.rows == general.rows
        for name in STATE:
            assert _equal(getattr(fast, name), getattr(general, name)), name


def test_a_steady_tick_takes_the_shortcuts():
    """The same series in the same order, one forecast due per series: the rows are reused and read whole."""
    bank = AdaptiveBandBank(0.05, (0.0, 1.0))
    keys = [("kv", (f"p{i}", "v")) for i in range(5)]
    for k in range(10):
        t = STEP * np.arange(k, k + 8)
        ones = np.full((5, 1), 0.5)
        bank.forecast(list(keys), t, np.full((5, 8), 0.5), np.zeros(5, dtype=np.int64), t[-1:] + STEP, ones, ones, ones)
    first = bank._index(list(keys))
    assert bank._index(list(keys)) is first and bank._rows_of(first) == slice(None)
    assert bank.updates.tolist() == [9] * 5  # learned from every outcome
