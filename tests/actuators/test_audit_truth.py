"""Issue 24 item 4: an audit trail that tells the truth.

- An action the router applied whose answer was lost is read back (by its idempotency key) and audited `applied`,
  not `failed`; one the target cannot confirm is `unknown`, and is settled on the daemon's next ticks and at a
  restart.
- Deleting, replacing or corrupting the audit database under a running daemon stops it acting (advisory) with
  `infercast_actuator_audit_failed 1`, and every row it could not write is logged whole and counted, not lost.
- The guardrails' refusals and their reasons appear in `infercast actuator log`.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time

import pytest
import requests

from infercast.actuators.actions import SetPoolWeight
from infercast.actuators.admin import BackendError
from infercast.actuators.audit import Audit
from infercast.actuators.backends.router_http import HttpAdmin
from infercast.actuators.controller import ControlLoop
from infercast.actuators.daemon import Daemon
from infercast.actuators.leader import SingleReplica
from infercast.actuators.policy import Decision, Outlook
from infercast.actuators.recovery import reconcile_unknown, resolve_in_flight
from infercast.actuators.tick import TickReport
from infercast.simulator.twin.admin import TwinAdmin
from tests.actuators.doubles import Scripted
from tests.actuators.faulty import FaultyServer, Step
from tests.actuators.shared_fleet import protected_flash_sale
from tests.actuators.test_controller import ScriptedInputs
from tests.actuators.test_daemon import parts_for
from tests.conftest import REPO

W = SetPoolWeight("v4-main", 0.25)


@pytest.fixture()
def setup(repo_root, shared_results):
    """The protected flash-sale fleet in process, calm inputs (as tests/actuators/test_controller.py's)."""
    cfg, fleet = protected_flash_sale(shared_results, repo_root / "examples" / "flash-sale.yaml")  # once per run
    inputs = ScriptedInputs()
    calm = {p: Outlook(p, 0.3, 0.3) for p in ("v4-short", "v4-long")}
    inputs.outlook = dict(calm)
    return cfg, fleet, TwinAdmin(fleet), inputs, calm


class One:
    """TEST DOUBLE of the policy: decides the given decisions once."""

    def __init__(self, *ds: Decision) -> None:
        self.ds = list(ds)

    def decide(self, now, fleet_state, outlook):
        out, self.ds = self.ds, []
        return out

    def note_applied(self, d, prev):
        pass

    def note_rolled_back(self, d, *_):
        pass


# A lost answer costs the client one timeout, so it is short; but the first, answered, request must not time out
# too: at 0.25 s it did, with two copies of the suite sharing the 2 cores (issue 25), and the tick decided nothing.
CLIENT_TIMEOUT_S = 1.5


def _forward(twin):
    def forward(method, path, headers, body):
        keep = ("authorization", "idempotency-key", "content-type", "x-fencing-token")
        h = {k: v for k, v in headers.items() if k in keep}
        r = requests.request(method, twin.url + path, headers=h, data=body, timeout=5)
        return r.status_code, r.content

    return forward


LOST = Step(forward=True, lose_answer=True, delay=0.5)  # the router applies (or replays), the answer never comes


def _loop(fleet_cfg, admin, audit) -> ControlLoop:
    inputs = ScriptedInputs()
    inputs.outlook = {p: Outlook(p, 0.3, 0.3) for p in fleet_cfg.pools}
    loop = ControlLoop(fleet_cfg, admin, inputs, audit=audit)
    loop.policy = One(Decision(W, "test: shift away from v4-main", {}, "shift"))
    return loop


def test_an_action_the_router_applied_whose_answer_was_lost_is_audited_applied_not_failed(twin, fleet_cfg, tmp_path):
    """Every POST reaches the router and is applied (then replayed under its key), and every answer is lost.
    Before: the audit said `failed` ("gave up after 3 attempts") while the fleet had changed.  Now the loop asks the
    router by the decision's idempotency key and records `applied`, with the router's undo action."""
    srv = FaultyServer([Step(forward=True), LOST, LOST, LOST, Step(forward=True)], handler=_forward(twin))
    audit = Audit(tmp_path / "a.db")
    try:
        loop = _loop(fleet_cfg, HttpAdmin(srv.url, "s3cret", timeout_seconds=CLIENT_TIMEOUT_S), audit)
        report = loop.tick(time.time())
    finally:
        srv.close()
    ((_, outcome, detail),) = report.outcomes
    assert outcome == "applied" and "read back: applied" in detail and "idempotency key" in detail
    (row,) = audit.recent(0)
    assert row.status == "applied" and row.previous == SetPoolWeight("v4-main", 1.0) and row.attempts == 3
    assert [a for _, a in twin.fleet.actions] == [W]  # applied once, never re-sent by the read-back
    assert [s.method for s in srv.seen] == ["GET", "POST", "POST", "POST", "GET"]
    assert srv.seen[-1].path == f"/v1/actions/{row.key}"
    assert loop.pending and loop.pending[0].audit_id == row.id  # verified later like any applied action


def test_a_lost_answer_the_router_cannot_confirm_is_unknown_then_settled_by_the_next_tick_and_at_restart(
    twin, fleet_cfg, tmp_path
):
    """The answers are lost and the router cannot be asked afterwards either (503): the audit says `unknown`
    (`infercast_actuator_audit_unknown 1`), not `failed`.  The daemon's next tick, with the router still down, leaves
    it unknown; a restart, the router back, reads it back by its key and records `applied`."""
    srv = FaultyServer([Step(forward=True), LOST, LOST, LOST, Step(503, b'{"error": "restarting"}')], _forward(twin))
    db = tmp_path / "a.db"
    audit = Audit(db)
    try:
        admin = HttpAdmin(srv.url, "s3cret", timeout_seconds=CLIENT_TIMEOUT_S)
        report = _loop(fleet_cfg, admin, audit).tick(time.time())
        ((_, outcome, detail),) = report.outcomes
        assert outcome == "unknown" and "read back: unknown" in detail and "HTTP 503" in detail
        (row,) = audit.recent(0)
        assert row.status == "unknown" and audit.in_flight() == []

        d = Daemon(
            lambda now, ctx: TickReport(), SingleReplica(), mode="active", audit=audit,
            reconcile=lambda now: reconcile_unknown(audit, admin, now),
        )  # fmt: skip
        d.run_once("scheduled")
        assert audit.get(row.id).status == "unknown"  # the router still cannot say: not guessed
        assert d.metrics.exposition().decode().count("infercast_actuator_audit_unknown 1.0") == 1
        audit.close()

        srv.script[:] = [Step(forward=True)]  # the router answers again
        audit = Audit(db)  # the restart
        (r,) = resolve_in_flight(audit, admin, time.time())
        assert r.outcome == "applied"
        row = audit.get(row.id)
        assert row.status == "applied" and "reconciled after a lost answer" in row.detail
        assert row.previous == SetPoolWeight("v4-main", 1.0)
        assert [a for _, a in twin.fleet.actions] == [W]
    finally:
        srv.close()


def test_the_daemon_settles_unknown_rows_on_its_next_tick(twin, fleet_cfg, tmp_path):
    """An `unknown` row whose action the router did apply is settled on the daemon's next tick (no restart)."""
    audit = Audit(tmp_path / "a.db")
    admin = HttpAdmin(twin.url, "s3cret")
    i = audit.record_decision(time.time(), "k-lost", W, {"reason": "test"})
    from infercast.actuators.stamp import Stamp

    assert admin.apply(W, stamp=Stamp(key="k-lost")).status == "applied"
    from infercast.actuators.admin import Result

    audit.mark_unknown(i, Result("failed", "lost", attempts=3), "no answer; read back: unknown", time.time())
    d = Daemon(
        lambda now, ctx: TickReport(), SingleReplica(), mode="active", audit=audit,
        reconcile=lambda now: reconcile_unknown(audit, admin, now),
    )  # fmt: skip
    d.run_once("scheduled")
    assert audit.get(i).status == "applied" and audit.get(i).attempts == 3
    assert "infercast_actuator_audit_unknown 0.0" in d.metrics.exposition().decode()


def test_a_lost_answer_on_a_backend_without_keys_is_read_back_from_the_fleets_settings(setup, tmp_path):
    """The in-process twin has no idempotency keys: the read-back compares the fleet's settings.  Applied then the
    answer lost: `applied`; never applied: `failed` with "read back: not applied"."""
    cfg, fleet, _, inputs, _ = setup

    class LosesAnswers(TwinAdmin):
        def apply(self, action):
            super().apply(action)
            raise BackendError("read timed out")

    class NeverApplies(TwinAdmin):
        def apply(self, action):
            raise BackendError("connection refused")

    audit = Audit(tmp_path / "a.db")
    d = Decision(SetPoolWeight("v4-long", 0.5), "test shift", {}, "shift")
    loop = ControlLoop(cfg, LosesAnswers(fleet), inputs, audit=audit)
    loop.policy = One(d)
    ((_, outcome, detail),) = loop.tick(fleet.now).outcomes
    assert outcome == "applied" and "settings show it in effect" in detail
    assert audit.recent(0)[-1].status == "applied"

    loop = ControlLoop(cfg, NeverApplies(fleet), inputs, audit=audit)
    loop.policy = One(Decision(SetPoolWeight("v4-long", 0.75), "test shift", {}, "shift"))
    # past the cooldown: the new loop counts the first loop's applied row from the trail
    ((_, outcome, detail),) = loop.tick(fleet.now + cfg.guardrails.cooldown_seconds + 1).outcomes
    assert outcome == "failed" and "read back: not applied" in detail
    assert audit.recent(0)[-1].status == "failed"


def _break(db, how: str) -> None:
    if how == "deleted":
        for suffix in ("", "-wal", "-shm"):
            if os.path.exists(f"{db}{suffix}"):
                os.unlink(f"{db}{suffix}")
    elif how == "corrupted":
        with open(db, "r+b") as f:
            f.write(b"\0garbage" * 512)
    else:  # replaced by another, empty database
        os.unlink(db)
        Audit(db).close()


@pytest.mark.parametrize("how", ["deleted", "corrupted", "replaced"])
def test_an_audit_database_broken_under_a_running_daemon_stops_it_acting_and_pages(
    twin, fleet_cfg, tmp_path, caplog, how
):
    """Before: SQLite went on writing into the deleted file, and every later row vanished with it while the daemon
    acted.  Now the next tick is advisory, `infercast_actuator_audit_failed` is 1 (`active` 0), a log line says why
    every tick, the router sees no further action, and the row the tick could not write is logged whole and counted
    (`infercast_actuator_audit_unrecorded_total`)."""
    parts = parts_for(twin, fleet_cfg, tmp_path)
    db = tmp_path / "a.db"
    tick = Scripted(parts, [(SetPoolWeight("v4-main", 0.5), "forecast"), (SetPoolWeight("v4-main", 0.6), "forecast")])
    d = Daemon(tick, SingleReplica(), mode="active", audit=parts.audit)
    report = d.run_once("scheduled")
    assert report.actions[0].outcome == "applied" and len(twin.fleet.actions) == 1
    _break(db, how)
    with caplog.at_level(logging.ERROR):
        d.run_once("scheduled")
        d.run_once("scheduled")
    m = scrape_metrics(d)
    assert m["infercast_actuator_audit_failed"] == 1.0 and m["infercast_actuator_active"] == 0.0
    assert m["infercast_actuator_audit_unrecorded_total"] == 2.0
    assert len(twin.fleet.actions) == 1  # nothing acted on past a broken trail
    said = [r.getMessage() for r in caplog.records]
    assert sum("not acting (advisory): the audit trail is unusable" in s for s in said) == 2
    lost = [s for s in said if "NOT RECORDED" in s]
    assert len(lost) == 2 and '"weight": 0.6' in lost[0] and "scripted #2" in lost[0]


def scrape_metrics(d: Daemon) -> dict[str, float]:
    out = {}
    for line in d.metrics.exposition().decode().splitlines():
        if line.startswith("infercast_"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_the_control_loop_never_applies_what_a_broken_audit_cannot_record(setup, tmp_path):
    """Without the daemon's check too (the file deleted between two writes): the decision is not sent."""
    cfg, fleet, admin, inputs, _ = setup
    db = tmp_path / "a.db"
    audit = Audit(db)
    loop = ControlLoop(cfg, admin, inputs, audit=audit)
    loop.policy = One(Decision(SetPoolWeight("v4-long", 0.5), "test shift", {}, "shift"))
    os.unlink(db)
    ((_, outcome, detail),) = loop.tick(fleet.now).outcomes
    assert outcome == "failed" and "not applied: not in the audit trail" in detail and "was deleted" in detail
    assert not fleet.actions and audit.unrecorded == 1


def test_guardrail_refusals_and_their_reasons_appear_in_actuator_log(setup, tmp_path):
    """The loop scales v4-long up, then the same warning 15 s later is refused on the cooldown.  Before, the refusal
    was only a log line; now `infercast actuator log` shows it `refused`, 0 tries, "guardrails: cooldown ...", once
    (the next tick's identical refusal is not written again)."""
    cfg, _fleet, admin, inputs, _ = setup
    db = tmp_path / "a.db"
    audit = Audit(db)
    inputs.outlook["v4-long"] = Outlook("v4-long", 0.6, 0.95, 30.0)
    loop = ControlLoop(cfg, admin, inputs, audit=audit)
    now = time.time()
    loop.tick(now)
    second = loop.tick(now + 15)
    refused = [d for d, o, _ in second.outcomes if o == "refused"]
    assert refused
    loop.tick(now + 30)
    rows = [r for r in audit.recent(0) if r.status == "refused"]
    assert len(rows) == len(refused)
    assert all(r.detail.startswith("guardrails: cooldown") and r.attempts == 0 for r in rows)
    audit.close()
    out = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "actuator", "log", "--db", str(db)],
        capture_output=True, text=True, timeout=60, cwd=REPO, check=True,
    ).stdout  # fmt: skip
    lines = [ln for ln in out.splitlines() if " refused " in ln]
    assert len(lines) == len(refused) and all("guardrails: cooldown:" in ln for ln in lines)


def _unwritable(db, how: str):
    """Make the audit trail refuse writes while it still reads: its file and WAL immutable (`chattr +i`: needs root
    and a filesystem that has it; skipped otherwise), or another connection holding its write lock."""
    import shutil
    import sqlite3
    import subprocess

    if how == "locked":
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN EXCLUSIVE")
        return lambda: (other.execute("ROLLBACK"), other.close())
    files = [f"{db}{s}" for s in ("", "-wal") if os.path.exists(f"{db}{s}")]  # (an immutable -shm: SIGBUS)
    if os.geteuid() != 0 or shutil.which("chattr") is None:
        pytest.skip("an immutable file needs root and chattr")
    if subprocess.run(["chattr", "+i", *files], capture_output=True, check=False).returncode != 0:
        pytest.skip("chattr +i is not supported on this filesystem")
    return lambda: subprocess.run(["chattr", "-i", *files], check=False)


@pytest.mark.parametrize("how", ["immutable", "locked"])
def test_an_audit_trail_that_refuses_writes_is_broken_and_pages_at_once(twin, fleet_cfg, tmp_path, caplog, how):
    """Issue 36 item 4.  Before, what the user saw: with the audit file and its WAL made immutable, every decision
    failed "disk I/O error" and nothing was applied, but for 25 s `/metrics` said `audit_failed` 0 and `active` 1,
    and only WARNING lines were logged: the documented page never fired.  Now the first write that fails latches
    the trail broken: after that tick `audit_failed` is 1 and `active` 0, ERROR lines say why (the row is logged
    whole), and the next tick runs advisory."""
    parts = parts_for(twin, fleet_cfg, tmp_path)
    db = tmp_path / "a.db"
    parts.audit.close()
    parts.audit = Audit(db, busy_timeout_seconds=0.2)  # a held lock answers "database is locked" at once
    tick = Scripted(parts, [(SetPoolWeight("v4-main", 0.5), "forecast"), (SetPoolWeight("v4-main", 0.6), "forecast"),
                            (SetPoolWeight("v4-main", 0.7), "forecast")])  # fmt: skip
    d = Daemon(tick, SingleReplica(), mode="active", audit=parts.audit)
    assert d.run_once("scheduled").actions[0].outcome == "applied"
    undo = _unwritable(db, how)
    try:
        with caplog.at_level(logging.WARNING):
            d.run_once("scheduled")
            m = scrape_metrics(d)
            assert m["infercast_actuator_audit_failed"] == 1.0 and m["infercast_actuator_active"] == 0.0
            d.run_once("scheduled")  # the test double's tick raises the AuditError the real loop records
    finally:
        undo()
    assert scrape_metrics(d)["infercast_actuator_active"] == 0.0
    assert len(twin.fleet.actions) == 1  # nothing acted on past a trail that cannot be written
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any("cannot be written" in s for s in errors), errors
    assert any("NOT RECORDED" in s and '"weight": 0.6' in s for s in errors)
    assert any("not acting (advisory): the audit trail is unusable" in s for s in errors)


def test_a_control_loop_whose_runs_all_fail_is_not_acting_and_says_so(caplog):
    """Issue 36 item 4, the scheduler.  Before, what the user saw: with `misfire_grace_seconds: 1e300` every
    scheduled run failed inside APScheduler (`ticks_total` stayed empty) while `/metrics` said `active` 1; a tick
    that raised every time looked the same apart from `ticks_total{outcome="error"}`.  Now, after three failed runs
    in a row, `active` is 0, `frozen` is 1 (reason `other`) and each failed run logs at ERROR that the daemon is not
    acting; a run that goes through clears it.  (`1e300` itself is now refused at load: tests/test_config_limits.py.)"""
    from infercast.actuators.daemon import RUNS_FAILING

    runs = {"n": 0, "fail": True}

    def tick(now, ctx):
        runs["n"] += 1
        runs["active"] = ctx.active
        if runs["fail"]:
            raise RuntimeError("the loop broke")
        return TickReport()

    d = Daemon(tick, SingleReplica(), mode="active")
    with caplog.at_level(logging.ERROR):
        for _ in range(RUNS_FAILING):
            d.run_once("scheduled")
    m = scrape_metrics(d)
    assert m["infercast_actuator_active"] == 0.0 and m["infercast_actuator_frozen"] == 1.0
    assert m['infercast_actuator_freezes_total{reason="other"}'] == 1.0
    assert any("not acting: the last 3 runs of the control loop failed" in r.getMessage() for r in caplog.records)
    runs["fail"] = False
    d.run_once("scheduled")
    assert runs["active"] is False  # the run after the failures is advisory; the one after that acts again
    d.run_once("scheduled")
    m = scrape_metrics(d)
    assert runs["active"] is True and m["infercast_actuator_active"] == 1.0 and m["infercast_actuator_frozen"] == 0.0
