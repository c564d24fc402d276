"""The actuator's Alertmanager webhook: what a sender sees for good, bad, unauthorised and oversized bodies, the
deduplication by fingerprint and status, a bounded inbox under a flood of 1,000 alerts a second, and a real
Alertmanager on loopback delivering to it with a bearer token from a credentials file."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta

import pytest
import requests
import yaml

from infercast.actuators.webhook import Inbox, Offer, WebhookReceiver
from infercast.alertrules.alertmanager import Receivers, alertmanager_config
from infercast.alertrules.webhook import WebhookRecorder
from infercast.httpserve import HttpService
from infercast.servers import start_alertmanager
from tests.conftest import REPO

TOKEN = "hook-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}


@contextmanager
def receiver(inbox: Inbox, **kw) -> Iterator[tuple[str, list[Offer]]]:
    offers: list[Offer] = []
    hook = WebhookReceiver(inbox, on_offer=offers.append, **kw)
    http = HttpService([hook.route()], name="actuator", token=TOKEN).start()
    try:
        yield f"{http.url}{hook.path}", offers
    finally:
        http.close()


def alert(fp: str, status: str = "firing", **labels: str) -> dict:
    return {
        "status": status,
        "labels": {"alertname": "InfercastKVCacheForecastBreach", "pool": "v4-main", **labels},
        "annotations": {"summary": "forecast breach"},
        "startsAt": "2024-11-11T03:00:00Z",
        "endsAt": "0001-01-01T00:00:00Z",
        "fingerprint": fp,
    }


def payload(*alerts: dict) -> dict:
    return {"version": "4", "status": "firing", "receiver": "infercast-actuator", "groupKey": "{}:{}", "alerts": alerts}


def test_alerts_become_events_the_loop_drains(tmp_path):
    inbox = Inbox()
    with receiver(inbox) as (url, offers):
        r = requests.post(url, json=payload(alert("a1"), alert("b2", pool="v3.5-fallback")), headers=AUTH, timeout=5)
        assert r.status_code == 200 and r.json() == {"accepted": 2, "duplicates": 0, "dropped": 0}
    events = inbox.drain()
    assert [(e.fingerprint, e.pool, e.status, e.alertname) for e in events] == [
        ("a1", "v4-main", "firing", "InfercastKVCacheForecastBreach"),
        ("b2", "v3.5-fallback", "firing", "InfercastKVCacheForecastBreach"),
    ]
    assert events[0].annotations["summary"] == "forecast breach" and events[0].starts_at == "2024-11-11T03:00:00Z"
    with pytest.raises(TypeError):
        events[0].labels["pool"] = "x"  # type: ignore[index]  # events are frozen
    assert inbox.drain() == [] and offers == [Offer(2, 0, 0)]


def test_duplicates_by_fingerprint_and_status_are_dropped_and_a_change_of_status_passes():
    now = [0.0]
    inbox = Inbox(dedup_seconds=300, clock=lambda: now[0])
    assert inbox.offer([_ev("a"), _ev("a"), _ev("b")]) == Offer(2, 1, 0)
    now[0] = 100.0
    assert inbox.offer([_ev("a")]) == Offer(0, 1, 0)  # re-sent by Alertmanager within the window
    assert inbox.offer([_ev("a", "resolved")]) == Offer(1, 0, 0)  # resolved: passes at once
    assert inbox.offer([_ev("a", "firing")]) == Offer(1, 0, 0)  # firing again: passes
    now[0] = 401.0
    assert inbox.offer([_ev("a", "firing")]) == Offer(1, 0, 0)  # still firing after the window: a reminder
    assert [(e.fingerprint, e.status) for e in inbox.drain()] == [
        ("a", "firing"), ("b", "firing"), ("a", "resolved"), ("a", "firing"), ("a", "firing")
    ]  # fmt: skip


def _ev(fp: str, status: str = "firing"):
    from infercast.actuators.webhook import events_from

    return events_from({"alerts": [alert(fp, status)]}, 0.0)[0]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"not json", "not JSON"),
        (json.dumps({"alerts": {"a": 1}}).encode(), "alerts must be a list"),
        (json.dumps({"alerts": [{"status": "firing"}]}).encode(), "alerts[0].labels must be an object of strings"),
        (json.dumps(payload({**alert("a"), "fingerprint": 7})).encode(), "alerts[0].fingerprint must be a string"),
        (json.dumps(payload({**alert("a"), "status": "burning"})).encode(), "alerts[0].status must be 'firing'"),
        (json.dumps({"alerts": [alert("a")] * 1001}).encode(), "alerts: at most 1000 per notification"),
        (b"[" * 5000 + b"]" * 5000, "nested deeper than"),
    ],
)
def test_a_body_that_is_not_alertmanagers_is_a_400_and_nothing_is_kept(body, reason):
    inbox = Inbox()
    with receiver(inbox) as (url, offers):
        r = requests.post(url, data=body, headers={**AUTH, "Content-Type": "application/json"}, timeout=5)
    assert r.status_code == 400 and reason in r.json()["error"]
    assert len(inbox) == 0 and offers == []


def test_the_token_is_checked_before_the_body_and_the_size_before_a_byte_is_read():
    inbox = Inbox()
    with receiver(inbox, max_body_bytes=2048) as (url, _):
        r = requests.post(url, json=payload(alert("a")), timeout=5)
        assert r.status_code == 401 and r.json()["error"] == "missing or wrong bearer token"
        r = requests.post(url, json=payload(alert("a")), headers={"Authorization": "Bearer nope"}, timeout=5)
        assert r.status_code == 401
        big = json.dumps(payload(*[alert(f"f{i}") for i in range(40)])).encode()
        r = requests.post(url, data=big, headers=AUTH, timeout=5)
        assert r.status_code == 413 and "over the 2048-byte limit" in r.json()["error"]
        host, port = url.split("//")[1].split("/")[0].split(":")
        with socket.create_connection((host, int(port)), timeout=5) as s:  # no Content-Length: refused, not read
            s.sendall(f"POST /api/v1/alerts HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n\r\n".encode())
            assert b" 411 " in s.recv(4096).split(b"\r\n")[0]
        r = requests.get(url, timeout=5)
        assert r.status_code == 405
    assert len(inbox) == 0


def test_a_full_inbox_drops_the_oldest_and_lets_its_resend_back_in():
    inbox = Inbox(maxlen=3)
    assert inbox.offer([_ev(f"f{i}") for i in range(5)]) == Offer(5, 0, 2)
    assert [e.fingerprint for e in inbox.drain()] == ["f2", "f3", "f4"]
    assert inbox.offer([_ev("f0"), _ev("f4")]) == Offer(1, 1, 0)  # f0 was dropped unseen: accepted again


@pytest.mark.slow
def test_a_flood_of_a_thousand_alerts_a_second_is_a_few_events():
    """2,000 alerts in 2 seconds (40 notifications of 50, from 4 senders) about 25 problems: the loop finds 25
    events; then 2,000 distinct alerts into an inbox of 100: it holds 100 and says it dropped 1,900."""
    inbox = Inbox(maxlen=100, max_fingerprints=500)
    with receiver(inbox) as (url, offers):
        statuses: list[int] = []

        def send(sender: int) -> None:
            with requests.Session() as s:
                for n in range(10):
                    t0 = time.monotonic()
                    body = payload(*[alert(f"fp{(sender * 7 + n + i) % 25}") for i in range(50)])
                    statuses.append(s.post(url, json=body, headers=AUTH, timeout=10).status_code)
                    time.sleep(max(0.0, 0.2 - (time.monotonic() - t0)))  # 4 senders x 50 alerts / 0.2 s

        threads = [threading.Thread(target=send, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert statuses == [200] * 40
        events = inbox.drain()
        assert sorted(e.fingerprint for e in events) == sorted(f"fp{i}" for i in range(25))
        assert sum(o.accepted for o in offers) == 25 and sum(o.duplicates for o in offers) == 1975

        for n in range(20):
            body = payload(*[alert(f"new{n}-{i}") for i in range(100)])
            assert requests.post(url, json=body, headers=AUTH, timeout=10).status_code == 200
    assert len(inbox) == 100 and sum(o.dropped for o in offers) == 1900
    assert len(inbox._seen) <= 500  # the dedup memory is bounded too
    assert [e.fingerprint for e in inbox.drain()][-1] == "new19-99"


@pytest.mark.servers
def test_a_real_alertmanager_delivers_to_the_webhook_with_its_token(tmp_path):
    inbox = Inbox()
    (tmp_path / "token").write_text(TOKEN + "\n")
    people = WebhookRecorder(token=None).serve()
    with receiver(inbox) as (url, offers):
        cfg = alertmanager_config(
            Receivers(
                actuator_url=url,
                actuator_token_file=str(tmp_path / "token"),
                pager_url=f"{people.url}/pager",
                chat_url=f"{people.url}/chat",
            )
        )
        # timers for a test (the routes are the committed ones): resend a changed group after 1 s
        actuator_route = next(r for r in cfg["route"]["routes"] if r.get("receiver") == "infercast-actuator")
        actuator_route["group_interval"] = "1s"
        shutil.copytree(REPO / "alertrules" / "templates", tmp_path / "templates")
        am = start_alertmanager(yaml.safe_dump(cfg), workdir=tmp_path)
        try:
            labels = {"alertname": "InfercastKVCacheForecastBreach", "pool": "v4-main", "version": "v4",
                      "severity": "warning", "team": "serving", "kind": "predictive", "actuator": "notify"}  # fmt: skip
            _post(am.url, [labels])
            first = _wait(inbox, 1)
            assert first[0].alertname == "InfercastKVCacheForecastBreach" and first[0].pool == "v4-main"
            assert first[0].status == "firing" and len(first[0].fingerprint) == 16  # Alertmanager's fingerprint
            # a second alert joins the group (same alertname, pool, version): Alertmanager re-sends both; only
            # the new one is an event
            _post(am.url, [labels, {**labels, "instance": "v4-main-7"}])
            second = _wait(inbox, 1)
            assert [e.labels.get("instance") for e in second] == ["v4-main-7"]
            assert sum(o.duplicates for o in offers) >= 1
            # resolved: Alertmanager says so (send_resolved), and that passes the dedup
            _post(am.url, [labels], ends=datetime.now(UTC) - timedelta(seconds=1))
            third = _wait(inbox, 1, timeout=30)
            assert [(e.pool, e.status) for e in third] == [("v4-main", "resolved")]
            assert third[0].fingerprint == first[0].fingerprint
        finally:
            am.close()
            people.close()


def _post(am_url: str, alerts: list[dict[str, str]], ends: datetime | None = None) -> None:
    now = datetime.now(UTC)
    body = [
        {
            "labels": a,
            "annotations": {"summary": a["alertname"]},
            "startsAt": (now - timedelta(seconds=5)).isoformat(),
            "endsAt": (ends or now + timedelta(minutes=10)).isoformat(),
        }
        for a in alerts
    ]
    r = requests.post(f"{am_url}/api/v2/alerts", json=body, timeout=5)
    assert r.status_code == 200, r.text


def _wait(inbox: Inbox, n: int, timeout: float = 20.0) -> list:
    got: list = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got += inbox.drain()
        time.sleep(0.1)
    assert len(got) >= n, f"expected {n} events from Alertmanager within {timeout}s, got {got}"
    return got
