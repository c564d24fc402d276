"""The audit trail: every decision the actuator makes, what it acted on, what the fleet answered, and the verdict.

One SQLite file in WAL mode (readers such as `infercast actuator log` never block the daemon; `synchronous=FULL`:
a decision written is on disk before the action goes out, so even a power cut leaves the trail ahead of the
fleet).  A decision goes through these states:

    record_decision(now, key, action, inputs)        -> "decided"   (or "advisory": decided, never applied)
    mark_applied(id, result, now)                     -> "applied" | "refused" | "failed"  (the backend's answer)
    mark_verdict(id, verdict, reason, now)            -> verdict "verified" | "rolled_back" | "no_effect"
    mark_interrupted(id, reason, now)                 -> "interrupted" (a restart found it decided, never answered)
    mark_unknown(id, result, detail, now)             -> "unknown"   (the answer was lost and reading the target's
                                                                      state back could not tell either way)
    mark_reconciled(id, status, detail, now, ...)     -> "applied" | "refused" | "failed"  (an unknown row, settled
                                                                      by reading the target back on a later tick)
    record_refusal(now, key, action, inputs, reason)  -> "refused"   (the guardrails said no; never sent)

A rollback (the undo of an applied action judged `no_effect` or worse) is a decision of its own, recorded through
the same states with `undoes` naming the decision it undoes (`record_decision(..., undoes=id)`): `applied` when
the backend took the undo, `refused` (the guardrails' reason), `advisory`, `failed` or `unknown` like any other.

`key` is the decision's idempotency key (`infercast.actuators.stamp.decision_key`, or any unique string): a decision
whose key is already recorded is not recorded again (`record_decision` returns the existing id), and the same key
travels to the backend with the apply.  A process killed between `record_decision` and `mark_applied` leaves the
decision `in_flight()`; on restart `infercast.actuators.recovery.resolve_in_flight` asks the backend whether that key
was applied and records the answer, never applying it again.  `applied_in_window(target, start, end)` and
`applied_since(start, end)` serve cooldowns and change budgets: the control loop feeds its guardrails every
`applied` row it did not apply itself (settled on a later tick after a lost answer, or before a restart).

The file must stay the one the daemon opened.  SQLite keeps writing to a deleted file's inode (every later row
would vanish with it) and a file overwritten underneath reads as garbage, so every write first checks the path
still names the same, readable SQLite file (`check()`); once it does not, the trail is *broken* for good: every
later write raises `AuditError`, and its row is logged whole at ERROR and counted (`unrecorded`) instead of being
lost in silence.  The daemon checks before each tick and stops acting (advisory) while the trail is broken
(`infercast_actuator_audit_failed 1`).

Times are the `now` the caller passes (the loop's clock): this module never reads the clock.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import asdict, dataclass, is_dataclass
from pathlib import Path
from typing import Any, Literal

from infercast.actuators.actions import Action, parse_action
from infercast.actuators.admin import Result

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2  # 2: `undoes` (a rollback names the decision it undoes); a 1 is upgraded on open
Status = Literal["decided", "advisory", "applied", "refused", "failed", "interrupted", "unknown"]
#: the first 16 bytes of every SQLite database file
SQLITE_HEADER = b"SQLite format 3\x00"
Verdict = Literal["verified", "rolled_back", "no_effect"]
VERDICTS = ("verified", "rolled_back", "no_effect")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS decisions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    decided_at REAL NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    action TEXT NOT NULL,
    inputs TEXT NOT NULL,
    status TEXT NOT NULL,
    fencing_token INTEGER,
    answered_at REAL,
    detail TEXT NOT NULL DEFAULT '',
    previous TEXT,
    attempts INTEGER,
    verdict TEXT,
    verdict_reason TEXT NOT NULL DEFAULT '',
    verdict_at REAL,
    undoes INTEGER
);
CREATE INDEX IF NOT EXISTS decisions_by_time ON decisions (decided_at);
CREATE INDEX IF NOT EXISTS decisions_by_target ON decisions (target, status, answered_at);
"""


class AuditError(RuntimeError):
    """The audit trail cannot be opened or written, or a change to it is not allowed (the message says which)."""


@dataclass(frozen=True)
class AuditRecord:
    """One decision as the audit trail holds it: its row id and idempotency key, the action and the figures it rested
    on, and what became of it (status, the backend's answer, the verdict, a rollback's link).  The policy's own
    decision, before it is recorded, is `policy.Decision`."""

    id: int
    key: str
    decided_at: float
    action: Action
    inputs: dict[str, Any]
    status: Status
    fencing_token: int | None = None
    answered_at: float | None = None
    detail: str = ""
    previous: Action | None = None
    attempts: int | None = None
    verdict: Verdict | None = None
    verdict_reason: str = ""
    verdict_at: float | None = None
    undoes: int | None = None  # a rollback: the id of the decision it undoes

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["action"] = self.action.to_dict()
        d["previous"] = self.previous.to_dict() if self.previous else None
        return d


class Audit:
    """The audit trail in SQLite at `path` (created if missing); safe to share between threads."""

    def __init__(self, path: str | Path, *, busy_timeout_seconds: float = 5.0) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self.broken: str | None = None  # why the trail can no longer be written (latched)
        self.unrecorded = 0  # rows that could not be written (each logged whole instead)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(
                self.path, timeout=busy_timeout_seconds, isolation_level=None, check_same_thread=False
            )
            version = self._db.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise AuditError(f"{self.path}: written by a newer infercast (schema {version} > {SCHEMA_VERSION})")
            mode = self._db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if mode.lower() != "wal":
                raise AuditError(f"{self.path}: SQLite refused WAL mode (got {mode}); is it on a network filesystem?")
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript(_SCHEMA)
            columns = {r[1] for r in self._db.execute("PRAGMA table_info(decisions)")}
            if "undoes" not in columns:  # schema 1: no rollback rows yet
                self._db.execute("ALTER TABLE decisions ADD COLUMN undoes INTEGER")
            self._db.execute(f"PRAGMA user_version={SCHEMA_VERSION}")
            st = os.stat(self.path)
            self._ident = (st.st_dev, st.st_ino)
        except (sqlite3.Error, OSError) as e:
            raise AuditError(f"{self.path}: cannot open the audit trail: {e}") from None

    # --- health ----------------------------------------------------------------------------------------------
    def check(self) -> str | None:
        """None while the trail is the file the daemon opened and reads as SQLite; else why not (and the trail is
        broken from then on: a deleted or replaced database is not written to again by this process)."""
        if self.broken is not None:
            return self.broken
        problem = self._probe()
        if problem is not None:
            self.broken = problem
            log.error("audit: %s", problem)
        return problem

    def _probe(self) -> str | None:
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return f"{self.path} was deleted while the actuator ran: rows written now would be lost with it"
        except OSError as e:
            return f"{self.path} cannot be read: {e}"
        if (st.st_dev, st.st_ino) != self._ident:
            return f"{self.path} was replaced by another file while the actuator ran"
        try:
            with open(self.path, "rb") as f:
                head = f.read(len(SQLITE_HEADER))
        except OSError as e:
            return f"{self.path} cannot be read: {e}"
        if head != SQLITE_HEADER:
            return f"{self.path} is no longer a SQLite database (overwritten or truncated: starts {head[:16]!r})"
        try:
            with self._lock:
                self._db.execute("SELECT count(*) FROM decisions WHERE id = (SELECT max(id) FROM decisions)").fetchone()
        except sqlite3.Error as e:
            return f"{self.path} cannot be read as the audit trail: {e}"
        return None

    def _writable(self, what: str, row: Mapping[str, Any]) -> None:
        """AuditError when the trail is broken; the row that would have been written is logged whole and counted."""
        problem = self.check()
        if problem is None:
            return
        self.unrecorded += 1
        log.error("audit: NOT RECORDED (%s): %s %s", problem, what, _dumps(dict(row)))
        raise AuditError(f"the audit trail is unusable, {what} not recorded (logged instead): {problem}")

    def _write_failed(self, what: str, row: Mapping[str, Any], e: sqlite3.Error) -> AuditError:
        """A write SQLite refused (a read-only or immutable file, a full disk, an I/O error): the trail is broken
        from now on, like a deleted one (issue 36: with the file and its WAL immutable, every decision failed "disk
        I/O error" while `/metrics` said `audit_failed` 0 and `active` 1, and only WARNING lines were logged).  The
        row is logged whole at ERROR and counted; the daemon's next check runs the tick advisory and pages."""
        problem = f"{self.path} cannot be written: {e}"
        if self.broken is None:
            self.broken = problem
            log.error("audit: %s", problem)
        self.unrecorded += 1
        log.error("audit: NOT RECORDED (%s): %s %s", problem, what, _dumps(dict(row)))
        return AuditError(f"the audit trail is unusable, {what} not recorded (logged instead): {problem}")

    # --- writing ---------------------------------------------------------------------------------------------
    def record_decision(
        self,
        now: float,
        key: str,
        action: Action,
        inputs: Mapping[str, Any],
        *,
        advisory: bool = False,
        fencing_token: int | None = None,
        undoes: int | None = None,
    ) -> int:
        """Record a decision before it is carried out; returns its id (the existing one when `key` is known).
        `undoes`: a rollback's, the id of the decision it undoes."""
        if not isinstance(key, str) or not key:
            raise AuditError(f"a decision needs a non-empty idempotency key, got {key!r}")
        row = (
            key,
            float(now),
            action.kind,
            action.target,
            _dumps(action.to_dict()),
            _dumps(dict(inputs)),
            "advisory" if advisory else "decided",
            fencing_token,
            undoes,
        )
        self._writable("decision", {"key": key, "decided_at": now, "action": action, "inputs": inputs,
                                     "advisory": advisory, "fencing_token": fencing_token,
                                     "undoes": undoes})  # fmt: skip
        with self._lock:
            try:
                cur = self._db.execute(
                    "INSERT INTO decisions (key, decided_at, kind, target, action, inputs, status, fencing_token, "
                    "undoes) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO NOTHING",
                    row,
                )
                if cur.rowcount == 1:
                    return int(cur.lastrowid)  # type: ignore[arg-type]
                return int(self._db.execute("SELECT id FROM decisions WHERE key = ?", (key,)).fetchone()[0])
            except sqlite3.Error as e:
                raise self._write_failed("decision", {"key": key, "decided_at": now, "action": action}, e) from None

    def mark_applied(self, decision_id: int, result: Result, now: float) -> None:
        """Record the backend's answer (applied, refused or failed) to a decided action."""
        self._answer(
            decision_id,
            result.status,
            now,
            result.detail,
            _dumps(result.previous.to_dict()) if result.previous else None,
            result.attempts,
        )

    def mark_interrupted(self, decision_id: int, reason: str, now: float) -> None:
        """A decided action found unanswered after a restart, resolved without applying it (`reason` says how)."""
        self._answer(decision_id, "interrupted", now, reason, None, None)

    def mark_unknown(self, decision_id: int, result: Result, detail: str, now: float) -> None:
        """The answer to a decided action was lost and reading the target back could not tell whether it was
        applied: `unknown`, for `infercast.actuators.recovery.reconcile_unknown` to settle on a later tick or start."""
        self._answer(decision_id, "unknown", now, detail, None, result.attempts)

    def mark_reconciled(
        self, decision_id: int, status: Literal["applied", "refused", "failed"], detail: str, now: float,
        previous: Action | None = None,
    ) -> None:  # fmt: skip
        """Settle an `unknown` decision by what the target says now (`detail` says how it was read)."""
        prev = _dumps(previous.to_dict()) if previous else None
        self._answer(decision_id, status, now, detail, prev, None, was="unknown")

    def record_refusal(
        self, now: float, key: str, action: Action, inputs: Mapping[str, Any], reason: str, *, undoes: int | None = None
    ) -> int:
        """A decision the guardrails refused (never sent to the fleet): `refused`, with their reason as the detail."""
        i = self.record_decision(now, key, action, inputs, undoes=undoes)
        self._answer(i, "refused", now, f"guardrails: {reason}", None, 0)
        return i

    def _answer(
        self, decision_id: int, status: str, now: float, detail: str, previous: str | None, attempts: int | None,
        *, was: str = "decided",
    ) -> None:  # fmt: skip
        self._writable("answer", {"id": decision_id, "status": status, "at": now, "detail": detail})
        self._update_one(
            decision_id,
            "UPDATE decisions SET status = ?, answered_at = ?, detail = ?, previous = ?, "
            "attempts = coalesce(?, attempts) WHERE id = ? AND status = ?",
            (status, float(now), detail, previous, attempts, decision_id, was),
            op="answer",
            what="an answer",
            row={"id": decision_id, "status": status, "detail": detail},
            needed=was,
        )

    def mark_verdict(self, decision_id: int, verdict: Verdict, reason: str, now: float) -> None:
        """The verdict on an applied action after its verification window (once per decision)."""
        if verdict not in VERDICTS:
            raise AuditError(f"verdict must be one of {VERDICTS}, got {verdict!r}")
        self._writable("verdict", {"id": decision_id, "verdict": verdict, "reason": reason, "at": now})
        self._update_one(
            decision_id,
            "UPDATE decisions SET verdict = ?, verdict_reason = ?, verdict_at = ? "
            "WHERE id = ? AND status = 'applied' AND verdict IS NULL",
            (verdict, reason, float(now), decision_id),
            op="verdict",
            what="a verdict",
            row={"id": decision_id, "verdict": verdict, "reason": reason},
            needed="applied and without a verdict",
        )

    def _update_one(
        self, decision_id: int, sql: str, args: tuple, *, op: str, what: str, row: Mapping[str, Any], needed: str
    ) -> None:
        """Run `sql`, an UPDATE of decision `decision_id` guarded by the state the write needs.  AuditError when
        SQLite refuses it (the write `op` and its `row` are logged as not recorded) or when the decision is not
        `needed` (saying what it is and that `what` needs it so)."""
        with self._lock:
            try:
                cur = self._db.execute(sql, args)
            except sqlite3.Error as e:
                raise self._write_failed(op, row, e) from None
            if cur.rowcount != 1:
                raise AuditError(self._why_not(decision_id, what, needed))

    def _why_not(self, decision_id: int, what: str, needed: str) -> str:
        row = self._db.execute("SELECT status, verdict FROM decisions WHERE id = ?", (decision_id,)).fetchone()
        if row is None:
            return f"no decision {decision_id} to record {what} for"
        state = row[0] + (f", verdict {row[1]}" if row[1] else "")
        return f"decision {decision_id} is {state}: {what} needs it {needed}"

    # --- reading ---------------------------------------------------------------------------------------------
    def get(self, decision_id: int) -> AuditRecord | None:
        rows = self._select("WHERE id = ?", (decision_id,))
        return rows[0] if rows else None

    def by_key(self, key: str) -> AuditRecord | None:
        rows = self._select("WHERE key = ?", (key,))
        return rows[0] if rows else None

    def in_flight(self) -> list[AuditRecord]:
        """Decided and never answered: what a restart must resolve before acting again."""
        return self._select("WHERE status = 'decided' ORDER BY id")

    def unknown(self, limit: int = 100) -> list[AuditRecord]:
        """Decisions whose answer was lost and whose effect could not be read back yet, oldest first."""
        return self._select("WHERE status = 'unknown' ORDER BY id LIMIT ?", (int(limit),))

    def count_unknown(self) -> int:
        with self._lock:
            try:
                return int(self._db.execute("SELECT count(*) FROM decisions WHERE status = 'unknown'").fetchone()[0])
            except sqlite3.Error as e:
                raise AuditError(f"{self.path}: cannot read the audit trail: {e}") from None

    def awaiting_verdict(self) -> list[AuditRecord]:
        """Applied and not yet judged: what verification (after a restart too) still owes a verdict (a rollback is
        not judged: it restores what was there)."""
        return self._select("WHERE status = 'applied' AND verdict IS NULL AND undoes IS NULL ORDER BY id")

    def applied_since(self, start: float, end: float) -> list[AuditRecord]:
        """Every decision decided in [start, end] that the backend applied (rollbacks included), oldest first: what
        a control loop's guardrails must count, whichever tick or process settled it."""
        return self._select(
            "WHERE decided_at >= ? AND decided_at <= ? AND status = 'applied' ORDER BY decided_at, id",
            (float(start), float(end)),
        )

    def recent(self, since: float, limit: int | None = None) -> list[AuditRecord]:
        """Decisions made at or after `since`, oldest first (the newest `limit` of them)."""
        if limit is None:
            return self._select("WHERE decided_at >= ? ORDER BY decided_at, id", (since,))
        rows = self._select("WHERE decided_at >= ? ORDER BY decided_at DESC, id DESC LIMIT ?", (since, int(limit)))
        return rows[::-1]

    def applied_in_window(self, target: str, start: float, end: float) -> list[AuditRecord]:
        """Actions on `target` (a pool, `fleet`, `lane:NAME`: `Action.target`) the backend applied in
        [start, end], by the time it answered: for cooldowns and change budgets."""
        return self._select(
            "WHERE target = ? AND status = 'applied' AND answered_at >= ? AND answered_at <= ? ORDER BY id",
            (target, start, end),
        )

    def _select(self, where: str, args: tuple = ()) -> list[AuditRecord]:
        with self._lock:
            try:
                rows = self._db.execute(
                    "SELECT id, key, decided_at, action, inputs, status, fencing_token, answered_at, detail, "
                    f"previous, attempts, verdict, verdict_reason, verdict_at, undoes FROM decisions {where}",
                    args,
                ).fetchall()
            except sqlite3.Error as e:
                raise AuditError(f"{self.path}: cannot read the audit trail: {e}") from None
        return [_decision(r) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> Audit:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _decision(r: tuple) -> AuditRecord:
    return AuditRecord(
        id=r[0],
        key=r[1],
        decided_at=r[2],
        action=parse_action(json.loads(r[3])),
        inputs=json.loads(r[4]),
        status=r[5],
        fencing_token=r[6],
        answered_at=r[7],
        detail=r[8],
        previous=parse_action(json.loads(r[9])) if r[9] else None,
        attempts=r[10],
        verdict=r[11],
        verdict_reason=r[12],
        verdict_at=r[13],
        undoes=r[14],
    )


def _plain(v: Any) -> Any:
    """`v` as strict JSON: NaN and infinities (a frozen loop records them) as strings, dataclasses as dicts."""
    if isinstance(v, float) and not math.isfinite(v):
        return "NaN" if math.isnan(v) else ("+Inf" if v > 0 else "-Inf")
    if isinstance(v, Action):
        return v.to_dict()
    if is_dataclass(v) and not isinstance(v, type):
        return _plain(asdict(v))
    if isinstance(v, Mapping):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple | set | frozenset):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and callable(v.item):  # numpy scalars
        return _plain(v.item())
    if v is None or isinstance(v, str | int | float | bool):
        return v
    return str(v)


def _dumps(v: Any) -> str:
    return json.dumps(_plain(v), sort_keys=True, allow_nan=False)
