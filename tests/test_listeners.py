"""Every infercast listener against issue 12's hostile inputs: the exporter (`/metrics`, `/ingest/router`), the twin's
admin API, the alert webhook and the predictor's `/metrics`.  Each test names what the client sees; each reproduces a
finding that the listeners failed before they shared `infercast.httpserve`."""

from __future__ import annotations

import io
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import requests
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.alertrules.webhook import MAX_KEPT, Notification, WebhookRecorder, validate
from infercast.config import load_config, parse_config
from infercast.exporters.router import MAX_COUNT
from infercast.exporters.server import Exporter, ExporterServer, build_sources
from infercast.simulator.twin.fleet import build_fleet
from infercast.simulator.twin.surfaces import TwinServer
from tests.conftest import REPO

FLEET = load_config(REPO / "examples" / "flash-sale.yaml")
DEEP = b"[" * 100_000 + b"]" * 100_000


def calm_fleet():
    data = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    data["targets"] = []
    return parse_config(data)


@contextmanager
def exporter_server(token: str | None = None) -> Iterator[ExporterServer]:
    config = calm_fleet()
    srv = ExporterServer(Exporter(config, build_sources(config)), port=0, min_interval=0.0, token=token).start()
    try:
        yield srv
    finally:
        srv.close()


@contextmanager
def twin_server(token: str | None = None) -> Iterator[TwinServer]:
    srv = TwinServer(build_fleet(FLEET), token=token).start()
    try:
        yield srv
    finally:
        srv.stop()


@contextmanager
def webhook(max_kept: int = MAX_KEPT) -> Iterator[WebhookRecorder]:
    hook = WebhookRecorder(max_kept=max_kept, token=None).serve()
    try:
        yield hook
    finally:
        hook.close()


@contextmanager
def predictor() -> Iterator[str]:
    """The predictor service's listener (`infercast.predictors.cli.serve`) with a loop that publishes nothing."""
    from infercast.predictors.cli import serve

    class Loop:
        def tick(self, now, store):
            return []

    class Clock:
        def now(self):
            return time.time()

    from infercast.servers import free_port

    port = free_port()
    stop = threading.Event()
    t = threading.Thread(target=serve, args=(Loop(), None, Clock(), f"127.0.0.1:{port}", 60.0, stop), daemon=True)
    t.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            requests.get(url + "/metrics", timeout=10)  # up: it answers; 10 s for a busy CI machine
            break
        except requests.ConnectionError:
            time.sleep(0.05)
    try:
        yield url
    finally:
        stop.set()
        t.join(10)


def raw(port: int, data: bytes, wait: float = 5.0) -> bytes:
    """Send `data`, return the first answer (headers and its Content-Length of body) without sending more."""
    with socket.create_connection(("127.0.0.1", port), timeout=wait) as c:
        c.sendall(data)
        out = b""
        while True:
            head, sep, body = out.partition(b"\r\n\r\n")
            if sep:
                length = [int(h.split(b":")[1]) for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")]
                if len(body) >= (length or [0])[0]:
                    return out
            try:
                chunk = c.recv(65536)
            except TimeoutError:
                return out
            if not chunk:
                return out
            out += chunk


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/")[0])


# --- the exporter's ingest ---------------------------------------------------------------------------------------
JSON = {"Content-Type": "application/json"}  # urllib3 labels a str body text/plain, which the ingest refuses (415)


def ingest(url: str, body, **kw) -> requests.Response:
    headers = {**JSON, **kw.pop("headers", {})}
    return requests.post(f"{url}/ingest/router", data=json.dumps(body), timeout=10, headers=headers, **kw)


def req(n, pool="v4-main", version="v4", outcome="error"):
    return {"requests": [{"pool": pool, "version": version, "priority": "urgent", "outcome": outcome, "n": n}]}


def test_one_huge_count_no_longer_blinds_the_exporter():
    # before: {"n": 10**400} was applied, then every /metrics answered 500 "int too large to convert to float"
    with exporter_server() as srv:
        url = srv.http.url
        bad = json.dumps(req(1))[:-3] + "1" + "0" * 400 + "}]}"
        r = requests.post(f"{url}/ingest/router", data=bad, timeout=10, headers=JSON)
        assert r.status_code == 400 and "more than 18 digits" in r.json()["error"]
        r = ingest(url, req(MAX_COUNT + 1))
        assert r.status_code == 400 and "at most 1,000,000" in r.json()["error"]
        for bad in (1.5, "5", True, -1, None):
            assert ingest(url, req(bad)).status_code == 400, bad
        assert ingest(url, req(MAX_COUNT)).json() == {"applied": 1}
        m = requests.get(f"{url}/metrics", timeout=10)
        assert m.status_code == 200
        line = 'infercast_router_requests_total{outcome="error",pool="v4-main",priority="urgent",version="v4"} 1e+06'
        assert line in m.text


def test_ingest_checks_pools_and_versions_against_the_fleet_file():
    # before: fake error counts for any pool or version were applied (and pushed a real pool's health down)
    with exporter_server() as srv:
        url = srv.http.url
        cases = [
            (req(5, pool="nope"), "unknown pool 'nope'"),
            (req(5, version="v3.5"), "pool 'v4-main' serves version 'v4', not 'v3.5'"),
            ({"degradations": [{"from_version": "v4", "to_version": "v9", "reason": "oom"}]}, "unknown version 'v9'"),
        ]
        for body, reason in cases:
            r = ingest(url, {**body, "requests": [*body.get("requests", []), *req(1, outcome="ok")["requests"]]})
            assert r.status_code == 400 and reason in r.json()["error"], r.text
            assert "nothing applied" in r.json()["error"]
        text = requests.get(f"{url}/metrics", timeout=10).text
        # nothing of those applied: no router series at all (a refused body is no router reporting; issue 38 item 2)
        assert "infercast_router_requests_total{" not in text
        assert "nope" not in text and "v9" not in text


def test_ingest_needs_the_token_when_one_is_set_and_metrics_stay_open():
    with exporter_server(token="router-secret") as srv:
        url = srv.http.url
        assert ingest(url, req(1)).status_code == 401
        assert ingest(url, req(1), headers={"Authorization": "Bearer nope"}).status_code == 401
        assert ingest(url, req(1), headers={"Authorization": "Bearer router-secret"}).json() == {"applied": 1}
        assert requests.get(f"{url}/metrics", timeout=10).status_code == 200


# --- the twin's admin API ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("weight", b'{"weight": Infinity}'),
        ("weight", b'{"weight": "1e999"}'),
        ("weight", b'{"weight": 1e999}'),
        ("weight", b'{"weight": NaN}'),
        ("weight", b'{"weight": 1e300}'),
        ("breaker", b'{"seconds": Infinity}'),
        ("breaker", b'{"seconds": "1e999"}'),
    ],
)
def test_twin_admin_refuses_non_finite_numbers(path, body):
    # before: Infinity and "1e999" became a pool weight or breaker threshold of inf
    with twin_server() as srv:
        r = requests.post(f"{srv.url}/pools/v4-main/{path}", data=body, timeout=10)
        assert r.status_code == 400 and r.json()["error"]
        router = srv.fleet.router
        assert (
            router.weights["v4-main"] == 1.0
            and router.breaker_threshold["v4-main"] == FLEET.router.breaker_latency_seconds
        )


def test_twin_admin_changes_need_the_token_when_one_is_set():
    with twin_server(token="ops") as srv:
        assert requests.post(f"{srv.url}/pools/v4-main/weight", json={"weight": 0.5}, timeout=10).status_code == 401
        ok = requests.post(
            f"{srv.url}/pools/v4-main/weight", json={"weight": 0.5}, headers={"Authorization": "Bearer ops"}, timeout=10
        )
        assert ok.status_code == 200 and srv.fleet.router.weights["v4-main"] == 0.5
        assert requests.get(f"{srv.url}/pools", timeout=10).status_code == 200  # reading needs no token


# --- the alert webhook -------------------------------------------------------------------------------------------
ALERT = {"status": "firing", "labels": {"alertname": "InfercastKVCacheUsageHigh", "pool": "v4-main"}}


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ({"alerts": "not a list"}, "alerts must be a list"),
        ({"alerts": [["x"]]}, "alerts[0] must be an object"),
        ({"alerts": [{"labels": ["alertname"]}]}, "alerts[0].labels must be an object of strings"),
        ({"alerts": [{**ALERT, "labels": {"alertname": 5}}]}, "alerts[0].labels must be an object of strings"),
        ({"alerts": [ALERT, {**ALERT, "status": "burning"}]}, "alerts[1].status"),
        ({"receiver": 7, "alerts": [ALERT]}, "receiver must be a string"),
        ([ALERT], "expected a JSON object"),
    ],
)
def test_a_malformed_notification_is_a_400_and_nothing_is_stored(payload, reason):
    # before: it was stored (200), then reading it raised, so Alertmanager retried and duplicated
    with webhook() as hook:
        r = requests.post(f"{hook.url}/pager", json=payload, timeout=10)
        assert r.status_code == 400 and reason in r.json()["error"], r.text
        assert hook.received() == []
        assert hook.first("InfercastKVCacheUsageHigh") is None


def test_the_first_page_for_a_pool_skips_pages_for_other_pools():
    # before: first() returned the first page of that name for any pool, so a page for the idle fallback pool was
    # measured as the lead of the pool that crossed (tests/alerting/test_end_to_end.py)
    hook = WebhookRecorder(out=io.StringIO(), token=None)
    fallback = Notification("/actuator", 1.0, {"receiver": "infercast-actuator", "alerts": [
        {**ALERT, "labels": {**ALERT["labels"], "pool": "v3.5-fallback"}}]})  # fmt: skip
    main = Notification("/actuator", 2.0, {"receiver": "infercast-actuator", "alerts": [ALERT]})
    hook.record(fallback)
    hook.record(main)
    assert hook.first("InfercastKVCacheUsageHigh") is fallback
    assert hook.first("InfercastKVCacheUsageHigh", "infercast-actuator", {"pool": "v4-main"}) is main
    assert hook.first("InfercastKVCacheUsageHigh", labels={"pool": "v4-long"}) is None
    assert hook.first("InfercastKVCacheUsageHigh", "pager-serving", {"pool": "v4-main"}) is None


def test_the_webhook_keeps_a_bounded_number_of_notifications():
    # before: every notification stayed in memory forever
    with webhook(max_kept=50) as hook:
        for i in range(80):
            body = {"receiver": "pager", "alerts": [{**ALERT, "labels": {**ALERT["labels"], "n": str(i)}}]}
            assert requests.post(f"{hook.url}/pager", json=body, timeout=10).status_code == 200
        kept = hook.received()
        assert len(kept) == 50 and hook.dropped == 30
        assert [n.payload["alerts"][0]["labels"]["n"] for n in kept] == [str(i) for i in range(30, 80)]


# --- every listener ----------------------------------------------------------------------------------------------
@contextmanager
def any_listener(kind: str) -> Iterator[tuple[str, str]]:
    """(base URL, a path that takes a POST body) of each listener."""
    if kind == "exporter":
        with exporter_server() as srv:
            yield srv.http.url, "/ingest/router"
    elif kind == "twin":
        with twin_server() as srv:
            yield srv.url, "/pools/v4-main/weight"
    elif kind == "webhook":
        with webhook() as hook:
            yield hook.url, "/pager"
    else:
        with predictor() as url:
            yield url, "/metrics"


LISTENERS = ["exporter", "twin", "webhook", "predictor"]


@pytest.mark.parametrize("kind", LISTENERS)
def test_content_length_minus_one_is_refused_at_once(kind):
    # before: the twin read 200 MiB past its 64 KiB cap, the webhook 100 MiB past its 4 MiB cap
    with any_listener(kind) as (url, path):
        reply = raw(port_of(url), f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n".encode())
        status = int(reply.split(b" ")[1])
        # the predictor has no POST route: 405 before any body is looked at
        assert status == (405 if kind == "predictor" else 400), reply
        assert b'{"error": ' in reply


@pytest.mark.parametrize("kind", LISTENERS)
def test_deeply_nested_json_is_a_400_not_a_dropped_connection(kind):
    # before: an uncaught RecursionError dropped the connection with no answer and printed a traceback
    with any_listener(kind) as (url, path):
        if kind == "predictor":  # nothing takes a body: refused before it is read
            r = requests.post(f"{url}{path}", data=DEEP[:1000], timeout=10)
            assert r.status_code == 405 and r.json()["error"]
            return
        r = requests.post(f"{url}{path}", data=DEEP[:60_000], timeout=10)
        assert r.status_code == 400 and "nested deeper than 32" in r.json()["error"]


@pytest.mark.parametrize("kind", LISTENERS)
def test_idle_connections_hold_a_bounded_number_of_threads_and_real_clients_still_get_answers(kind):
    # before: 400 connections that never finished their headers held 402 threads
    with any_listener(kind) as (url, path):
        before = threading.active_count()
        socks = []
        try:
            for _ in range(400):
                c = socket.create_connection(("127.0.0.1", port_of(url)), timeout=5)
                c.sendall(b"GET / HTTP/1.1\r\n")
                socks.append(c)
            time.sleep(0.3)
            assert threading.active_count() - before <= 64 + 4
            if kind == "webhook":
                assert requests.post(f"{url}{path}", json={"alerts": [ALERT]}, timeout=10).status_code == 200
            else:
                get = "/pools" if kind == "twin" else "/metrics"
                assert requests.get(f"{url}{get}", timeout=10).status_code == 200
        finally:
            for c in socks:
                c.close()


JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=10) | st.sampled_from(["firing", "resolved"]),
    lambda c: st.lists(c, max_size=4) | st.dictionaries(st.sampled_from(["labels", "status", "alertname", "x"]), c),
    max_leaves=20,
)


@settings(max_examples=400, deadline=None)
@given(
    st.fixed_dictionaries(
        {"alerts": st.lists(st.fixed_dictionaries({"labels": JSONISH, "status": JSONISH}), max_size=3) | JSONISH},
        optional={"receiver": JSONISH, "status": JSONISH, "commonLabels": JSONISH},
    )
)
def test_whatever_the_webhook_accepts_it_can_read_back(payload):
    # validate() is the gate: a payload it lets through never makes record(), first() or alertnames raise
    try:
        validate(payload)
    except ValueError as e:
        assert str(e)
        return
    hook = WebhookRecorder(out=io.StringIO(), token=None)
    note = Notification("/pager", 0.0, payload)
    hook.record(note)
    assert hook.first("x") is None or hook.first("x") is note
    assert len(note.alertnames) == len(payload.get("alerts", []))
