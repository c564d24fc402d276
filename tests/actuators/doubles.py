"""TEST DOUBLES of the control loop (not infercast's policy, which is actuators/controller.py): loops that the daemon
can run in tests, each a `TickHook` built by a factory `FACTORY(parts) -> tick` (what `--tick` names).

- `ObserveOnly` reads the fleet from the backend and live KV usage from Prometheus, and decides nothing.
- `Scripted` decides the next action of a fixed list each tick and carries it out through the real path: audit
  record, the leader's fencing token and the decision's idempotency key, `apply_with_retries`, the answer recorded;
  advisory (recorded, never applied) when the daemon says the tick is not active.
- `Slow` takes `INFERCAST_TEST_TICK_SECONDS` per tick and writes `start`/`end` lines to `INFERCAST_TEST_MARKS`
  (for the SIGTERM test: the tick in flight must end before the process does).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from infercast.actuators.actions import Action, SetPoolWeight
from infercast.actuators.admin import apply_with_retries
from infercast.actuators.daemon_cli import DaemonParts
from infercast.actuators.stamp import decision_key, stamped
from infercast.actuators.tick import ActionOutcome, TickContext, TickReport, VerdictOutcome


class ObserveOnly:
    """TEST DOUBLE: observes (backend + Prometheus) and decides nothing."""

    def __init__(self, parts: DaemonParts, metric: str = "infercast_kv_cache_usage_ratio") -> None:
        self.parts = parts
        self.metric = metric
        self.seen: list[tuple[float, str, int, int]] = []  # (now, loop, pools observed, series read)

    def __call__(self, now: float, ctx: TickContext) -> TickReport:
        obs = self.parts.admin.observe()
        n = 0
        if self.parts.store is not None:
            n = len(self.parts.store.query_range(self.metric, None, now - 60, now, 15))
        self.seen.append((now, ctx.loop, len(obs.pools), n))
        self.parts.inbox.drain()
        return TickReport(note=f"observed {len(obs.pools)} pools and {n} series of {self.metric}; decided nothing")


def observe_only(parts: DaemonParts) -> ObserveOnly:
    return ObserveOnly(parts)


class Scripted:
    """TEST DOUBLE: one scripted action per tick through the real apply path."""

    def __init__(
        self,
        parts: DaemonParts,
        script: Sequence[tuple[Action, str]],
        verdicts: Sequence[VerdictOutcome] = (),
        frozen_every: int = 0,
        on_tick: Callable[[float, TickContext], None] | None = None,
    ) -> None:
        self.parts = parts
        self.script = list(script)
        self.verdicts = list(verdicts)
        self.frozen_every = frozen_every
        self.on_tick = on_tick
        self.n = 0
        self.lock = threading.Lock()
        self.alerts: list = []

    def __call__(self, now: float, ctx: TickContext) -> TickReport:
        with self.lock:
            self.n += 1
            n = self.n
        self.alerts += self.parts.inbox.drain()
        if self.on_tick is not None:
            self.on_tick(now, ctx)
        if self.frozen_every and n % self.frozen_every == 0:
            return TickReport(frozen=True, freeze_reason="stale_inputs", note="inputs older than 120 s")
        action, reason = self.script[(n - 1) % len(self.script)]
        key = decision_key(now, action, salt=str(n))
        audit, p = self.parts.audit, self.parts
        i = audit.record_decision(
            now, key, action, {"reason": f"scripted #{n}"}, advisory=not ctx.active, fencing_token=ctx.fencing_token
        )
        verdicts = tuple(self.verdicts[: 1 if n == 1 else 0])
        budget = {action.target: min(1.0, n / 10)}
        if not ctx.active:
            return TickReport((ActionOutcome(action, "advisory", reason, now, now),), verdicts, budget_used=budget)
        res = apply_with_retries(
            stamped(p.admin, ctx.stamp(key)), action, p.apply_attempts, p.apply_backoff_seconds, sleep=time.sleep
        )
        answered = p.clock.now()
        audit.mark_applied(i, res, answered)
        outcome = ActionOutcome(action, res.status, reason, now, answered, res.detail)
        return TickReport((outcome,), verdicts, budget_used=budget)


def weight_walk(parts: DaemonParts) -> Scripted:
    """v4-main's weight 0.5, 0.6, 0.7, ... one step a tick (for the command-line tests)."""
    return Scripted(parts, [(SetPoolWeight("v4-main", round(0.5 + i / 10, 1)), "forecast") for i in range(5)])


class Slow:
    """TEST DOUBLE: a tick that takes a while and says when it starts and ends."""

    def __init__(self, marks: Path, seconds: float) -> None:
        self.marks = marks
        self.seconds = seconds
        self.n = 0

    def __call__(self, now: float, ctx: TickContext) -> TickReport:
        self.n += 1
        with self.marks.open("a") as f:
            f.write(f"start {ctx.loop} {self.n}\n")
        time.sleep(self.seconds)
        with self.marks.open("a") as f:
            f.write(f"end {ctx.loop} {self.n}\n")
        return TickReport()


def slow(parts: DaemonParts) -> Slow:
    return Slow(Path(os.environ["INFERCAST_TEST_MARKS"]), float(os.environ.get("INFERCAST_TEST_TICK_SECONDS", "2")))
