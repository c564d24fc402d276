"""Prometheus' query_range JSON read into numpy (infercast/store/promjson.py): the same series as `json.loads`
read value by value, for payloads with NaN, infinities, empty series and chunked ranges; a malformed answer is a
clear StoreError, never a half-read series, and the rolling history keeps what it held."""

from __future__ import annotations

import json

import numpy as np
import pytest

from infercast.catalog import KV_CACHE_USAGE_RATIO
from infercast.predictors.rolling import RollingWindow
from infercast.store import StoreError
from infercast.store import prometheus as prom
from infercast.store.prometheus import PrometheusStore
from infercast.store.promjson import matrix_series, parse_body

T0 = 1_800_000_000


class _Response:
    def __init__(self, body: bytes, status: int = 200) -> None:
        self.content, self.status_code = body, status

    def json(self):
        return json.loads(self.content)


class Canned:
    """An HTTP session answering each GET with the next body (recorded payloads, no network)."""

    def __init__(self, *bodies: bytes) -> None:
        self.bodies = list(bodies)
        self.params: list[dict] = []

    def get(self, url, params=None, timeout=None):
        self.params.append(params)
        return _Response(self.bodies.pop(0) if len(self.bodies) > 1 else self.bodies[0])


def _matrix(series: list[tuple[dict, list]], compact: bool = True) -> bytes:
    """A query_range answer; compact, as Prometheus writes it, unless told otherwise."""
    result = [{"metric": {"__name__": KV_CACHE_USAGE_RATIO, **lab}, "values": vals} for lab, vals in series]
    doc = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    return json.dumps(doc, separators=(",", ":") if compact else None).encode()


def _slow(body: bytes) -> list[tuple[dict, np.ndarray, np.ndarray]]:
    """What the store read before: json.loads, then float() on every time and value."""
    out = []
    for item in json.loads(body)["data"]["result"]:
        lab = {k: v for k, v in item["metric"].items() if k != "__name__"}
        pairs = item["values"]
        out.append((lab, np.array([float(t) for t, _ in pairs]), np.array([float(v) for _, v in pairs])))
    return out


def _payload(seed: int = 3, series: int = 50, points: int = 40, compact: bool = True) -> bytes:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(series):
        vals = [[T0 + 15 * k, repr(float(x))] for k, x in enumerate(rng.random(points))]
        if i % 7 == 0:
            vals[3][1], vals[4][1], vals[5][1] = "NaN", "+Inf", "-Inf"
        if i % 11 == 0:
            vals = vals[10:]  # appears mid-range
        if i == 5:
            vals = []
        rows.append(({"pool": f"p{i}", "version": "v1", "instance": 'a"b\\c'}, vals))
    return _matrix(rows, compact)


@pytest.mark.parametrize("compact", [True, False], ids=["as-prometheus-writes-it", "spaced-json"])
def test_the_fast_parse_reads_the_same_series_as_json_value_by_value(compact):
    body = _payload(compact=compact)
    doc = parse_body(body)
    fast = [(item["metric"], *matrix_series(item, StoreError)) for item in doc["data"]["result"]]
    slow = _slow(body)
    assert len(fast) == len(slow) == 50
    for (lab, t, v), (lab0, t0, v0) in zip(fast, slow, strict=True):
        assert {k: x for k, x in lab.items() if k != "__name__"} == lab0
        np.testing.assert_array_equal(t, t0)
        np.testing.assert_array_equal(v, v0)  # NaN where NaN, +-inf where +-Inf
    # Prometheus' compact JSON takes the fast path; anything else is read by json, value by value, the same
    assert (type(doc["data"]["result"][0]["values"]).__name__ == "_Cut") == compact


def test_the_store_reads_a_chunked_range_once_per_point(monkeypatch):
    monkeypatch.setattr(prom, "MAX_POINTS", 5)  # so 8 points come in two answers that share their boundary
    lab = {"pool": "p", "version": "v"}
    first = _matrix([(lab, [[T0 + 15 * k, str(k / 10)] for k in range(5)])])
    second = _matrix([(lab, [[T0 + 15 * k, str(k / 10)] for k in range(4, 8)])])
    store = PrometheusStore("http://127.0.0.1:1", session=Canned(first, second))
    (s,) = store.query_range(KV_CACHE_USAGE_RATIO, None, T0, T0 + 15 * 7, 15)
    assert s.t.tolist() == [T0 + 15 * k for k in range(8)] and s.v.tolist() == [k / 10 for k in range(8)]


@pytest.mark.parametrize(
    ("body", "says"),
    [
        (_matrix([({"pool": "p"}, [[T0, "0.5"], [T0 + 15, "zero"]])]), "unparseable sample value 'zero'"),
        (_matrix([({"pool": "p"}, [[T0, "0.5"], [T0 + 15]])]), r"expected a \[time, value\] pair"),
        (_matrix([({"pool": "p"}, [["soon", "0.5"]])]), "unparseable sample time"),
        (_matrix([({"pool": "p"}, "0.5")]), "expected a list of samples"),
        (_matrix([({"pool": "p"}, [[T0, "0.5"]])])[:-30], "not JSON"),
        (b'{"status":"success","data":{"resultType":"vector","result":[]}}', "expected a matrix"),
        (b'{"status":"error","errorType":"bad_data","error":"parse error"}', "parse error"),
    ],
    ids=["bad-value", "short-pair", "bad-time", "not-a-list", "truncated", "vector", "error"],
)
def test_a_malformed_answer_is_a_clear_error_and_the_rolling_history_keeps_what_it_held(body, says):
    good = _matrix([({"pool": "p", "version": "v"}, [[T0 + 15 * k, "0.5"] for k in range(10)])])
    session = Canned(good)
    store = PrometheusStore("http://127.0.0.1:1", session=session)
    w = RollingWindow(KV_CACHE_USAGE_RATIO)
    held = w.read(store, T0, T0 + 15 * 9, 15)
    session.bodies = [body]
    with pytest.raises(StoreError, match=says):
        w.read(store, T0 + 15, T0 + 15 * 10, 15)
    assert w.t is not None and w.t[-1] == T0 + 15 * 9 and w.labels == held.labels, "what was held is kept"
    np.testing.assert_array_equal(w.v, held.v)
