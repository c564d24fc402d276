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


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), ticks=st.integers(1, 25), pool=st.integers(1, 8))
def test_the_grouping_kept_between_reads_combines_as_working_it_out_each_time(seed, ticks, pool):
    """`align_block` keeps the rows' (pool, version) grouping with the window's label sets: every tick's matrices
    (each way of combining) must equal those of a block that shares nothing, as the label sets come, go and reorder."""
    from infercast.predictors.reading import align_block
    from infercast.predictors.rolling import Block

    rng = np.random.default_rng(seed)
    every = [{"pool": f"p{i % 3}", "version": f"v{i % 2}", "instance": f"n{i}"} for i in range(pool)]
    every.append({"instance": "no-pool"})  # a label set without a pool: not a group's
    store = Scripted()
    store.rng = np.random.default_rng(seed)
    window = RollingWindow("m")
    order = list(range(len(every)))
    for k in range(ticks):
        r = rng.random()
        if r < 0.15:
            order = rng.permutation(len(every)).tolist()
        elif r < 0.3:
            order = [i for i in range(len(every)) if rng.random() < 0.7]
        store.labels = [every[i] for i in order]
        end = T0 + STEP * k
        block = window.read(store, end - STEP * 9, end, STEP)
        for tail in (10, 4):
            b = block.tail(tail)
            kept = align_block(b, ("mean", "max", "sum", "rate"))
            fresh = align_block(Block([dict(x) for x in b.labels], b.t, b.v, b.present), ("mean", "max", "sum", "rate"))
            for how, am in fresh.items():
                got = kept[how]
                assert got.groups == am.groups and got.index == am.index
                np.testing.assert_array_equal(got.y, am.y)
                np.testing.assert_array_equal(got.raw_points, am.raw_points)
                np.testing.assert_array_equal(got.raw_nonfinite, am.raw_nonfinite)
                np.testing.assert_array_equal(got.last_raw_t, am.last_raw_t)
