"""The rolling history places an answer of the label sets it holds, in the order it holds them, row for row
(issue 41 item 4: no sorted key per label set at 50,000 series), and must hold exactly what matching every label set
by key holds, whatever the store answers: label sets added, dropped, reordered, with NaN, or nothing at all."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.predictors.rolling import RollingWindow
from infercast.store import Series

STEP = 15.0
T0 = 1_800_000_000.0


class Scripted:
    """A store answering each query with the label sets of this tick (in this tick's order) over [start, end]."""

    def __init__(self) -> None:
        self.labels: list[dict[str, str]] = []
        self.rng = np.random.default_rng(0)

    def query_range(self, metric, matchers, start, end, step):
        t = np.arange(start, end + 1e-9, step)
        out = []
        for lab in self.labels:
            v = self.rng.random(len(t))
            v[self.rng.random(len(t)) < 0.1] = np.nan
            out.append(Series(dict(lab), t, v))
        return out


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), ticks=st.integers(1, 30), pool=st.integers(1, 8))
def test_row_for_row_placement_holds_what_matching_by_key_holds(seed, ticks, pool):
    rng = np.random.default_rng(seed)
    every = [{"pool": f"p{i}", "instance": f"n{i % 2}"} for i in range(pool)]
    fast_store, slow_store = Scripted(), Scripted()
    fast_store.rng, slow_store.rng = np.random.default_rng(seed), np.random.default_rng(seed)
    fast, slow = RollingWindow("m"), RollingWindow("m")
    slow.fast = False
    order = list(range(pool))
    for k in range(ticks):
        r = rng.random()
        if r < 0.15:
            order = rng.permutation(pool).tolist()  # the same label sets, another order
        elif r < 0.3:
            order = [i for i in range(pool) if rng.random() < 0.7]  # some go, some come back
        fast_store.labels = slow_store.labels = [every[i] for i in order]
        end = T0 + STEP * k
        a = fast.read(fast_store, end - STEP * 9, end, STEP)
        b = slow.read(slow_store, end - STEP * 9, end, STEP)
        assert a.labels == b.labels
        np.testing.assert_array_equal(a.t, b.t)
        np.testing.assert_array_equal(a.v, b.v)
        np.testing.assert_array_equal(a.present, b.present)
        assert fast.rows == slow.rows
        assert (fast.full_fetches, fast.incremental_fetches) == (slow.full_fetches, slow.incremental_fetches)
