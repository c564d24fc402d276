"""The 50,000-series tick's second round of savings (issue 41 item 4) publishes exactly what it did before.

- The KV samples' label tuples are kept from one tick to the next (`publish.KVLabels`) and the samples built without
  the frozen dataclass' `__init__`: on any sequence of calls (groups added, dropped, reordered, a forecaster or
  threshold changing) the samples are the ones built afresh, equal and of the same type.
- The stale / hole bookkeeping of a window shorter than the history (`PredictorLoop._gone_stale`,
  `_hole_before_window`) fills its dicts with one update per dict instead of a loop over the rows: the same skips,
  the same starts and reasons, the same dicts (values and order) as the row loops they replace, copied below.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.config import PredictorConfig
from infercast.predictors.publish import ForecastSample, KVLabels, kv_forecast_samples_many, skipped_sample
from infercast.predictors.reading import AlignedMatrix
from infercast.predictors.service import PredictorLoop

POOLS = [(f"pool-{i}", f"v{i % 2}") for i in range(12)]


@settings(max_examples=80, deadline=None)
@given(
    calls=st.lists(
        st.tuples(
            st.lists(st.integers(0, len(POOLS) - 1), unique=True, max_size=8),
            st.sampled_from(["lstm_aci", "lstm"]),
            st.sampled_from(["mean", "max"]),
            st.sampled_from([0.75, 0.9]),
        ),
        min_size=1,
        max_size=8,
    ),
    seed=st.integers(0, 2**32 - 1),
)
def test_labels_kept_from_call_to_call_make_the_samples_built_afresh(calls, seed):
    rng = np.random.default_rng(seed)
    kept = KVLabels()
    for picks, forecaster, aggregate, trigger in calls:
        groups = [POOLS[i] for i in picks]
        at_h = rng.normal(0.5, 0.2, (len(groups), 3))
        eta = np.where(rng.random(len(groups)) < 0.3, np.inf, rng.uniform(0, 300, len(groups)))
        got = kv_forecast_samples_many(groups, forecaster, at_h, 300.0, aggregate, trigger, eta, kept)
        fresh = kv_forecast_samples_many(groups, forecaster, at_h, 300.0, aggregate, trigger, eta)
        assert got == fresh
        assert all(type(s) is ForecastSample and type(s.value) is float for s in got)
        assert set(kept._by_group) == set(groups)  # only the last call's groups are held


def test_a_steady_tick_reuses_last_ticks_label_tuples():
    """The same groups in the same order: the samples hold the very tuples of the last call's (none built)."""
    kept = KVLabels()
    groups = POOLS[:5]
    a = kv_forecast_samples_many(groups, "lstm_aci", np.zeros((5, 3)), 300.0, "max", 0.75, np.zeros(5), kept)
    b = kv_forecast_samples_many(list(groups), "lstm_aci", np.ones((5, 3)), 300.0, "max", 0.75, np.ones(5), kept)
    assert all(x.labels is y.labels for x, y in zip(a, b, strict=True))
    assert [s.value for s in b] == [1.0] * 20


# ---------------------------------------------------------------- the bookkeeping, as the row loops did it
def _gone_stale_loops(loop, series, am, g0, slot):
    seen = loop._last_data.setdefault(series, {})
    for i, group in enumerate(am.groups):
        if am.last_raw_t[i] > -math.inf:
            seen[group] = float(am.last_raw_t[i])
    for group, last in list(seen.items()):
        if last < g0:
            del seen[group]
        elif group not in am.index:
            slot.append(skipped_sample(*group, series, "stale"))
            loop._note(series, group, "stale")


def _hole_before_window_loops(loop, series, t, am, reasons, starts, g0):
    cfg = loop.config
    fin = np.isfinite(am.y)
    anyfin = fin.any(axis=1)
    first = np.argmax(fin, axis=1)
    last = len(t) - 1 - np.argmax(fin[:, ::-1], axis=1)
    prev = loop._last_finite.setdefault(series, {})
    holes = loop._hole_ends.setdefault(series, {})
    for i in np.nonzero(anyfin & (first > 0) & (starts == 0))[0].tolist():
        group = am.groups[i]
        s_at, p = holes.get(group), prev.get(group)
        if s_at is not None and s_at > t[0]:
            starts[i] = int(np.searchsorted(t, s_at - 1e-9))
        elif p is not None and p < t[0] and t[first[i]] - p > cfg.stale_after_seconds:
            starts[i] = first[i]
        else:
            continue
        if reasons[i] == "too_short":
            reasons[i] = "gap"
    for i in np.nonzero(anyfin)[0].tolist():
        prev[am.groups[i]] = float(t[last[i]])
        if starts[i] > 0:
            holes[am.groups[i]] = float(t[starts[i]])
    for d in (prev, holes):
        for group in [g for g, at in d.items() if at < g0]:
            del d[group]


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), ticks=st.integers(1, 25), churn=st.sampled_from([0.0, 0.2, 0.6]))
def test_the_bookkeeping_is_the_row_loops(seed, ticks, churn):
    """Groups that come, go and come back, windows with NaN runs and holes, a history start moving on: after every
    tick both loops hold the same dicts (in the same order), say the same skips and the same starts and reasons."""
    rng = np.random.default_rng(seed)
    step, w = 15.0, 12
    cfg = PredictorConfig(step_seconds=step, stale_after_seconds=45.0, history_seconds=step * 30)
    new, old = PredictorLoop(cfg), PredictorLoop(cfg)
    present = np.ones(len(POOLS), dtype=bool)
    for k in range(ticks):
        if rng.random() < churn:
            present = rng.random(len(POOLS)) < 0.7
        idx = np.flatnonzero(present)
        groups = [POOLS[i] for i in idx.tolist()]
        t = step * np.arange(k, k + w)
        y = rng.uniform(0, 1, (len(groups), w))
        y[rng.random(y.shape) < rng.choice([0.0, 0.3, 0.8])] = np.nan
        last_raw = np.where(rng.random(len(groups)) < 0.15, -math.inf, t[-1] - step * rng.integers(0, w, len(groups)))
        am = AlignedMatrix(groups, y, np.full(len(groups), w), np.zeros(len(groups)), last_raw)
        g0 = float(t[0]) - step * rng.integers(0, 20)
        reasons = [rng.choice(np.array([None, "too_short", "stale"], dtype=object)) for _ in groups]
        starts = np.where(rng.random(len(groups)) < 0.3, rng.integers(0, w, len(groups)), 0).astype(np.int64)
        slot_new, slot_old = [], []
        new._gone_stale("kv", am, g0, slot_new)
        _gone_stale_loops(old, "kv", am, g0, slot_old)
        r_new, r_old = list(reasons), list(reasons)
        s_new, s_old = starts.copy(), starts.copy()
        new._hole_before_window("kv", t, am, r_new, s_new, g0)
        _hole_before_window_loops(old, "kv", t, am, r_old, s_old, g0)
        assert slot_new == slot_old and r_new == r_old and s_new.tolist() == s_old.tolist()
        for name in ("_last_data", "_last_finite", "_hole_ends", "_last_reason"):
            assert _ordered(getattr(new, name)) == _ordered(getattr(old, name)), name


def _ordered(d: dict) -> list:
    """A dict's items in its order, nested dicts too (equal dicts in another order compare unequal)."""
    return [(k, _ordered(v) if isinstance(v, dict) else v) for k, v in d.items()]


def test_one_check_for_a_one_instance_pools_mean_and_max():
    """A fleet of one-instance pools: the mean's and the max's rows are the same arrays, checked once a tick; the
    samples are those of a loop that checks each series itself (holes, NaN runs, a pool that goes quiet)."""
    from infercast.catalog import KV_CACHE_USAGE_RATIO
    from infercast.predictors import service
    from tests.predictors.test_service_batch import T0, ArrayStore, _by_key, _lstm

    step = 15.0
    rng = np.random.default_rng(3)
    t = T0 + step * np.arange(0, 200)
    store = ArrayStore()
    for p in range(9):
        kv = np.clip(0.3 + 0.05 * p + np.cumsum(rng.normal(0, 0.01, t.size)), 0, 1)
        if p % 3 == 1:
            kv[120:140] = np.nan  # a hole longer than stale_after
        store.add(
            KV_CACHE_USAGE_RATIO,
            {"pool": f"p{p}", "version": "v1", "instance": "i0"},
            t[: 170 + 3 * p],
            kv[: 170 + 3 * p],
        )
    cfg = PredictorConfig(history_seconds=3600.0, step_seconds=step, horizon_seconds=300.0, stale_after_seconds=120.0)
    lstm = _lstm()
    calls = []
    real = service.check_inputs

    def counted(*a, **kw):
        calls.append(1)
        return real(*a, **kw)

    real_arrays = service._check_arrays

    def fresh_arrays(am):  # every check's arrays look new: each series checked on its own
        return tuple(np.array(a) for a in real_arrays(am))

    def run(shared: bool) -> list[dict]:
        loop = PredictorLoop(cfg, trigger=0.75, lstm=lstm, rps_model="kalman")
        service._check_arrays = real_arrays if shared else fresh_arrays
        try:
            return [_by_key(loop.tick(T0 + step * k, store)) for k in range(100, 199, 4)]
        finally:
            service._check_arrays = real_arrays

    service.check_inputs = counted
    try:
        shared = run(True)
        once = len(calls)
        alone = run(False)
    finally:
        service.check_inputs = real
    assert shared == alone
    assert once < len(calls) - once  # checked fewer times with the arrays shared
