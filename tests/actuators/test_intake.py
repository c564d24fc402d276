"""Issue 24, item 1: the actuator's alert intake is authenticated and bounded.

Each test is a hostile case and says what the user (the operator, or the attacker) sees: an acting daemon refuses to
start without a webhook token; the shared `INFERCAST_HTTP_TOKEN` and a token file guard the webhook; alerts expire
at `endsAt` or a TTL; forged pools and floods of fingerprints cannot grow what the loop keeps; a 3 MB label is a 400
and is never held; `text/xml` is a 415; an error never echoes a 900 KB label back; the exporter's ingest, reachable
beyond loopback with no token, is refused."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
from pathlib import Path
from types import MappingProxyType

import pytest
import requests
import yaml

from infercast.actuators.admin import BackendError
from infercast.actuators.audit import Audit
from infercast.actuators.controller import ControlLoop
from infercast.actuators.daemon_cli import DaemonParts, build_daemon
from infercast.actuators.policy import Decision, Outlook
from infercast.actuators.webhook import AlertEvent, Inbox
from infercast.clock import WallClock
from infercast.config import ConfigError, parse_config
from tests.conftest import REPO

FLASH = REPO / "examples" / "flash-sale.yaml"
ALERT = {"alerts": [{"status": "firing", "labels": {"alertname": "X", "pool": "v4-main"}, "fingerprint": "f1"}]}


@pytest.fixture(autouse=True)
def _no_ambient_tokens(monkeypatch):
    for name in ("INFERCAST_HTTP_TOKEN", "INFERCAST_HTTP_TOKEN_FILE", "INFERCAST_ACTUATOR_TOKEN"):
        monkeypatch.delenv(name, raising=False)


def fleet_doc(tmp_path: Path, **actuator) -> dict:
    doc = yaml.safe_load(FLASH.read_text())
    doc["actuator"] = {
        "backend": {"kind": "http", "url": "http://127.0.0.1:9", "token_env": "TEST_ROUTER_TOKEN"},
        "audit_db": str(tmp_path / "audit.db"),
        "listen": "127.0.0.1:0",
        **actuator,
    }
    return doc


def parts(tmp_path: Path, mode: str = "active", **actuator) -> DaemonParts:
    cfg = parse_config(fleet_doc(tmp_path, **actuator))
    from infercast.actuators.backends.router_http import HttpAdmin

    return DaemonParts(
        config=cfg,
        mode=mode,  # type: ignore[arg-type]
        admin=HttpAdmin("http://127.0.0.1:9"),
        audit=Audit(tmp_path / "audit.db"),
        inbox=Inbox(),
        store=None,
        clock=WallClock(),
    )


def _noop(now, ctx):
    return None


# --- the token -------------------------------------------------------------------------------------------------
def test_an_acting_daemon_without_a_webhook_token_is_refused_with_the_sources_named(tmp_path):
    """Before: `--mode active` with no token served the webhook open, and one forged alert made it act."""
    with pytest.raises(ConfigError, match="mode active needs a token on the alert webhook") as e:
        build_daemon(parts(tmp_path), _noop)
    assert "INFERCAST_HTTP_TOKEN" in str(e.value) and "token_file" in str(e.value)


def test_the_command_line_exits_2_when_asked_to_act_with_an_open_webhook(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet_doc(tmp_path)))
    env = {k: v for k, v in os.environ.items() if not k.startswith("INFERCAST_")}
    r = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "actuator", "--config", str(path), "--mode", "active",
         "--tick", "tests.actuators.doubles:weight_walk"],
        capture_output=True, text=True, timeout=60, cwd=REPO, env=env, check=False,
    )  # fmt: skip
    assert r.returncode == 2 and "mode active needs a token on the alert webhook" in r.stderr, r.stderr


def test_the_shared_INFERCAST_HTTP_TOKEN_guards_the_webhook(tmp_path, monkeypatch):
    """Before: the daemon passed `token=None` when its own variable was unset, so the shared one was ignored and
    an unauthenticated alert was accepted (200)."""
    monkeypatch.setenv("INFERCAST_HTTP_TOKEN", "shared-s3cret")
    d = build_daemon(parts(tmp_path), _noop).http.start()
    try:
        url = f"{d.url}/api/v1/alerts"
        assert requests.post(url, json=ALERT, timeout=5).status_code == 401
        ok = requests.post(url, json=ALERT, headers={"Authorization": "Bearer shared-s3cret"}, timeout=5)
        assert ok.status_code == 200 and ok.json()["accepted"] == 1
    finally:
        d.close()


def test_a_token_file_guards_the_webhook_and_two_disagreeing_sources_are_refused(tmp_path, monkeypatch):
    f = tmp_path / "token"
    f.write_text("from-a-file\n")
    d = build_daemon(parts(tmp_path, webhook={"token_file": str(f)}), _noop).http.start()
    try:
        url = f"{d.url}/api/v1/alerts"
        assert requests.post(url, json=ALERT, timeout=5).status_code == 401
        assert requests.post(url, json=ALERT, headers={"Authorization": "Bearer from-a-file"}, timeout=5).ok
    finally:
        d.close()
    monkeypatch.setenv("INFERCAST_ACTUATOR_TOKEN", "another")
    with pytest.raises(ConfigError, match=r"set two ways \(token file .*, \$INFERCAST_ACTUATOR_TOKEN\): set one"):
        build_daemon(parts(tmp_path, webhook={"token_file": str(f)}), _noop)
    (tmp_path / "empty").write_text("\n")
    monkeypatch.delenv("INFERCAST_ACTUATOR_TOKEN")
    with pytest.raises(ConfigError, match="empty"):
        build_daemon(parts(tmp_path, webhook={"token_file": str(tmp_path / "empty")}), _noop)


def test_advisory_on_loopback_runs_open_and_says_so_at_start_but_not_beyond_loopback(tmp_path, caplog):
    d = build_daemon(parts(tmp_path, mode="advisory"), _noop)
    with caplog.at_level(logging.WARNING, logger="infercast.actuators.daemon"):
        d.start(first_run=False)
    try:
        assert any("takes alerts with no token" in r.getMessage() for r in caplog.records)
    finally:
        d.stop()
    with pytest.raises(ConfigError, match="beyond loopback, and has no token"):
        build_daemon(parts(tmp_path, mode="advisory", listen="0.0.0.0:0"), _noop)


# --- what the loop keeps -------------------------------------------------------------------------------------------
class _Down:
    name = "down"

    def observe(self):
        raise BackendError("down")


def _loop(tmp_path: Path) -> ControlLoop:
    return ControlLoop(parse_config(fleet_doc(tmp_path)), _Down(), None)  # type: ignore[arg-type]


def _ev(fp: str, pool: str = "v4-main", status: str = "firing", expires_at: float | None = None) -> AlertEvent:
    return AlertEvent(fp, status, "X", MappingProxyType({"pool": pool}), expires_at=expires_at)  # type: ignore[arg-type]


def _drives(loop: ControlLoop, pool: str = "v4-main") -> bool:
    """Whether a firing alert makes the loop treat `pool` as breaching now (what makes it act on an alert)."""
    out = loop._with_alerts({pool: Outlook(pool, 0.3, 0.3)})
    reason = loop.reason_code(Decision(None, "x", {"pool": pool}))  # type: ignore[arg-type]
    return out[pool].kv_breach_eta_seconds == 0.0 and reason == "alert"


def test_a_firing_alert_stops_driving_the_loop_at_its_ttl_unless_re_sent(tmp_path):
    """Before: an alert that was never resolved (Alertmanager restarted, the resolve lost) drove the loop forever."""
    loop = _loop(tmp_path)
    loop.tick(1000.0, None, [_ev("a")])
    assert _drives(loop)
    loop.tick(1000.0 + 600, None, [_ev("a")])  # re-sent: renewed
    loop.tick(1000.0 + 600 + 899, None, [])
    assert _drives(loop)
    loop.tick(1000.0 + 600 + 901, None, [])  # not re-sent for alert_ttl_seconds (900)
    assert not _drives(loop) and len(loop.alerting) == 0


def test_an_alert_expires_at_its_ends_at(tmp_path):
    loop = _loop(tmp_path)
    loop.tick(1000.0, None, [_ev("a", expires_at=1060.0)])
    assert _drives(loop)
    loop.tick(1061.0, None, [])
    assert not _drives(loop)
    loop.tick(1100.0, None, [_ev("b", expires_at=1050.0)])  # already over when it arrived
    assert not _drives(loop)


def test_forged_pools_and_a_flood_of_fingerprints_cannot_grow_what_the_loop_keeps(tmp_path):
    """Before: 5,000 alerts about 5,000 made-up pools were 5,000 entries, for ever (71 -> 809 MB under a stream)."""
    loop = _loop(tmp_path)
    loop.tick(0.0, None, [_ev(f"f{i}", pool=f"pool-{i}") for i in range(5000)])
    assert len(loop.alerting) == 0 and loop.alerting.ignored == 5000
    loop.tick(1.0, None, [_ev(f"g{i}") for i in range(5000)])
    assert len(loop.alerting) == 1000 and _drives(loop)  # infercast.actuators.webhook.MAX_FIRING


def test_a_resolved_alert_stops_driving_the_loop(tmp_path):
    loop = _loop(tmp_path)
    loop.tick(0.0, None, [_ev("a")])
    loop.tick(1.0, None, [_ev("a", status="resolved")])
    assert not _drives(loop)


# --- the wire ------------------------------------------------------------------------------------------------------
@pytest.fixture
def open_hook(tmp_path):
    d = build_daemon(parts(tmp_path, mode="advisory"), _noop).http.start()
    try:
        yield f"{d.url}/api/v1/alerts", d
    finally:
        d.close()


def test_a_three_megabyte_label_is_a_400_and_nothing_is_kept(open_hook):
    """Before: a 3 MB label was accepted and held; 1,000 such events in the inbox were about 4 GiB."""
    url, _ = open_hook
    big = {"alerts": [{"status": "firing", "labels": {"pool": "v4-main", "big": "x" * 3_000_000}, "fingerprint": "f"}]}
    r = requests.post(url, json=big, timeout=10)
    assert r.status_code == 400 and "value over 1024 characters" in r.json()["error"]
    assert len(r.content) < 500  # the reason, not the label


def test_annotations_are_cut_and_a_bad_ends_at_is_a_400(tmp_path):
    inbox = Inbox()
    from infercast.actuators.webhook import WebhookReceiver
    from infercast.httpserve import HttpService

    hook = WebhookReceiver(inbox)
    http = HttpService([hook.route()], token=None).start()
    try:
        url = f"{http.url}{hook.path}"
        ann = {f"a{i:02d}": "y" * 100_000 for i in range(20)}
        body = {"alerts": [{"status": "firing", "labels": {"pool": "v4-main"}, "annotations": ann, "fingerprint": "f"}]}
        assert requests.post(url, json=body, timeout=10).status_code == 200
        (ev,) = inbox.drain()
        assert len(ev.annotations) == 8 and all(len(v) == 1024 for v in ev.annotations.values())
        bad = {"alerts": [{"labels": {"pool": "v4-main"}, "endsAt": "soon", "fingerprint": "f"}]}
        r = requests.post(url, json=bad, timeout=10)
        assert r.status_code == 400 and "endsAt is not an RFC 3339 time" in r.json()["error"]
        good = {"alerts": [{"labels": {"pool": "v4-main"}, "endsAt": "2030-01-01T00:00:00Z", "fingerprint": "g"}]}
        assert requests.post(url, json=good, timeout=10).ok
        assert inbox.drain()[0].expires_at == 1893456000.0
    finally:
        http.close()


def test_a_body_declared_as_xml_is_a_415_not_parsed_as_json(open_hook):
    """Before: `Content-Type: text/xml` with a JSON body was parsed and acted on."""
    url, _ = open_hook
    r = requests.post(url, data=json.dumps(ALERT), headers={"Content-Type": "text/xml"}, timeout=5)
    assert r.status_code == 415 and "application/json" in r.json()["error"]
    ok = requests.post(url, data=json.dumps(ALERT), headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 200


def test_the_config_bounds_what_the_webhook_may_hold(tmp_path):
    for key, value, what in (
        ("inbox_size", 10**8, "less than or equal to 10000"),
        ("max_body_bytes", 4 * 1024**3, "less than or equal to 16777216"),
        ("alert_ttl_seconds", math.inf, "less than or equal to 86400"),
    ):
        with pytest.raises(ConfigError, match=what):
            parse_config(fleet_doc(tmp_path, webhook={key: value}))


# --- the exporter's ingest -----------------------------------------------------------------------------------------
def _exporter(host: str, token=None):
    from infercast.config import load_config
    from infercast.exporters.server import Exporter, ExporterServer

    cfg = load_config(FLASH)
    return ExporterServer(Exporter(cfg, []), host, 0, token=token).start()


def test_the_ingest_beyond_loopback_with_no_token_is_refused_and_its_errors_echo_a_short_prefix():
    """Before: the ingest was open to anyone who could reach the port, and a 900 KB pool name came back whole in
    the 400."""
    srv = _exporter("0.0.0.0")
    try:
        body = {"requests": [{"pool": "v4-main", "version": "v4", "priority": "urgent", "outcome": "ok", "n": 1}]}
        r = requests.post(f"http://127.0.0.1:{srv.port}/ingest/router", json=body, timeout=5)
        assert r.status_code == 403 and "INFERCAST_HTTP_TOKEN" in r.json()["error"]
    finally:
        srv.close()
    srv = _exporter("127.0.0.1")
    try:
        url = f"http://127.0.0.1:{srv.port}/ingest/router"
        huge = {"requests": [{"pool": "p" * 900_000, "version": "v4", "priority": "urgent", "outcome": "ok", "n": 1}]}
        r = requests.post(url, json=huge, timeout=10)
        assert r.status_code == 400 and len(r.content) < 500, len(r.content)
        r = requests.post(url, data=json.dumps(body), headers={"Content-Type": "text/xml"}, timeout=5)
        assert r.status_code == 415
    finally:
        srv.close()


# --- item 3: one credential source per target ----------------------------------------------------------------------
def test_a_backend_url_with_credentials_and_a_token_is_a_clear_error_not_a_silent_401(tmp_path, monkeypatch):
    """Before: `http://admin:pw@router` plus $INFERCAST_ROUTER_TOKEN sent Basic credentials instead of the token, and
    every action was refused 401 with no hint why."""
    from infercast.actuators.backends import build_backend

    monkeypatch.setenv("TEST_ROUTER_TOKEN", "bearer-s3cret")
    doc = fleet_doc(tmp_path)
    doc["actuator"]["backend"]["url"] = "http://admin:hunter2@127.0.0.1:9"
    with pytest.raises(ConfigError, match=r"carries credentials .* and a bearer token is set too: use one") as e:
        build_backend(parse_config(doc))
    assert "hunter2" not in str(e.value) and "$TEST_ROUTER_TOKEN is set" in str(e.value)
    monkeypatch.delenv("TEST_ROUTER_TOKEN")
    assert build_backend(parse_config(doc)).token is None  # the URL's credentials alone: one source, fine
