"""The daemon around a control loop (test doubles from tests/actuators/doubles.py, never the product's policy): the
leader check before each tick and a follower that stays advisory (two daemons on a real Redis: exactly one acts;
Redis killed: none does), modes, the metrics it serves, APScheduler's loops (no overlap, missed and errored runs
counted), the webhook waking the alert loop, SIGTERM finishing the tick in flight, and the command line."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml

from infercast.actuators.actions import SetAdmission, SetBreakerThreshold, SetPoolWeight
from infercast.actuators.audit import Audit
from infercast.actuators.backends.redis import client as redis_client
from infercast.actuators.backends.router_http import HttpAdmin
from infercast.actuators.daemon import Daemon
from infercast.actuators.daemon_cli import DaemonParts
from infercast.actuators.leader import RedisLease, SingleReplica
from infercast.actuators.tick import TickContext, TickReport, VerdictOutcome
from infercast.actuators.webhook import Inbox, WebhookReceiver
from infercast.catalog import CATALOG, exposed_names
from infercast.clock import WallClock
from tests.actuators.doubles import Scripted, Slow
from tests.conftest import REPO

W5 = SetPoolWeight("v4-main", 0.5)


def parts_for(twin, fleet_cfg, tmp_path, mode="active", name="a") -> DaemonParts:
    return DaemonParts(
        config=fleet_cfg,
        mode=mode,
        admin=HttpAdmin(twin.url, "s3cret"),
        audit=Audit(tmp_path / f"{name}.db"),
        inbox=Inbox(),
        store=None,
        clock=WallClock(),
        apply_backoff_seconds=0.01,
    )


def scrape(daemon: Daemon) -> dict[str, float]:
    text = requests.get(f"{daemon.url}/metrics", timeout=5).text
    out = {}
    for line in text.splitlines():
        if line.startswith("infercast_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_an_active_leader_applies_and_publishes_what_it_set(twin, fleet_cfg, tmp_path):
    parts = parts_for(twin, fleet_cfg, tmp_path)
    loop = Scripted(
        parts,
        [
            (W5, "forecast"),
            (SetBreakerThreshold("v4-main", 0.4), "live_metrics"),
            (SetAdmission(memory_limit=0.8), "alert"),
        ],
        verdicts=[VerdictOutcome(W5, "rolled_back", "kv got worse")],
    )
    d = Daemon(loop, SingleReplica("solo"), mode="active").start(first_run=False)
    try:
        for _ in range(3):
            report = d.run_once("scheduled")
            assert report is not None and report.actions[0].outcome == "applied"
        m = scrape(d)
    finally:
        d.stop()
    assert twin.fleet.router.weights["v4-main"] == 0.5 and twin.fleet.router.breaker_threshold["v4-main"] == 0.4
    assert m["infercast_actuator_leader"] == 1.0 and m["infercast_actuator_active"] == 1.0
    assert m['infercast_actuator_actions_total{action="set_pool_weight",outcome="applied",pool="v4-main"}'] == 1.0
    assert m['infercast_actuator_decisions_total{action="set_admission",pool="fleet",reason="alert"}'] == 1.0
    assert m['infercast_actuator_pool_weight{pool="v4-main"}'] == 0.5
    assert m['infercast_actuator_breaker_threshold{kind="latency",pool="v4-main"}'] == 0.4
    assert m['infercast_actuator_breaker_threshold{kind="memory",pool="fleet"}'] == 0.8
    assert m['infercast_actuator_verdicts_total{action="set_pool_weight",pool="v4-main",verdict="rolled_back"}'] == 1
    assert m['infercast_actuator_decision_latency_seconds_count{loop="scheduled"}'] == 3.0
    assert m['infercast_actuator_ticks_total{loop="scheduled",outcome="ok"}'] == 3.0
    assert m['infercast_actuator_change_budget_used_ratio{pool="fleet"}'] == 0.3
    assert [d.status for d in parts.audit.recent(0)] == ["applied"] * 3


def test_every_series_it_serves_is_a_catalog_name(twin, fleet_cfg, tmp_path):
    d = Daemon(Scripted(parts_for(twin, fleet_cfg, tmp_path), [(W5, "forecast")]), SingleReplica()).start(
        first_run=False
    )
    try:
        d.run_once("scheduled")
        text = requests.get(f"{d.url}/metrics", timeout=5).text
    finally:
        d.stop()
    allowed = {n for m in CATALOG for n in exposed_names(m)}
    served = {re.split(r"[{ ]", line)[0] for line in text.splitlines() if line.startswith("infercast_")}
    assert served and served <= allowed, served - allowed
    assert {"infercast_actuator_leader", "infercast_actuator_active", "infercast_actuator_frozen"} <= served


def test_advisory_mode_decides_records_and_touches_nothing(twin, fleet_cfg, tmp_path):
    parts = parts_for(twin, fleet_cfg, tmp_path, mode="advisory")
    d = Daemon(Scripted(parts, [(W5, "forecast")]), SingleReplica(), mode="advisory").start(first_run=False)
    try:
        report = d.run_once("scheduled")
        m = scrape(d)
    finally:
        d.stop()
    assert report.actions[0].outcome == "advisory"
    assert twin.fleet.actions == [] and twin.fleet.router.weights["v4-main"] == 1.0
    assert m["infercast_actuator_leader"] == 1.0 and m["infercast_actuator_active"] == 0.0
    assert m['infercast_actuator_actions_total{action="set_pool_weight",outcome="advisory",pool="v4-main"}'] == 1.0
    assert 'infercast_actuator_pool_weight{pool="v4-main"}' not in m  # nothing was set
    assert parts.audit.recent(0)[0].status == "advisory" and parts.audit.in_flight() == []


def test_two_daemons_on_one_redis_lease_exactly_one_acts(redis_server, twin, fleet_cfg, tmp_path):
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    daemons, loops = [], []
    for name in ("a", "b"):
        parts = parts_for(twin, fleet_cfg, tmp_path, name=name)
        loops.append(Scripted(parts, [(SetPoolWeight("v4-main", 0.5 if name == "a" else 0.9), "forecast")]))
        daemons.append(Daemon(loops[-1], RedisLease(redis_client(url), identity=name), mode="active"))
    for d in daemons:
        d.start(first_run=False)
    try:
        for _ in range(3):
            outcomes = [d.run_once("scheduled").actions[0].outcome for d in daemons]
            assert sorted(outcomes) == ["advisory", "applied"]
        ma, mb = scrape(daemons[0]), scrape(daemons[1])
        assert (ma["infercast_actuator_leader"], mb["infercast_actuator_leader"]) == (1.0, 0.0)
        assert mb["infercast_actuator_active"] == 0.0  # the follower stays advisory
        assert {a for _, a in twin.fleet.actions} == {SetPoolWeight("v4-main", 0.5)}

        redis_server.close()  # Redis lost: nobody acts
        outcomes = [d.run_once("scheduled").actions[0].outcome for d in daemons]
        assert outcomes == ["advisory", "advisory"]
        assert scrape(daemons[0])["infercast_actuator_leader"] == 0.0
        assert len(twin.fleet.actions) == 3
    finally:
        for d in daemons:
            d.stop()


def test_backend_errors_are_retried_with_backoff_then_recorded_failed(fleet_cfg, tmp_path):
    """The router answers 500 every time: the apply is tried apply_attempts times with backoff, then the audit
    trail, the report and the metrics all say `failed` with the router's reason."""
    from tests.actuators.faulty import FaultyServer, Step

    srv = FaultyServer([Step(500, b'{"error": "upstream config store unavailable"}')])
    parts = DaemonParts(
        config=fleet_cfg, mode="active", admin=HttpAdmin(srv.url), audit=Audit(tmp_path / "a.db"), inbox=Inbox(),
        store=None, clock=WallClock(), apply_attempts=3, apply_backoff_seconds=0.01,
    )  # fmt: skip
    d = Daemon(Scripted(parts, [(W5, "forecast")]), SingleReplica(), mode="active").start(first_run=False)
    try:
        report = d.run_once("scheduled")
        m = scrape(d)
    finally:
        d.stop()
        srv.close()
    (outcome,) = report.actions
    assert outcome.outcome == "failed" and "gave up after 3 attempts" in outcome.detail
    assert len(srv.seen) == 3 and {s.method for s in srv.seen} == {"POST"}
    (decision,) = parts.audit.recent(0)
    assert decision.status == "failed" and decision.attempts == 3
    assert "HTTP 500: upstream config store unavailable" in decision.detail
    assert m['infercast_actuator_actions_total{action="set_pool_weight",outcome="failed",pool="v4-main"}'] == 1.0
    assert 'infercast_actuator_pool_weight{pool="v4-main"}' not in m


def test_a_tick_that_raises_is_counted_and_the_next_runs(twin, fleet_cfg, tmp_path):
    calls = []

    def tick(now: float, ctx: TickContext) -> TickReport:
        calls.append(ctx.loop)
        if len(calls) == 1:
            raise RuntimeError("store exploded")
        return TickReport(frozen=True, freeze_reason="store_down")

    d = Daemon(tick, SingleReplica()).start(first_run=False)
    try:
        assert d.run_once("scheduled") is None
        assert d.run_once("scheduled").frozen
        d.run_once("scheduled")
        m = scrape(d)
    finally:
        d.stop()
    assert m['infercast_actuator_ticks_total{loop="scheduled",outcome="error"}'] == 1.0
    assert m['infercast_actuator_ticks_total{loop="scheduled",outcome="ok"}'] == 2.0
    assert m["infercast_actuator_frozen"] == 1.0
    assert m['infercast_actuator_freezes_total{reason="store_down"}'] == 1.0  # one freeze, not one per tick


@pytest.mark.slow
def test_the_scheduler_runs_its_schedule_and_the_alert_runs_one_tick_at_a_time_and_counts_what_it_skips(tmp_path):
    """One control loop: on its schedule and, when an alert arrives, at once (`ctx.loop` says which); a tick that
    overruns its interval makes the next scheduled run be skipped and counted as missed, never run beside it."""
    spans: list[tuple[str, float, float]] = []
    lock = threading.Lock()

    def tick(now: float, ctx: TickContext) -> TickReport:
        t0 = time.monotonic()
        time.sleep(0.35 if ctx.loop == "scheduled" else 0.05)  # the scheduled run overruns its 0.2 s interval
        with lock:
            spans.append((ctx.loop, t0, time.monotonic()))
        return TickReport()

    d = Daemon(tick, SingleReplica(), interval=0.2, misfire_grace=1).start()
    time.sleep(1.0)
    d.wake()  # what the webhook does when it accepts a new alert
    time.sleep(2.0)
    d.stop()
    assert {loop for loop, _, _ in spans} == {"scheduled", "alert"}
    ordered = sorted(spans, key=lambda s: s[1])
    assert all(a[2] <= b[1] for a, b in itertools.pairwise(ordered)), "two ticks overlapped"
    text = d.metrics.exposition().decode()
    assert re.search(r'infercast_actuator_ticks_total\{loop="scheduled",outcome="missed"\} [1-9]', text), text
    assert 'infercast_actuator_ticks_total{loop="alert",outcome="ok"} 1.0' in text


@pytest.mark.slow
def test_stop_finishes_the_tick_in_flight_and_starts_no_other(tmp_path):
    marks = tmp_path / "marks"
    d = Daemon(Slow(marks, 1.0), SingleReplica(), interval=0.2).start()
    deadline = time.monotonic() + 10
    while "start" not in (marks.read_text() if marks.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.02)
    d.stop(wait=True)
    lines = marks.read_text().splitlines()
    assert lines == ["start scheduled 1", "end scheduled 1"]
    time.sleep(0.5)
    assert marks.read_text().splitlines() == lines


def test_a_new_alert_wakes_the_alert_loop_which_drains_it(twin, fleet_cfg, tmp_path):
    parts = parts_for(twin, fleet_cfg, tmp_path)
    woke = threading.Event()
    loop = Scripted(parts, [(W5, "alert")], on_tick=lambda now, ctx: ctx.loop == "alert" and woke.set())
    hook = WebhookReceiver(parts.inbox)
    # the next scheduled run is an hour away: only the alert can make the loop run
    d = Daemon(
        loop, SingleReplica(), mode="active", interval=3600, webhook=hook, token="t0k"
    )  # an acting daemon's webhook needs a token (tests/actuators/test_intake.py)
    d.start(first_run=False)
    auth = {"Authorization": "Bearer t0k"}
    try:
        body = {"alerts": [{"status": "firing", "labels": {"alertname": "X", "pool": "v4-main"}, "fingerprint": "f1"}]}
        r = requests.post(f"{d.url}/api/v1/alerts", json=body, headers=auth, timeout=5)
        assert r.status_code == 200 and r.json()["accepted"] == 1
        assert woke.wait(10), "the alert loop did not run"
        time.sleep(0.2)
        assert [e.fingerprint for e in loop.alerts] == ["f1"]
        assert requests.post(f"{d.url}/api/v1/alerts", json=body, headers=auth, timeout=5).json()["duplicates"] == 1
        m = scrape(d)
    finally:
        d.stop()
    assert m['infercast_actuator_webhook_alerts_total{outcome="accepted"}'] == 1.0
    assert m['infercast_actuator_webhook_alerts_total{outcome="duplicate"}'] == 1.0
    assert m['infercast_actuator_ticks_total{loop="alert",outcome="ok"}'] == 1.0  # a duplicate wakes nothing
    assert twin.fleet.router.weights["v4-main"] == 0.5


# --- the command line ----------------------------------------------------------------------------------------
def fleet_file(tmp_path: Path, twin_url: str, **actuator) -> Path:
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    doc["actuator"] = {
        "backend": {"kind": "http", "url": twin_url, "token_env": "TEST_ROUTER_TOKEN"},
        "audit_db": str(tmp_path / "audit.db"),
        "listen": "127.0.0.1:0",
        "interval_seconds": 0.5,
        **actuator,
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _cli(*args: str, env: dict[str, str] | None = None, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "actuator", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        env={**os.environ, "TEST_ROUTER_TOKEN": "s3cret", **(env or {})},
        check=False,
        **kw,
    )


def test_once_in_both_modes_against_the_twins_admin_api(twin, tmp_path):
    path = fleet_file(tmp_path, twin.url)
    r = _cli("--config", str(path), "--tick", "tests.actuators.doubles:weight_walk", "--once")
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout)
    assert report["actions"][0]["outcome"] == "advisory" and twin.fleet.actions == []  # advisory by default
    r = _cli("--config", str(path), "--mode", "active", "--tick", "tests.actuators.doubles:weight_walk", "--once")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["actions"][0]["outcome"] == "applied"
    assert twin.fleet.router.weights["v4-main"] == 0.5
    r = _cli("log", "--config", str(path))
    assert "advisory" in r.stdout and "applied" in r.stdout and len(r.stdout.splitlines()) == 4


def test_bad_configuration_is_refused_before_anything_starts(twin, tmp_path):
    path = fleet_file(tmp_path, twin.url)
    doc = yaml.safe_load(path.read_text())
    del doc["actuator"]["backend"]
    path.write_text(yaml.safe_dump(doc))
    r = _cli("--config", str(path), "--tick", "tests.actuators.doubles:weight_walk")
    assert r.returncode == 2 and "actuator.backend: required to run the actuator" in r.stderr
    doc["actuator"]["backend"] = {"kind": "http", "url": twin.url, "timeout": 3}
    path.write_text(yaml.safe_dump(doc))
    r = _cli("--config", str(path))
    assert r.returncode == 2 and "actuator.backend.http.timeout: unknown key (typo?)" in r.stderr
    r = _cli("--config", str(fleet_file(tmp_path, twin.url)), "--tick", "tests.actuators.nope:x")
    assert r.returncode == 2 and "--tick: no module 'tests.actuators.nope'" in r.stderr
    assert not (tmp_path / "audit.db").exists() or Audit(tmp_path / "audit.db").recent(0) == []


@pytest.mark.slow
def test_sigterm_finishes_the_tick_in_flight_then_exits(twin, tmp_path):
    marks = tmp_path / "marks"
    path = fleet_file(tmp_path, twin.url)
    env = {**os.environ, "TEST_ROUTER_TOKEN": "s3cret", "INFERCAST_TEST_MARKS": str(marks),
           "INFERCAST_TEST_TICK_SECONDS": "2"}  # fmt: skip
    argv = [sys.executable, "-m", "infercast.tools.cli", "actuator", "--config", str(path)]
    p = subprocess.Popen(
        [*argv, "--tick", "tests.actuators.doubles:slow"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while "start" not in (marks.read_text() if marks.exists() else "") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert marks.exists(), p.stderr.read() if p.poll() is not None else "no tick started"
        p.send_signal(signal.SIGTERM)
        _, err = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, err
    lines = marks.read_text().splitlines()
    assert lines[-1].startswith("end ") and lines[-2].startswith("start ") and lines[-1][4:] == lines[-2][6:]
    assert "infercast actuator: stopped" in err


@pytest.mark.slow
def test_the_daemon_against_a_twin_served_in_its_own_process_in_both_modes(tmp_path):
    """The set-up docs/actuator.md describes: a twin advancing in real time behind its admin API (serve_main) in one
    process, the daemon in another; advisory leaves the twin alone, active changes it."""
    from infercast.servers import free_port

    port = free_port()
    twin = subprocess.Popen(
        [sys.executable, "-c", "from infercast.simulator.twin.surfaces import serve_main; serve_main()",
         "--listen", f"127.0.0.1:{port}", "--speed", "10"],
        cwd=REPO, env={**os.environ, "INFERCAST_HTTP_TOKEN": "s3cret"}, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                first = requests.get(f"{url}/v1/fleet", timeout=30).json()
                break
            except requests.RequestException:
                time.sleep(0.2)
        path = fleet_file(tmp_path, url)
        tick = ["--tick", "tests.actuators.doubles:weight_walk", "--once"]
        r = _cli("--config", str(path), *tick)
        assert r.returncode == 0 and json.loads(r.stdout)["actions"][0]["outcome"] == "advisory", r.stderr
        assert requests.get(f"{url}/v1/fleet", timeout=30).json()["pools"][0]["weight"] == 1.0
        r = _cli("--config", str(path), "--mode", "active", *tick)
        assert r.returncode == 0 and json.loads(r.stdout)["actions"][0]["outcome"] == "applied", r.stderr
        now = requests.get(f"{url}/v1/fleet", timeout=30).json()
        assert now["pools"][0] == {**first["pools"][0], "weight": 0.5}
        assert now["at"] > first["at"]  # the twin kept running meanwhile
    finally:
        twin.terminate()
        twin.wait(timeout=30)
    assert twin.returncode == 0
