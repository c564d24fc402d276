"""The daemon running infercast's own control loop (`infercast.actuators.controller:build_tick`, the default) against
the twin's admin API, reading a real Prometheus: advisory by default, acting in active mode, freezing when Prometheus
dies and resuming when it is back.

What Prometheus holds is scripted: a small exposition server (`Exposition`, a test double standing in for the
exporter and the predictor service) serves the catalog series the loop reads — the fullest instance's KV usage, the
KV forecast's upper band, its breach ETA — and a real Prometheus scrapes it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from infercast.actuators.audit import Audit
from infercast.servers import prometheus_config, start_prometheus
from tests.actuators.test_daemon import fleet_file
from tests.conftest import REPO

pytestmark = pytest.mark.servers


class Exposition:
    """Serves a fixed exposition text on loopback (a test double for the exporter and the predictor)."""

    def __init__(self, text: str) -> None:
        body = text.encode()

        class H(BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *a):
                pass

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.port = self.srv.server_address[1]
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


# v4-main's fullest instance at 0.66, its forecast's upper band at 0.93 crossing 0.75 in 40 s
SERIES = """\
infercast_kv_cache_usage_ratio{pool="v4-main",version="v4",instance="v4-main-0"} 0.66
infercast_kv_cache_usage_ratio{pool="v4-main",version="v4",instance="v4-main-1"} 0.41
infercast_forecast_kv_cache_usage_ratio{pool="v4-main",version="v4",forecaster="lstm",horizon="300s",\
band="upper"} 0.93
infercast_forecast_breach_eta_seconds{pool="v4-main",version="v4",threshold="0.75"} 40
"""


def _once(path, *args):
    return subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "actuator", "--config", str(path), *args, "--once"],
        capture_output=True, text=True, timeout=120, cwd=REPO,
        env={**os.environ, "TEST_ROUTER_TOKEN": "s3cret"}, check=False,
    )  # fmt: skip


def _wait_for_series(url: str, timeout: float = 30.0) -> None:
    """Until a range query like the loop's (15 s steps up to now) returns every scripted series."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        now = time.time()
        r = requests.get(
            f"{url}/api/v1/query_range",
            params={"query": '{__name__=~"infercast_.+"}', "start": now - 60, "end": now, "step": 15},
            timeout=5,
        ).json()
        if len(r["data"]["result"]) == len(SERIES.splitlines()):
            return
        time.sleep(0.3)
    raise AssertionError("Prometheus never scraped the scripted series")


def test_the_daemon_runs_infercasts_loop_advisory_then_active_and_freezes_without_prometheus(twin, tmp_path):
    exp = Exposition(SERIES)
    prom = start_prometheus(prometheus_config({"scripted": f"127.0.0.1:{exp.port}"}), workdir=tmp_path / "prom")
    try:
        _wait_for_series(prom.url)
        path = fleet_file(tmp_path, twin.url, prometheus_url=prom.url)
        before = twin.fleet.router.admission()

        # advisory (the default): the loop decides to tighten admission 40 s before the breach, changes nothing
        r = _once(path)
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        assert not report["frozen"], report["note"]
        decided = [a for a in report["actions"] if a["action"]["kind"] == "set_admission"]
        assert decided and {a["outcome"] for a in decided} == {"advisory"}
        assert {a["reason"] for a in decided} == {"forecast"}
        assert twin.fleet.router.admission() == before and twin.fleet.actions == []

        # active: the same decision is applied through the twin's admin API, and audited
        r = _once(path, "--mode", "active")
        assert r.returncode == 0, r.stderr
        applied = [a for a in json.loads(r.stdout)["actions"] if a["outcome"] == "applied"]
        assert [a["action"]["kind"] for a in applied] == ["set_admission"]
        after = twin.fleet.router.admission()
        assert after["normal_queue_seconds"] == 1.0 and after["low_queue_seconds"] == 0.0
        rows = Audit(tmp_path / "audit.db").recent(0)
        assert any(row.status == "applied" and row.action.kind == "set_admission" for row in rows)

        # Prometheus killed: the loop freezes (store_down), decides and applies nothing
        prom.close()
        n = len(twin.fleet.actions)
        r = _once(path, "--mode", "active")
        assert r.returncode == 0, r.stderr
        report = json.loads(r.stdout)
        assert report["frozen"] and report["freeze_reason"] == "store_down"
        assert report["actions"] == [] and len(twin.fleet.actions) == n
    finally:
        prom.close()
        exp.close()
