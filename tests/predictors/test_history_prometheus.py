"""The rolling history against a real Prometheus on loopback (history backfilled with promtool): sliding over the
history tick by tick, it asks only for the newest points and combines into the matrices a whole-window read gives,
through the store's fast JSON path."""

from __future__ import annotations

import itertools
import time

import pytest

from infercast.catalog import KV_CACHE_USAGE_RATIO, ROUTER_REQUESTS_TOTAL
from infercast.predictors.rolling import RollingWindow
from infercast.predictors.service import align_block, align_many
from infercast.store.prometheus import PrometheusStore
from tests.predictors.conftest import openmetrics, start_backfilled
from tests.predictors.test_history_buffer import HOWS, Recording, _same

pytestmark = pytest.mark.servers
STEP = 15.0


def _history(now: float) -> str:
    ts = [now - 3600 + STEP * i for i in range(241)]
    series = []
    for p in range(4):
        for inst in range(1 + p % 3):
            lab = {"pool": f"p{p}", "version": "v1", "instance": f"n{inst}"}
            # pool 1's instance 0 stops half-way (Prometheus' 5 min lookback, then nothing); values ramp per pool
            keep = [t for t in ts if not (p == 1 and inst == 0 and t > ts[120])]
            series.append((KV_CACHE_USAGE_RATIO, "gauge", lab, [(t, 0.2 + 0.1 * p + 1e-5 * (t - ts[0])) for t in keep]))
            counter = [(t, 7.0 * (i % 150)) for i, t in enumerate(ts)]  # a counter that restarts
            series.append((ROUTER_REQUESTS_TOTAL, "counter", {**lab, "outcome": "ok"}, counter))
    return openmetrics(series)


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    now = float(int(time.time()) // 15 * 15)
    with start_backfilled(tmp_path_factory.mktemp("prom"), _history(now)) as p:
        yield p, now


@pytest.mark.parametrize("metric", [KV_CACHE_USAGE_RATIO, ROUTER_REQUESTS_TOTAL])
def test_sliding_over_prometheus_asks_only_for_new_points_and_matches_a_whole_read(prom, metric):
    p, now = prom
    store = Recording(PrometheusStore(p.url, timeout_seconds=30))
    w, n = RollingWindow(metric), 60
    ends = [now - 3600 + STEP * k for k in range(70, 241, 4)]
    for end in ends:
        start = end - STEP * (n - 1)
        held = w.read(store, start, end, STEP)
        full = store.inner.query_range(metric, None, start, end, STEP)
        assert full, "Prometheus answered the backfilled series"
        _same(align_block(held, HOWS), align_many(full, start, STEP, n, HOWS))
    assert store.asked[0][1:] == (ends[0] - STEP * (n - 1), ends[0])
    assert [a[1:] for a in store.asked[1:]] == [(a - STEP, b) for a, b in itertools.pairwise(ends)]
    assert w.full_fetches == 1
