"""The audit trail (SQLite, WAL): decisions, answers and verdicts as the loop records them, the windows cooldowns and
budgets read, `infercast actuator log`, and `kill -9` of a real process mid-action followed by a restart that
resolves the decision from the backend without applying it again."""

from __future__ import annotations

import json
import math
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from infercast.actuators.actions import ScalePool, SetAdmission, SetPoolWeight
from infercast.actuators.admin import Result
from infercast.actuators.audit import Audit, AuditError
from infercast.actuators.backends.router_http import HttpAdmin
from infercast.actuators.log_cli import parse_since
from infercast.actuators.recovery import resolve_in_flight
from infercast.actuators.stamp import decision_key
from infercast.config import ConfigError
from infercast.simulator.twin.admin import TwinAdmin
from tests.conftest import REPO

W = SetPoolWeight("v4-main", 0.5)


def test_a_decision_goes_from_decided_to_answered_to_judged(tmp_path):
    audit = Audit(tmp_path / "a.db")
    inputs = {"reason": "forecast 0.91 > 0.75", "forecast": {"yhat_upper": 0.91}, "kv": math.nan}
    i = audit.record_decision(100.0, "k1", W, inputs, fencing_token=4)
    d = audit.get(i)
    assert d.status == "decided" and d.action == W and d.fencing_token == 4
    assert d.inputs == {"reason": "forecast 0.91 > 0.75", "forecast": {"yhat_upper": 0.91}, "kv": "NaN"}
    assert [x.id for x in audit.in_flight()] == [i]
    audit.mark_applied(i, Result("applied", "", SetPoolWeight("v4-main", 1.0), attempts=2), 100.4)
    d = audit.get(i)
    assert (d.status, d.answered_at, d.previous, d.attempts) == ("applied", 100.4, SetPoolWeight("v4-main", 1.0), 2)
    assert audit.in_flight() == [] and [x.id for x in audit.awaiting_verdict()] == [i]
    audit.mark_verdict(i, "rolled_back", "pool got worse: kv 0.82 -> 0.88", 400.0)
    d = audit.get(i)
    assert (d.verdict, d.verdict_reason, d.verdict_at) == ("rolled_back", "pool got worse: kv 0.82 -> 0.88", 400.0)
    assert audit.awaiting_verdict() == []


def test_a_key_is_recorded_once(tmp_path):
    audit = Audit(tmp_path / "a.db")
    key = decision_key(100.0, W)
    assert key == decision_key(100.0, W) != decision_key(115.0, W)
    first = audit.record_decision(100.0, key, W, {"reason": "x"})
    assert audit.record_decision(100.0, key, W, {"reason": "again"}) == first
    assert len(audit.recent(0)) == 1 and audit.by_key(key).inputs == {"reason": "x"}


def test_what_cannot_be_recorded_is_an_error_that_says_why(tmp_path):
    audit = Audit(tmp_path / "a.db")
    i = audit.record_decision(1.0, "k", W, {})
    with pytest.raises(AuditError, match="decision 1 is decided: a verdict needs it applied and without a verdict"):
        audit.mark_verdict(i, "verified", "", 2.0)
    audit.mark_applied(i, Result("failed", "gave up after 3 attempts"), 2.0)
    with pytest.raises(AuditError, match="decision 1 is failed: an answer needs it decided"):
        audit.mark_applied(i, Result("applied"), 3.0)
    with pytest.raises(AuditError, match="no decision 99"):
        audit.mark_interrupted(99, "x", 3.0)
    with pytest.raises(AuditError, match="verdict must be one of"):
        audit.mark_verdict(i, "great", "", 3.0)  # type: ignore[arg-type]
    assert audit.get(i).status == "failed"  # unchanged by the refused writes
    adv = audit.record_decision(5.0, "adv", W, {}, advisory=True)
    assert audit.get(adv).status == "advisory" and audit.in_flight() == []


def test_windows_for_cooldowns_and_budgets_count_what_was_applied_by_when(tmp_path):
    audit = Audit(tmp_path / "a.db")
    for n, (t, action, status) in enumerate(
        [
            (10.0, W, "applied"),
            (20.0, ScalePool("v4-main", 14), "applied"),
            (30.0, W, "refused"),
            (40.0, SetPoolWeight("v3.5-fallback", 0.2), "applied"),
            (50.0, SetAdmission(memory_limit=0.8), "applied"),
            (60.0, W, "applied"),
        ]
    ):
        i = audit.record_decision(t, f"k{n}", action, {})
        audit.mark_applied(i, Result(status), t + 1)  # type: ignore[arg-type]
    got = audit.applied_in_window("v4-main", 11.0, 61.0)
    assert [d.answered_at for d in got] == [11.0, 21.0, 61.0]
    assert [d.answered_at for d in audit.applied_in_window("v4-main", 12.0, 60.0)] == [21.0]
    assert [d.action for d in audit.applied_in_window("fleet", 0, 100)] == [SetAdmission(memory_limit=0.8)]
    assert [d.decided_at for d in audit.recent(35.0)] == [40.0, 50.0, 60.0]
    assert [d.decided_at for d in audit.recent(0.0, limit=2)] == [50.0, 60.0]


def test_the_database_is_wal_and_readable_while_written(tmp_path):
    path = tmp_path / "a.db"
    audit = Audit(path)
    audit.record_decision(1.0, "k", W, {})
    raw = sqlite3.connect(path)
    assert raw.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert raw.execute("SELECT count(*) FROM decisions").fetchone()[0] == 1
    raw.close()


def test_a_file_that_is_not_an_audit_trail_is_refused_clearly(tmp_path):
    bad = tmp_path / "a.db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(AuditError, match=r"a\.db: cannot open the audit trail: file is not a database"):
        Audit(bad)
    assert bad.read_bytes() == b"this is not sqlite" * 100


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "actuator", "log", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        check=False,
    )


def test_actuator_log_prints_the_trail_as_a_table_and_as_json(tmp_path):
    now = time.time()
    audit = Audit(tmp_path / "a.db")
    i = audit.record_decision(now - 120, "k1", W, {"reason": "forecast 0.91 > 0.75 in 300s"})
    audit.mark_applied(i, Result("applied", "", SetPoolWeight("v4-main", 1.0)), now - 119)
    audit.mark_verdict(i, "verified", "kv 0.82 -> 0.71", now - 60)
    audit.record_decision(now - 30, "k2", ScalePool("v4-main", 14), {"reason": "live kv 0.86"}, advisory=True)
    audit.record_decision(now - 90000, "old", W, {})
    r = _cli("--db", str(tmp_path / "a.db"))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0].split() == ["id", "decided", "(UTC)", "action", "status", "tries", "detail", "verdict", "why"]
    assert "set_pool_weight pool=v4-main weight=0.5  applied" in lines[2] and "kv 0.82 -> 0.71" in lines[2]
    assert "scale_pool pool=v4-main replicas=14" in lines[3] and "advisory" in lines[3] and "live kv 0.86" in lines[3]
    assert len(lines) == 4  # the decision of yesterday is outside the default 24h
    r = _cli("--db", str(tmp_path / "a.db"), "--since", "2d", "--json")
    rows = json.loads(r.stdout)
    assert [d["key"] for d in rows] == ["old", "k1", "k2"]
    assert rows[1]["previous"] == {"kind": "set_pool_weight", "pool": "v4-main", "weight": 1.0}


def test_actuator_log_says_what_is_wrong_with_its_arguments(tmp_path):
    r = _cli("--db", str(tmp_path / "missing.db"))
    assert r.returncode == 2 and "missing.db: no audit trail there" in r.stderr
    Audit(tmp_path / "a.db").close()
    r = _cli("--db", str(tmp_path / "a.db"), "--since", "yesterday")
    assert r.returncode == 2 and "--since: expected 90m, 24h, 7d" in r.stderr
    r = _cli()
    assert r.returncode == 2 and "give --config FILE or --db PATH" in r.stderr
    r = _cli("--db", str(tmp_path / "a.db"))
    assert r.returncode == 0 and r.stdout == "no decisions in that window\n"


def test_since_reads_durations_as_prometheus_does():
    """`--since` takes the duration grammar of the rules and Prometheus' own flags (infercast.durations), ISO times
    and Unix seconds; a fraction such as 1.5h is not a Prometheus duration and is refused, not misread."""
    now = 1_800_000_000.0
    assert parse_since("1h30m", now) == now - 5400
    assert parse_since("7d", now) == now - 7 * 86400
    assert parse_since("500ms", now) == now - 0.5
    assert parse_since("1700000000", now) == 1_700_000_000.0
    assert parse_since("2023-11-14T22:13:20", now) == 1_700_000_000.0
    with pytest.raises(ConfigError, match=r"--since: expected 90m, 24h, 7d.*got '1.5h'"):
        parse_since("1.5h", now)


def _child(db, url: str, key: str, stop: str, expect: str) -> subprocess.Popen:
    p = subprocess.Popen(
        [sys.executable, "-m", "tests.actuators.crash_child", str(db), url, key, stop],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    seen = []
    while time.monotonic() < deadline:
        line = p.stdout.readline()
        seen.append(line)
        if line.startswith(expect):
            return p
        if not line and p.poll() is not None:
            break
    p.kill()
    raise AssertionError(f"the child never printed {expect}: {seen} {p.stderr.read()}")


@pytest.mark.slow
def test_kill_9_after_the_backend_applied_and_a_restart_that_does_not_apply_again(tmp_path, twin):
    """The daemon is killed (SIGKILL) after the router applied the action and before the audit trail recorded the
    answer.  The restart finds the decision in flight, asks the router by its idempotency key, records `applied`
    with the router's undo action, and sends nothing: the twin saw one action."""
    db = tmp_path / "audit.db"
    child = _child(db, twin.url, "crash-1", "applied", "APPLIED")
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    assert child.returncode == -signal.SIGKILL
    assert [a for _, a in twin.fleet.actions] == [SetPoolWeight("v4-main", 0.25)]

    audit = Audit(db)  # the restart
    (d,) = audit.in_flight()
    assert d.key == "crash-1" and d.inputs["reason"] == "forecast 0.91 > 0.75"
    (r,) = resolve_in_flight(audit, HttpAdmin(twin.url, "s3cret"), time.time())
    assert r.outcome == "applied"
    d = audit.get(d.id)
    assert d.status == "applied" and d.previous == SetPoolWeight("v4-main", 1.0)
    # the loop, deciding the same decision again, finds it recorded and applied: nothing is sent
    assert audit.record_decision(d.decided_at, "crash-1", d.action, {}) == d.id
    assert audit.in_flight() == []
    assert [a for _, a in twin.fleet.actions] == [SetPoolWeight("v4-main", 0.25)]


@pytest.mark.slow
def test_kill_9_before_the_apply_is_interrupted_and_never_sent(tmp_path, twin):
    db = tmp_path / "audit.db"
    child = _child(db, twin.url, "crash-2", "decided", "DECIDED")
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=10)
    audit = Audit(db)
    (r,) = resolve_in_flight(audit, HttpAdmin(twin.url, "s3cret"), time.time())
    assert r.outcome == "interrupted" and "not repeated" in r.detail
    assert audit.by_key("crash-2").status == "interrupted"
    assert twin.fleet.actions == []


def test_a_backend_that_cannot_tell_leaves_interrupted_and_one_that_cannot_be_asked_leaves_it_in_flight(
    tmp_path, fleet_cfg
):
    from infercast.servers import free_port
    from infercast.simulator.twin.fleet import build_fleet

    audit = Audit(tmp_path / "a.db")
    i = audit.record_decision(1.0, "k", W, {})
    (r,) = resolve_in_flight(audit, HttpAdmin(f"http://127.0.0.1:{free_port()}"), 2.0)
    assert r.outcome == "unresolved" and "cannot ask the http backend" in r.detail
    assert audit.get(i).status == "decided"  # still in flight, for the next start
    (r,) = resolve_in_flight(audit, TwinAdmin(build_fleet(fleet_cfg)), 3.0)
    assert r.outcome == "interrupted" and "the twin backend cannot tell" in audit.get(i).detail
