"""The one query interface: the memory store and a real Prometheus answer the same question the same way."""

from __future__ import annotations

import http.server
import threading
import time

import numpy as np
import pytest

from infercast.servers import free_port
from infercast.store import StoreError
from infercast.store.memory import MemoryStore
from infercast.store.prometheus import PrometheusStore, selector
from tests.predictors.conftest import openmetrics, start_backfilled


def test_the_paced_store_reads_a_wall_clock_store_on_the_simulated_clock_and_nothing_from_before_the_pacing():
    from infercast.store.paced import PacedStore
    from infercast.wallclock import Paced

    wall = MemoryStore()
    lab = {"pool": "p", "version": "v4", "instance": "a"}
    wall.write("m", lab, 995.0, 9.0)  # before the pacing began: an earlier run's, not this one's
    for k in range(5):  # simulated 0, 15, ... 60 at 10x from wall time 1000
        wall.write("m", lab, 1000.0 + 1.5 * k, float(k))
    st = PacedStore(wall, Paced(1000.0, 0.0, 10.0))
    (s,) = st.query_range("m", {"pool": "p"}, -30.0, 60.0, 15.0)
    assert np.allclose(s.t, [0.0, 15.0, 30.0, 45.0, 60.0]) and s.v.tolist() == [0, 1, 2, 3, 4]
    assert st.query_range("m", None, -45.0, -15.0, 15.0) == []


def test_memory_store_evaluates_on_the_grid_and_drops_what_is_missing():
    st = MemoryStore()
    lab = {"pool": "p", "version": "v4", "instance": "a"}
    for t in (0.0, 15.0, 30.0, 90.0):
        st.write("m", lab, t, t / 100)
    st.write("m", {"pool": "q", "version": "v4", "instance": "b"}, 30.0, 7.0)
    (s,) = st.query_range("m", {"pool": "p"}, 0, 90, 15)
    # 45, 60 and 75 have no sample within one step: left out, not carried forward or zero-filled.
    assert s.t.tolist() == [0.0, 15.0, 30.0, 90.0]
    assert s.v.tolist() == [0.0, 0.15, 0.3, 0.9]
    assert s.labels == lab
    assert len(st.query_range("m", None, 0, 90, 15)) == 2
    assert st.query_range("nothing", None, 0, 90, 15) == []


def test_memory_store_with_prometheus_lookback_carries_values_forward():
    st = MemoryStore(lookback_seconds=300)
    st.write("m", {"pool": "p"}, 0.0, 1.0)
    (s,) = st.query_range("m", None, 0, 400, 100)
    assert s.t.tolist() == [0.0, 100.0, 200.0, 300.0]  # 400 is more than 300 s after the only sample


def test_memory_store_refuses_out_of_order_and_keeps_nan():
    st = MemoryStore()
    st.write("m", {"pool": "p"}, 10.0, float("nan"))
    with pytest.raises(StoreError, match="older than the newest"):
        st.write("m", {"pool": "p"}, 5.0, 1.0)
    (s,) = st.query_range("m", None, 10, 10, 15)
    assert np.isnan(s.v[0])  # stored as observed; the predictor decides what NaN means


def test_selector_escapes_label_values():
    assert selector("m", {"b": 'x"y', "a": "1"}) == 'm{a="1",b="x\\"y"}'
    with pytest.raises(StoreError, match="not a valid metric name"):
        selector("bad name", None)


@pytest.mark.servers
def test_prometheus_store_matches_memory_store_on_the_same_samples(tmp_path):
    now = float(int(time.time()))
    samples = [(now - 1800 + 15 * i, 0.2 + 0.001 * i) for i in range(120)]
    lab = {"pool": "v4-main", "version": "v4", "instance": "n1"}
    text = openmetrics([("infercast_kv_cache_usage_ratio", "gauge", lab, samples)])
    with start_backfilled(tmp_path, text) as prom:
        store = PrometheusStore(prom.url, timeout_seconds=5)
        start, end = samples[0][0], samples[-1][0]
        (s,) = store.query_range("infercast_kv_cache_usage_ratio", {"pool": "v4-main"}, start, end, 15)
        mem = MemoryStore(lookback_seconds=300)
        mem.write_many("infercast_kv_cache_usage_ratio", lab, *zip(*samples, strict=True))
        (m,) = mem.query_range("infercast_kv_cache_usage_ratio", {"pool": "v4-main"}, start, end, 15)
        assert s.labels == lab
        assert np.array_equal(s.t, m.t)
        assert np.allclose(s.v, m.v)
        assert store.query_range("infercast_kv_cache_usage_ratio", {"pool": "other"}, start, end, 15) == []


def test_prometheus_down_is_a_clear_error():
    port = free_port()  # nothing listens there
    with pytest.raises(StoreError, match=f"cannot connect to Prometheus at http://127.0.0.1:{port}"):
        PrometheusStore(f"http://127.0.0.1:{port}", timeout_seconds=1).query_range("m", None, 0, 60, 15)


class _Slow(http.server.BaseHTTPRequestHandler):
    delay = 2.0
    body = b""

    def do_GET(self):
        time.sleep(self.delay)
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(self.body)
        except OSError:
            pass  # the client gave up (the timeout test): nothing to answer

    def log_message(self, *a):
        pass


def _serve(handler):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_prometheus_slow_times_out_with_the_limit_in_the_message():
    handler = type("H", (_Slow,), {"delay": 2.0, "body": b"{}"})
    srv = _serve(handler)
    try:
        store = PrometheusStore(f"http://127.0.0.1:{srv.server_port}", timeout_seconds=0.3)
        with pytest.raises(StoreError, match=r"did not answer within 0\.3 s"):
            store.query_range("m", None, 0, 60, 15)
    finally:
        srv.shutdown()


def test_prometheus_garbage_and_api_errors_are_reported():
    srv = _serve(type("H", (_Slow,), {"delay": 0.0, "body": b"<html>proxy error</html>"}))
    try:
        with pytest.raises(StoreError, match="not JSON"):
            PrometheusStore(f"http://127.0.0.1:{srv.server_port}").query_range("m", None, 0, 60, 15)
    finally:
        srv.shutdown()
    body = b'{"status":"error","errorType":"bad_data","error":"exceeded maximum resolution"}'
    srv = _serve(type("H", (_Slow,), {"delay": 0.0, "body": body}))
    try:
        with pytest.raises(StoreError, match="exceeded maximum resolution"):
            PrometheusStore(f"http://127.0.0.1:{srv.server_port}").query_range("m", None, 0, 60, 15)
    finally:
        srv.shutdown()
