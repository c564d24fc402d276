"""Issue 24 item 4, the rest: rollbacks in the audit trail, and applications the loop learns of later counted by
its guardrails.

- A rollback (the undo of an action judged `no_effect` or worse) is a row of its own in the audit trail, naming the
  decision it undoes (`undoes`), with its status and reason; `infercast actuator log` shows it.  Before, the undo
  went to the backend and the log, and no row was written (and a `worse` verdict was refused by the trail).
- A row settled `applied` on a later tick (its answer was lost, the target could not be read back at once) holds
  the running loop's cooldown and spends its change budget, as if the answer had come back; so does what was
  applied before a restart.  Before, the loop counted only what it saw applied itself, in memory.
"""

from __future__ import annotations

import argparse
import sqlite3

import pytest

from infercast.actuators import log_cli
from infercast.actuators.actions import SetPoolWeight
from infercast.actuators.admin import BackendError
from infercast.actuators.audit import Audit
from infercast.actuators.controller import ControlLoop
from infercast.actuators.policy import Decision, Outlook
from infercast.actuators.recovery import reconcile_unknown
from infercast.simulator.twin.admin import TwinAdmin
from tests.actuators.shared_fleet import protected_flash_sale
from tests.actuators.test_controller import ScriptedInputs


@pytest.fixture()
def setup(repo_root, shared_results):
    """The protected flash-sale fleet in process, calm inputs (as tests/actuators/test_controller.py's)."""
    cfg, fleet = protected_flash_sale(shared_results, repo_root / "examples" / "flash-sale.yaml")  # once per run
    inputs = ScriptedInputs()
    inputs.outlook = {p: Outlook(p, 0.3, 0.3) for p in ("v4-short", "v4-long")}
    return cfg, fleet, inputs


class Given:
    """TEST DOUBLE of the policy: decides what the test queues, once each."""

    def __init__(self, *ds: Decision) -> None:
        self.ds = list(ds)
        self.rolled: list[Decision] = []

    def decide(self, now, fleet_state, outlook):
        out, self.ds = self.ds, []
        return out

    def note_applied(self, d, prev):
        pass

    def note_rolled_back(self, d, *_):
        self.rolled.append(d)


SHIFT = Decision(SetPoolWeight("v4-long", 0.5), "test shift", {}, "shift")


def _log(db, capsys) -> list[str]:
    args = argparse.Namespace(db=str(db), config=None, since="100000d", limit=None, json=False)
    assert log_cli.run(args) == 0
    return capsys.readouterr().out.splitlines()


def test_a_rollback_is_an_audit_row_naming_the_decision_it_undoes_and_actuator_log_shows_it(setup, tmp_path, capsys):
    """A shift after which its pool got worse is undone: the trail holds the shift (`applied`, verdict
    `rolled_back`, "worse: ...") and the undo (`applied`, `undoes` = the shift's id, reason "roll back (worse)")."""
    cfg, fleet, inputs = setup
    db = tmp_path / "a.db"
    audit = Audit(db)
    loop = ControlLoop(cfg, TwinAdmin(fleet), inputs, audit=audit)
    loop.policy = Given(SHIFT)
    t0 = fleet.now
    assert [o for _, o, _ in loop.tick(t0).outcomes] == ["applied"]
    inputs.outlook["v4-long"] = Outlook("v4-long", 0.9, 0.95)
    report = loop.tick(t0 + cfg.guardrails.verify_window_seconds)
    assert [o for _, o, _ in report.outcomes] == ["rolled_back"] and fleet.router.weights["v4-long"] == 1.0

    shift, undo = audit.recent(0)
    assert shift.status == "applied" and shift.verdict == "rolled_back" and shift.verdict_reason.startswith("worse:")
    assert undo.undoes == shift.id and undo.status == "applied" and undo.action == SetPoolWeight("v4-long", 1.0)
    assert undo.inputs["reason"].startswith("roll back (worse): v4-long: KV")
    assert audit.awaiting_verdict() == []  # a rollback is not itself judged
    audit.close()
    (line,) = [ln for ln in _log(db, capsys) if f"undo #{shift.id}:" in ln]
    assert " applied " in line and "roll back (worse)" in line


def test_a_rollback_the_guardrails_refuse_is_audited_refused_with_their_reason(setup, tmp_path, capsys):
    """The change budget is spent when the undo is due: a `refused` row (0 tries, "guardrails: change budget ...")
    that names the decision it would have undone; the fleet keeps the shift."""
    cfg, fleet, inputs = setup
    db = tmp_path / "a.db"
    audit = Audit(db)
    loop = ControlLoop(cfg, TwinAdmin(fleet), inputs, audit=audit)
    loop.policy = Given(SHIFT)
    t0 = fleet.now
    loop.tick(t0)
    t1 = t0 + cfg.guardrails.verify_window_seconds
    loop.guard.applied_at.extend([t1 - 1.0] * cfg.guardrails.change_budget_per_hour)
    inputs.outlook["v4-long"] = Outlook("v4-long", 0.9, 0.95)
    assert [o for _, o, _ in loop.tick(t1).outcomes] == ["refused"]
    assert fleet.router.weights["v4-long"] == 0.5
    shift, undo = audit.recent(0)
    assert (undo.undoes, undo.status, undo.attempts) == (shift.id, "refused", 0)
    assert undo.detail.startswith("guardrails: change budget spent")
    audit.close()
    (line,) = [ln for ln in _log(db, capsys) if f"undo #{shift.id}:" in ln]
    assert " refused " in line and "guardrails: change budget spent" in line


def test_an_advisory_rollback_is_audited_advisory(setup, tmp_path):
    """The daemon lost the leadership between the shift and its verification: the undo is only advised, and the
    trail says so (`advisory`, naming the shift)."""
    cfg, fleet, inputs = setup
    audit = Audit(tmp_path / "a.db")
    loop = ControlLoop(cfg, TwinAdmin(fleet), inputs, audit=audit)
    loop.policy = Given(SHIFT)
    t0 = fleet.now
    loop.tick(t0)
    loop.mode = "advisory"
    inputs.outlook["v4-long"] = Outlook("v4-long", 0.9, 0.95)
    assert [o for _, o, _ in loop.tick(t0 + cfg.guardrails.verify_window_seconds).outcomes] == ["advisory"]
    shift, undo = audit.recent(0)
    assert (undo.undoes, undo.status) == (shift.id, "advisory") and fleet.router.weights["v4-long"] == 0.5


def test_a_schema_1_trail_is_upgraded_in_place_and_keeps_its_rows(tmp_path):
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.executescript(
        """CREATE TABLE decisions (id INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT NOT NULL UNIQUE,
        decided_at REAL NOT NULL, kind TEXT NOT NULL, target TEXT NOT NULL, action TEXT NOT NULL,
        inputs TEXT NOT NULL, status TEXT NOT NULL, fencing_token INTEGER, answered_at REAL,
        detail TEXT NOT NULL DEFAULT '', previous TEXT, attempts INTEGER, verdict TEXT,
        verdict_reason TEXT NOT NULL DEFAULT '', verdict_at REAL);
        INSERT INTO decisions (key, decided_at, kind, target, action, inputs, status)
        VALUES ('k', 1.0, 'set_pool_weight', 'v4-long', '{"kind": "set_pool_weight", "pool": "v4-long",
        "weight": 0.5}', '{}', 'applied');
        PRAGMA user_version=1;"""
    )
    con.close()
    with Audit(db) as audit:
        (row,) = audit.recent(0)
        assert row.undoes is None and row.action == SetPoolWeight("v4-long", 0.5)
        audit.record_decision(2.0, "k2", SetPoolWeight("v4-long", 1.0), {}, undoes=row.id)
        assert audit.by_key("k2").undoes == row.id


class BlindAfterApply(TwinAdmin):
    """TEST DOUBLE around the real twin's admin API: applies, then loses the answer, and the fleet cannot be read
    back until the test says so (`blind = False`): the apply is audited `unknown`.  Answers again once
    `losing = False`."""

    blind = False
    losing = True

    def observe(self):
        if self.blind:
            raise BackendError("connection refused")
        return super().observe()

    def apply(self, action):
        res = super().apply(action)
        if not self.losing:
            return res
        self.blind = True
        raise BackendError("read timed out")


def test_a_row_settled_applied_on_a_later_tick_holds_the_running_loops_cooldown_and_spends_its_budget(setup, tmp_path):
    """t0: the shift is applied but its answer lost and the fleet unreadable: `unknown`, so the loop's guardrails
    count nothing.  t0+15: the daemon's reconciliation settles it `applied`.  t0+30: the loop's next shift on the
    same pool must wait out the cooldown (before: applied at once, two changes 30 s apart) and the budget counts
    the settled change."""
    cfg, fleet, inputs = setup
    audit = Audit(tmp_path / "a.db")
    admin = BlindAfterApply(fleet)
    loop = ControlLoop(cfg, admin, inputs, audit=audit)
    loop.policy = Given(SHIFT)
    t0 = fleet.now
    assert [o for _, o, _ in loop.tick(t0).outcomes] == ["unknown"]
    assert loop.guard.budget_used(t0) == 0
    admin.blind = admin.losing = False
    (r,) = reconcile_unknown(audit, admin, t0 + 15)
    assert r.outcome == "applied" and audit.get(r.decision.id).status == "applied"

    again = Decision(SetPoolWeight("v4-long", 0.75), "test shift again", {}, "shift")
    loop.policy = Given(again)
    ((_, outcome, detail),) = loop.tick(t0 + 30).outcomes
    assert outcome == "refused" and detail.startswith("cooldown: set_pool_weight on v4-long changed 30 s ago")
    assert fleet.router.weights["v4-long"] == 0.5
    assert loop.guard.budget_used(t0 + 30) == 1
    loop.tick(t0 + 45)
    assert loop.guard.budget_used(t0 + 45) == 1  # counted once, not once a tick

    loop.policy = Given(again)  # the cooldown over, the same decision goes out
    ((_, outcome, _),) = loop.tick(t0 + cfg.guardrails.cooldown_seconds + 1).outcomes
    assert outcome == "applied" and fleet.router.weights["v4-long"] == 0.75
    assert loop.guard.budget_used(t0 + cfg.guardrails.cooldown_seconds + 1) == 2


def test_a_restarted_loop_counts_what_was_applied_before_it_in_its_cooldown_and_budget(setup, tmp_path):
    """A new loop on the same audit trail (the daemon restarted) starts its cooldown and budget from the trail,
    not empty: a shift applied 20 s before the restart holds the next one on that pool."""
    cfg, fleet, inputs = setup
    db = tmp_path / "a.db"
    audit = Audit(db)
    first = ControlLoop(cfg, TwinAdmin(fleet), inputs, audit=audit)
    first.policy = Given(SHIFT)
    t0 = fleet.now
    first.tick(t0)
    audit.close()

    audit = Audit(db)
    second = ControlLoop(cfg, TwinAdmin(fleet), inputs, audit=audit)
    second.policy = Given(Decision(SetPoolWeight("v4-long", 0.75), "test shift again", {}, "shift"))
    ((_, outcome, detail),) = second.tick(t0 + 20).outcomes
    assert outcome == "refused" and detail.startswith("cooldown: set_pool_weight on v4-long changed 20 s ago")
    assert second.guard.budget_used(t0 + 20) == 1 and fleet.router.weights["v4-long"] == 0.5
