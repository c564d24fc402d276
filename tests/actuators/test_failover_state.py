"""Issue 23, item 4: the actuator's guardrail state survives a failover.

Two real daemons (`infercast actuator --mode active`, each its own process with its own audit file, as two pods on
two nodes) share a Redis lease and a Redis backend (a real redis-server on loopback).  The leader applies two
changes, then is killed with SIGKILL right after the backend applied a third and before its audit trail recorded
the answer; its audit file is deleted (its node is gone).  What the user sees from the new leader:
- it repeats nothing: the two changes the old leader applied are refused by the cooldown, counted from the state
  kept beside the lease, and the action left in flight is resolved through restart recovery (the backend knew its
  idempotency key: `applied`, not sent again) and is held by the cooldown too;
- it honours the hourly change budget of 4 that the old leader spent 3 of: one new change goes out, the next is
  refused with "change budget spent";
- its own audit trail shows the old leader's actions, marked as learnt from the cluster state.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from infercast.actuators.actions import Action, SetBreakerThreshold, SetPoolWeight
from infercast.actuators.audit import Audit
from infercast.actuators.backends.redis import RedisAdmin
from infercast.catalog import ACTUATOR_ACTIVE
from infercast.simulator.twin.admin import TwinAdmin
from infercast.simulator.twin.fleet import build_fleet
from tests.conftest import REPO

A1 = SetPoolWeight("v4-main", 0.5)
A2 = SetBreakerThreshold("v4-main", 0.3)
A3 = SetPoolWeight("v3.5-fallback", 0.2)  # the one left in flight by the kill
X = SetBreakerThreshold("v3.5-fallback", 0.4)
Y = SetPoolWeight("v4-standby", 0.3)
BUDGET = 4
LEASE = "fleet:actuator:leader"


def _fleet_file(tmp_path: Path, url: str, name: str) -> Path:
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    doc["guardrails"] = {"change_budget_per_hour": BUDGET, "cooldown_seconds": 900, "verify_window_seconds": 3600}
    doc["actuator"] = {
        "backend": {"kind": "redis", "url": url, "prefix": "fleet"},
        # a lease long enough that a loaded machine's late renew does not hand it over before the kill
        "leader": {"kind": "redis", "url": url, "key": LEASE, "lease_seconds": 8, "identity": f"pod-{name}"},
        "audit_db": str(tmp_path / name / "audit.db"),  # one audit file per replica, as on two nodes
        "listen": "127.0.0.1:0",
        "interval_seconds": 1,
    }
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _daemon(tmp_path: Path, url: str, name: str, script: list[list[Action]], hang: Action | None = None):
    env = {
        **os.environ,
        "INFERCAST_ACTUATOR_TOKEN": "t0k",
        "FAILOVER_MARKS": str(tmp_path / f"{name}.marks"),
        "FAILOVER_SCRIPT": json.dumps([[a.to_dict() for a in step] for step in script]),
    }
    if hang is not None:
        env["FAILOVER_HANG_ON"] = json.dumps(hang.to_dict())
    argv = [sys.executable, "-m", "infercast.tools.cli", "actuator", "--config", str(_fleet_file(tmp_path, url, name)),
            "--mode", "active", "--tick", "tests.actuators.failover_child:build"]  # fmt: skip
    err = (tmp_path / f"{name}.log").open("w")
    return subprocess.Popen(argv, cwd=REPO, env=env, stdout=err, stderr=subprocess.STDOUT, text=True)


def _wait_for(tmp_path: Path, name: str, text: str, proc: subprocess.Popen, seconds: float = 90) -> None:
    marks, deadline = tmp_path / f"{name}.marks", time.monotonic() + seconds
    while time.monotonic() < deadline:
        if text in (marks.read_text() if marks.exists() else ""):
            return
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    log = (tmp_path / f"{name}.log").read_text()
    raise AssertionError(f"daemon {name} never wrote {text!r} (rc {proc.poll()}); its log:\n{log[-4000:]}")


def _rows(db: Path) -> list[tuple[str, str, str, str]]:
    """(key, action, status, detail) of every decision in an audit file, read-only (the daemon may be running)."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as c:
        return c.execute("SELECT key, action, status, detail FROM decisions ORDER BY id").fetchall()


@pytest.mark.servers
@pytest.mark.slow
def test_kill_9_of_the_leader_the_new_one_neither_repeats_nor_forgets_an_action(redis_server, fleet_cfg, tmp_path):
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    backend = RedisAdmin.from_url(url, prefix="fleet")
    backend.seed(TwinAdmin(build_fleet(fleet_cfg)).observe())
    a = _daemon(tmp_path, url, "a", [[A1, A2], [A3]], hang=A3)
    b = None
    try:
        _wait_for(tmp_path, "a", "tick 1 active", a)  # a leads and applied A1 and A2
        b = _daemon(tmp_path, url, "b", [[A1, A3, X, Y]])
        _wait_for(tmp_path, "b", "tick 1 advisory", b)  # b follows
        _wait_for(tmp_path, "a", "HUNG applied", a)  # the backend applied A3; a's audit has not recorded it yet
        a.send_signal(signal.SIGKILL)
        a.wait(timeout=30)
        a_rows = _rows(tmp_path / "a" / "audit.db")
        for f in (tmp_path / "a").iterdir():  # a's node is gone, and its audit file with it
            f.unlink()
        _wait_for(tmp_path, "b", "active", b)  # b took over and ran one active tick
        b.send_signal(signal.SIGTERM)
        b.wait(timeout=60)
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
    log = (tmp_path / "b.log").read_text()
    assert b.returncode == 0, log[-4000:]
    assert a.returncode == -signal.SIGKILL
    assert [r[2] for r in a_rows] == ["applied", "applied", "decided"], a_rows  # A3 was in flight at the kill

    rows = _rows(tmp_path / "b" / "audit.db")
    shown = "\n".join(" | ".join(map(str, r)) for r in rows)
    applied_keys = backend.r.hkeys("fleet:applied")
    # the backend took 4 changes in the hour: the old leader's 3 (A3 once) and 1 new one: nothing repeated
    assert len(applied_keys) == BUDGET, f"the backend applied {len(applied_keys)} changes; b's audit:\n{shown}"
    by_key = {k: (action, status, detail) for k, action, status, detail in rows}
    a3_key = next(k for k, action, *_ in a_rows if json.loads(action) == A3.to_dict())
    # the action in flight: resolved through recovery (the backend knew its key), recorded applied, not sent again
    assert by_key[a3_key][1] == "applied" and "idempotency key" in by_key[a3_key][2], shown
    # the old leader's applied changes are in b's trail, learnt from the cluster state
    for k, *_ in a_rows[:2]:
        assert by_key[k][1] == "applied" and "cluster state" in by_key[k][2], shown
    refused = [(json.loads(action), detail) for _, action, status, detail in rows if status == "refused"]
    # (the takeover tick's; a later tick may add X's own cooldown)
    assert [(a, d.partition(" changed ")[0]) for a, d in refused[:3]] == [
        (A1.to_dict(), "guardrails: cooldown: set_pool_weight on v4-main"),  # not repeated: the stored cooldown
        (A3.to_dict(), "guardrails: cooldown: set_pool_weight on v3.5-fallback"),  # resolved in flight, counted
        (Y.to_dict(), f"guardrails: change budget spent ({BUDGET} changes in the last hour)"),  # budget honoured
    ], shown
    x_rows = [r for r in rows if json.loads(r[1]) == X.to_dict() and r[2] == "applied"]
    assert len(x_rows) == 1, shown  # the one change the budget still allowed
    assert backend.observe().pool("v3.5-fallback").breaker_threshold_seconds == 0.4
    assert backend.observe().pool("v4-standby").weight == 1.0  # Y never went out
    assert "took over" in log and "cluster state" in log, log[-4000:]
    # what a third leader would read: the four changes of the hour, nothing left in flight
    from infercast.actuators.state_store import RedisStateStore

    kept = RedisStateStore(backend.r, LEASE).load()
    assert sorted(kept.applied, key=lambda e: e.at)[-1].action == X and len(kept.applied) == BUDGET
    assert kept.in_flight == () and kept.applied_in_hour(time.time()) == BUDGET


# --- in one process: what the daemon does with state it cannot use, and a deposed writer ----------------------------
def _parts(tmp_path: Path, url: str, name: str, fleet_cfg_doc: dict | None = None):
    from infercast.actuators.daemon_cli import DaemonParts
    from infercast.actuators.webhook import Inbox
    from infercast.clock import WallClock
    from infercast.config import parse_config

    doc = fleet_cfg_doc or yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    doc["actuator"] = {
        "backend": {"kind": "redis", "url": url, "prefix": "fleet"},
        "leader": {"kind": "redis", "url": url, "key": LEASE, "lease_seconds": 30, "identity": f"pod-{name}"},
        "audit_db": str(tmp_path / name / "audit.db"),
        "listen": "127.0.0.1:0",
    }
    cfg = parse_config(doc)
    return DaemonParts(cfg, "active", RedisAdmin.from_url(url, prefix="fleet"), Audit(cfg.actuator.audit_db),
                       Inbox(), None, WallClock(), apply_backoff_seconds=0.01)  # fmt: skip


@pytest.mark.servers
def test_corrupt_state_at_takeover_is_an_error_in_the_log_and_an_advisory_tick_until_it_is_cleared(
    redis_server, fleet_cfg, tmp_path, monkeypatch, caplog
):
    """What the user sees: every tick, an ERROR line saying the daemon is not acting because the guardrail state
    beside the lease cannot be used, naming the Redis key that is wrong and the `redis-cli DEL` that clears it; the
    tick's decisions are advisory (`infercast_actuator_active` 0), nothing reaches the fleet.  Never an empty state
    read in silence.  Once the keys are deleted, the next tick takes over and acts."""
    from infercast.actuators.daemon_cli import build_daemon, keep_state_beside_the_lease
    from infercast.actuators.leader import build_elector
    from tests.actuators.doubles import Scripted

    monkeypatch.setenv("INFERCAST_ACTUATOR_TOKEN", "t0k")
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    backend = RedisAdmin.from_url(url, prefix="fleet")
    backend.seed(TwinAdmin(build_fleet(fleet_cfg)).observe())
    backend.r.hset(f"{LEASE}:state:applied", "set_pool_weight-0", "{half a reco")  # corrupt (a bad restore, an edit)
    parts = _parts(tmp_path, url, "a")
    elector = build_elector(parts.config.actuator.leader, parts.config.actuator.backend)
    state = keep_state_beside_the_lease(parts, elector)
    daemon = build_daemon(parts, Scripted(parts, [(A1, "forecast")]), elector=elector, state=state)
    try:
        for _ in range(2):
            caplog.clear()
            report = daemon.run_once("scheduled")
            assert [a.outcome for a in report.actions] == ["advisory"]
            errors = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
            assert any(
                "not acting (advisory): the guardrail state beside the lease cannot be used" in m
                and "applied entry 'set_pool_weight-0' is not JSON" in m
                and f"redis-cli DEL {LEASE}:state:in_flight {LEASE}:state:applied" in m
                for m in errors
            ), errors
            assert f"{ACTUATOR_ACTIVE} 0.0" in daemon.metrics.exposition().decode()
        assert backend.r.hlen("fleet:applied") == 0  # nothing reached the fleet
        backend.r.delete(f"{LEASE}:state:applied")  # what the error line says to do, once inspected
        report = daemon.run_once("scheduled")
        assert [a.outcome for a in report.actions] == ["applied"]
        assert backend.r.hlen(f"{LEASE}:state:applied") == 1  # and the state is kept again
    finally:
        daemon.stop()


@pytest.mark.servers
def test_a_deposed_leader_does_not_apply_what_the_state_did_not_take(redis_server, fleet_cfg, tmp_path):
    """The leader lost its lease between its leader check and its apply: the state refuses the in-flight record
    (fenced by the lease), so the decision is recorded `interrupted` with the reason and never sent."""
    from infercast.actuators.backends.redis import client
    from infercast.actuators.controller import ControlLoop
    from infercast.actuators.daemon_cli import keep_state_beside_the_lease
    from infercast.actuators.leader import RedisLease
    from infercast.actuators.tick import TickContext
    from tests.actuators.failover_child import FreshInputs, ScriptedPolicy

    url = f"redis://127.0.0.1:{redis_server.port}/0"
    backend = RedisAdmin.from_url(url, prefix="fleet")
    backend.seed(TwinAdmin(build_fleet(fleet_cfg)).observe())
    parts = _parts(tmp_path, url, "a")
    a = RedisLease(client(url), LEASE, "pod-a", 30)
    state = keep_state_beside_the_lease(parts, a)
    lead = a.try_acquire_or_renew(0.0)
    state.take_over(lead, 1000.0)
    a.release()  # deposed (here released; an expiry while paused is the same)
    assert RedisLease(client(url), LEASE, "pod-b", 30).try_acquire_or_renew(0.0).is_leader
    loop = ControlLoop(parts.config, parts.admin, FreshInputs(), policy=ScriptedPolicy([[A1]]), audit=parts.audit)
    report = loop.tick(1001.0, TickContext("scheduled", True, "active", lead))
    ((_, outcome, detail),) = report.outcomes
    assert outcome == "failed" and "not applied" in detail and "held by pod-b, not by pod-a" in detail
    (row,) = parts.audit.recent(0)
    assert row.status == "interrupted" and "the guardrail state beside the lease did not take it" in row.detail
    assert backend.r.hlen("fleet:applied") == 0


def test_on_a_backend_without_idempotency_keys_an_action_in_flight_is_counted_when_the_settings_show_it(
    fleet_cfg, tmp_path
):
    """The twin (like Kubernetes) cannot be asked by key.  After a failover, an in-flight action the fleet's settings
    show in effect is recorded applied (counted in the cooldown and budget, not repeated); one they do not show is
    interrupted, not repeated."""
    from infercast.actuators.failover import FailoverState
    from infercast.actuators.leader import Leadership
    from infercast.actuators.state_store import Entry, FileStateStore

    twin = TwinAdmin(build_fleet(fleet_cfg))
    twin.apply(A1)  # the old leader's last action reached the fleet; its answer never reached its trail
    store = FileStateStore(tmp_path / "state.json")
    old = Leadership(True, 1, "pod-a", "")
    store.begin(old, Entry("k-a1", A1, 1000.0, 1, "pod-a", 3))
    store.begin(old, Entry("k-x", X, 1000.0, 1, "pod-a", 4))
    audit = Audit(tmp_path / "b.db")
    state = FailoverState(store, audit, twin, 900.0)
    line = state.take_over(Leadership(True, 2, "pod-b", ""), 1010.0)
    assert (
        audit.by_key("k-a1").status == "applied" and "settings show the action in effect" in audit.by_key("k-a1").detail
    )
    assert audit.by_key("k-x").status == "interrupted" and "not repeated" in audit.by_key("k-x").detail
    assert [e.key for e in store.load().applied] == ["k-a1"] and store.load().in_flight == ()
    assert "1 in flight" not in line and "2 in flight" in line and ": applied" in line and ": interrupted" in line
