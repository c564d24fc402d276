"""The predictor's rolling history (predictors/rolling.py): each tick asks the store only for the newest points,
and what it holds combines into exactly the matrices a read of the whole window gives.

Pure: the store is the in-memory one (Prometheus' grid semantics), wrapped to record every range asked for; the
same against a real Prometheus is in test_history_prometheus.py.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from infercast.catalog import FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS, KV_CACHE_USAGE_RATIO, ROUTER_REQUESTS_TOTAL
from infercast.config import PredictorConfig
from infercast.predictors import registry
from infercast.predictors.rolling import RollingWindow
from infercast.predictors.service import KV_RULES, PredictorLoop, align_block, align_many
from infercast.store import StoreError
from infercast.store.memory import MemoryStore

T0 = 1_800_000_000.0
STEP = 15.0
HOWS = ("mean", "max", "sum", "rate")


class Recording:
    """A store that records every (metric, start, end) asked for, and can be made to fail or forget."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.asked: list[tuple[str, float, float]] = []
        self.fail: str | None = None
        self.forget = False  # answer nothing, as a Prometheus that lost its data

    def query_range(self, metric, matchers, start, end, step):
        self.asked.append((metric, start, end))
        if self.fail:
            raise StoreError(self.fail)
        return [] if self.forget else self.inner.query_range(metric, matchers, start, end, step)


def _fleet(steps: int = 400, seed: int = 7) -> MemoryStore:
    """Pools of 1-3 instances: one with a hole, one with NaN and Inf, one appearing late, one going away, and a
    counter that restarts."""
    rng = np.random.default_rng(seed)
    st = MemoryStore()
    t = T0 + STEP * np.arange(steps)
    for p in range(8):
        for inst in range(1 + p % 3):
            lab = {"pool": f"p{p}", "version": "v1", "instance": f"n{inst}"}
            v = np.clip(0.2 + 0.07 * p + np.cumsum(rng.normal(0, 0.01, steps)), 0, 1)
            keep = np.ones(steps, bool)
            if p == 1:
                keep[120:150] = False  # a hole
            if p == 2:
                v[rng.random(steps) < 0.1] = np.nan
                v[200] = np.inf
            if p == 3:
                keep[:250] = False  # appears late
            if p == 4:
                keep[180:] = False  # goes away
            for ti, vi in zip(t[keep], v[keep], strict=True):
                st.write(KV_CACHE_USAGE_RATIO, lab, ti, vi)
            counter = np.cumsum(rng.poisson(20, steps)).astype(float)
            counter[300:] -= counter[300]  # a restart
            for ti, ci in zip(t, counter, strict=True):
                st.write(ROUTER_REQUESTS_TOTAL, {**lab, "outcome": "ok"}, ti, ci)
    return st


def _same(a, b) -> None:
    assert a.keys() == b.keys()
    for how in a:
        assert a[how].groups == b[how].groups, how
        np.testing.assert_allclose(a[how].y, b[how].y, rtol=1e-12, atol=0, err_msg=how)
        assert (a[how].raw_points == b[how].raw_points).all(), how
        assert (a[how].raw_nonfinite == b[how].raw_nonfinite).all(), how
        np.testing.assert_array_equal(a[how].last_raw_t, b[how].last_raw_t, err_msg=how)


@pytest.mark.parametrize("metric", [KV_CACHE_USAGE_RATIO, ROUTER_REQUESTS_TOTAL])
def test_the_rolling_window_combines_into_the_same_matrices_as_reading_the_whole_window(metric):
    st = _fleet()
    w, n = RollingWindow(metric), 60
    for k in range(80, 400, 3):  # ticks a little apart, over holes, NaN, pools appearing and going away
        end = T0 + STEP * k
        start = end - STEP * (n - 1)
        held = w.read(st, start, end, STEP)
        full = st.query_range(metric, None, start, end, STEP)
        _same(align_block(held, HOWS), align_many(full, start, STEP, n, HOWS))
    assert w.full_fetches == 1 and w.incremental_fetches > 100


def test_a_later_tick_asks_only_for_the_newest_points():
    st = Recording(_fleet())
    w, n = RollingWindow(KV_CACHE_USAGE_RATIO), 60
    ends = [T0 + STEP * k for k in (100, 101, 103, 104)]
    for end in ends:
        w.read(st, end - STEP * (n - 1), end, STEP)
    first, *later = st.asked
    assert first == (KV_CACHE_USAGE_RATIO, ends[0] - STEP * (n - 1), ends[0]), "the first read is the whole window"
    # each later read starts one step before the newest point held (late samples) and ends at the tick
    assert later == [(KV_CACHE_USAGE_RATIO, prev - STEP, end) for prev, end in itertools.pairwise(ends)]


def test_a_series_that_leaves_the_window_is_evicted_so_memory_stays_bounded():
    st = _fleet()
    w, n = RollingWindow(KV_CACHE_USAGE_RATIO), 20
    pools = set()
    for k in range(150, 260):
        end = T0 + STEP * k
        b = w.read(st, end - STEP * (n - 1), end, STEP)
        pools = {lab["pool"] for lab in b.labels}
        assert b.v.shape == (len(b.labels), n) and b.present.any(axis=1).all()
    assert "p4" not in pools, "the pool that went away at step 180 is no longer held"
    assert "p3" in pools, "the pool that appeared at step 250 is"


def test_missed_ticks_longer_than_the_window_read_the_whole_window_again():
    st = Recording(_fleet())
    w = RollingWindow(KV_CACHE_USAGE_RATIO)
    w.read(st, T0 + STEP * 80, T0 + STEP * 99, STEP)
    w.read(st, T0 + STEP * 181, T0 + STEP * 200, STEP)  # the loop was away for 100 steps
    assert st.asked[-1][1:] == (T0 + STEP * 181, T0 + STEP * 200)
    assert w.full_fetches == 2 and w.incremental_fetches == 0


def test_a_failed_read_keeps_what_was_held_and_the_next_one_fetches_the_outage():
    inner = _fleet()
    st = Recording(inner)
    w, n = RollingWindow(KV_CACHE_USAGE_RATIO), 60
    w.read(st, T0 + STEP * 41, T0 + STEP * 100, STEP)
    labels_before = list(w.labels)
    st.fail = "Prometheus at http://x answered HTTP 200 with a body that is not JSON"
    with pytest.raises(StoreError, match="not JSON"):
        w.read(st, T0 + STEP * 43, T0 + STEP * 102, STEP)
    assert w.labels == labels_before and w.t is not None and w.t[-1] == T0 + STEP * 100, "nothing held changed"
    st.fail = None
    b = w.read(st, T0 + STEP * 45, T0 + STEP * 104, STEP)
    assert st.asked[-1][1:] == (T0 + STEP * 99, T0 + STEP * 104), "from the newest point held, over the outage"
    full = inner.query_range(KV_CACHE_USAGE_RATIO, None, T0 + STEP * 45, T0 + STEP * 104, STEP)
    _same(align_block(b, HOWS), align_many(full, T0 + STEP * 45, STEP, n, HOWS))


def test_a_prometheus_that_lost_its_data_is_read_again_whole():
    st = Recording(_fleet())
    w = RollingWindow(KV_CACHE_USAGE_RATIO)
    w.read(st, T0 + STEP * 41, T0 + STEP * 100, STEP)
    st.forget = True  # the incremental answer lacks every series that had a point where it starts
    b = w.read(st, T0 + STEP * 42, T0 + STEP * 101, STEP)
    assert [a[1:] for a in st.asked[-2:]] == [(T0 + STEP * 99, T0 + STEP * 101), (T0 + STEP * 42, T0 + STEP * 101)]
    assert w.full_fetches == 2 and b.labels == [], "what the store says now, not a patch over what it lost"


def test_the_predictor_tick_reads_the_model_window_then_only_the_newest_points(lstm):
    cfg = PredictorConfig(history_seconds=3600.0, min_history_points=20)
    st = Recording(_fleet())
    loop = PredictorLoop(cfg, lstm=lstm, rps_model="last_value", kv_source="raw")
    window = loop.kv_window(lstm)
    assert window < 3600 / STEP, "the batched LSTM reads less than the history"
    now = T0 + STEP * 300
    loop.tick(now, st)
    first = {m: (a, b) for m, a, b in st.asked}
    assert first[KV_CACHE_USAGE_RATIO] == (now - STEP * (window - 1), now), "KV: the model's window, not 6 h"
    assert first[ROUTER_REQUESTS_TOTAL] == (now - 3600.0, now), "traffic: the whole history (Prophet's fit)"
    st.asked.clear()
    loop.tick(now + STEP, st)
    assert {a[1:] for a in st.asked} == {(now - STEP, now + STEP)}, "each metric: only the newest points"
    assert len(st.asked) == len(first), "one query per metric per tick"


def _with_rules(st: MemoryStore, since: int = 0, steps: int = 400) -> MemoryStore:
    """`st` plus the recording rules' series from step `since` on, recorded at every step from the raw metric."""
    t = T0 + STEP * np.arange(steps)
    raw = st.query_range(KV_CACHE_USAGE_RATIO, None, float(t[0]), float(t[-1]), STEP)
    hows = ("max", "mean")
    aligned = align_many(raw, float(t[0]), STEP, steps, hows)
    for how in hows:
        am = aligned[how]
        for i, (pool, version) in enumerate(am.groups):
            ok = np.isfinite(am.y[i]) & (np.arange(steps) >= since)
            st.write_many(KV_RULES[how], {"pool": pool, "version": version}, t[ok], am.y[i][ok])
    return st


@pytest.fixture(scope="module")
def lstm():
    model, note = registry.load_lstm()
    assert model is not None, note
    return model


def _kv_values(samples) -> dict:
    return {(s.name, s.labels): s.value for s in samples if s.name != FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS}


def test_with_the_recording_rules_recorded_the_tick_reads_them_instead_of_the_raw_metric(lstm):
    cfg = PredictorConfig(history_seconds=3600.0, min_history_points=20)
    st = Recording(_with_rules(_fleet()))
    auto = PredictorLoop(cfg, lstm=lstm, rps_model="last_value")  # kv_source="auto"
    raw = PredictorLoop(cfg, lstm=lstm, rps_model="last_value", kv_source="raw")
    for k in range(290, 293):
        now = T0 + STEP * k
        st.asked.clear()
        a = auto.tick(now, st)
        read = {m for m, _, _ in st.asked}
        assert set(KV_RULES.values()) <= read and KV_CACHE_USAGE_RATIO not in read, read
        b = raw.tick(now, st.inner)
        va, vb = _kv_values(a), _kv_values(b)
        assert va.keys() == vb.keys()
        worst = max(abs(va[key] - vb[key]) for key in va if np.isfinite(va[key]) and np.isfinite(vb[key]))
        assert worst < 1e-6, f"the rules record what the tick computes from the raw metric: {worst}"


def test_rules_loaded_too_recently_to_cover_the_window_leave_the_tick_on_the_raw_metric(lstm):
    cfg = PredictorConfig(history_seconds=3600.0, min_history_points=20)
    st = Recording(_with_rules(_fleet(), since=300))  # the rules were loaded at step 300
    loop = PredictorLoop(cfg, lstm=lstm, rps_model="last_value")
    loop.tick(T0 + STEP * 330, st)  # the window reaches back before step 300
    read = {m for m, _, _ in st.asked}
    assert KV_CACHE_USAGE_RATIO in read and KV_RULES["mean"] not in read, read
