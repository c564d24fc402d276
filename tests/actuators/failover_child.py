"""TEST DOUBLE (for tests/actuators/test_failover_state.py): infercast's own control loop -- `ControlLoop`, its
guardrails (cooldown, hourly change budget), audit trail and apply path -- with a scripted policy and fixed, fresh
inputs, so the real daemon (`infercast actuator --tick tests.actuators.failover_child:build`) proposes known actions
and the guardrails alone decide which go out.

Environment:
- `FAILOVER_SCRIPT`: a JSON list of lists of actions; the n-th tick proposes the n-th list (the last list repeats).
- `FAILOVER_HANG_ON`: a JSON action: once the backend has applied it, the tick writes `HUNG` to the marks file and
  sleeps before recording the answer (the test `kill -9`s the process there: an action in flight).
- `FAILOVER_MARKS`: a file the loop appends a line to per tick (`tick N active|advisory`).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from infercast.actuators.actions import Action, parse_action
from infercast.actuators.admin import Observation, Result
from infercast.actuators.controller import ControlLoop, to_tick_report
from infercast.actuators.daemon_cli import DaemonParts
from infercast.actuators.inputs import LoopInputs
from infercast.actuators.policy import Decision


class ScriptedPolicy:
    """The n-th call proposes the n-th list of actions (the last one repeats); remembers nothing else."""

    def __init__(self, script: list[list[Action]]) -> None:
        self.script = script
        self.n = 0

    def decide(self, now: float, fleet: Observation, outlook: dict[str, Any]) -> list[Decision]:
        self.n += 1
        actions = self.script[min(self.n, len(self.script)) - 1]
        return [Decision(a, f"scripted (tick {self.n})", {}, "shift") for a in actions]

    def note_applied(self, d: Decision, previous: Any) -> None:
        pass

    def note_rolled_back(self, d: Decision, *_: object) -> None:
        pass


class FreshInputs:
    """LoopInputs with nothing stale (no figures, no ages): the loop never freezes."""

    def read(self, now: float, fleet: Observation) -> LoopInputs:
        return LoopInputs(at=now, outlook={})


class HangAfter:
    """The backend, except that after it applied `action` the tick says HUNG and sleeps (to be killed there)."""

    def __init__(self, admin: Any, action: Action | None, marks: Path) -> None:
        self._admin = admin
        self._action = action
        self._marks = marks

    def __getattr__(self, name: str) -> Any:
        return getattr(self._admin, name)

    def apply(self, action: Action, stamp: Any = None) -> Result:
        res = self._admin.apply(action, stamp=stamp) if stamp is not None else self._admin.apply(action)
        if action == self._action:
            with self._marks.open("a") as f:
                f.write(f"HUNG {res.status}\n")
            time.sleep(600)
        return res


def build(parts: DaemonParts):
    marks = Path(os.environ["FAILOVER_MARKS"])
    script = [[parse_action(a) for a in step] for step in json.loads(os.environ["FAILOVER_SCRIPT"])]
    hang = os.environ.get("FAILOVER_HANG_ON")
    admin = HangAfter(parts.admin, parse_action(json.loads(hang)) if hang else None, marks)
    loop = ControlLoop(
        parts.config, admin, FreshInputs(), policy=ScriptedPolicy(script), mode=parts.mode, audit=parts.audit
    )  # type: ignore[arg-type]

    def tick(now: float, ctx):
        report = loop.tick(now, ctx)
        with marks.open("a") as f:
            f.write(f"tick {loop.policy.n} {'active' if ctx.active else 'advisory'}\n")
        return to_tick_report(report, loop, now, parts.clock.now)

    return tick
