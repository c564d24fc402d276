"""`infercast actuator log [--config FILE | --db PATH] [--since 1h] [--limit N] [--json]`: the audit trail as a table.

One row per decision, oldest first: when it was decided (UTC), the action, its status (advisory, decided, applied,
refused, failed, interrupted, unknown), attempts, the backend's detail, the verdict and its reason.  A decision the
guardrails refused is `refused` with 0 tries and the detail `guardrails: <their reason>`; one whose answer was lost
says what reading the target back found (`read back: applied`, `read back: not applied`) or stays `unknown` until
a later tick settles it.  A rollback is a row of its own: its action reads `undo #N: ...` (N the decision it
undoes, whose verdict says why: `no_effect`, or `rolled_back` when the pool got worse), with its status (applied,
refused by the guardrails, advisory, failed, unknown) and the reason (`roll back (...): ...`).  `--json` prints the
decisions whole (inputs and `undoes` included) as a JSON list.  The database is opened read-write (SQLite WAL
lets it read while the daemon writes); no row is changed (a schema-1 trail gains its empty `undoes` column).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from infercast.actuators.audit import Audit, AuditError, AuditRecord
from infercast.config import ConfigError, load_config
from infercast.durations import parse_duration, parse_time


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--config", help="fleet file (its actuator.audit_db)")
    src.add_argument("--db", help="the audit database itself")
    p.add_argument("--since", default="24h", help="how far back: 90m, 24h, 7d, an ISO time or Unix seconds (24h)")
    p.add_argument("--limit", type=int, default=None, help="only the newest N decisions")
    p.add_argument("--json", action="store_true", help="print the decisions as JSON")


def parse_since(text: str, now: float) -> float:
    """`--since` as Unix seconds; ConfigError naming the option when it is none of the accepted forms."""
    t = text.strip()
    try:
        return now - parse_duration(t)  # Prometheus' grammar: 90m, 24h, 7d, 1h30m
    except ValueError:
        pass
    try:
        return parse_time(t)
    except ValueError:
        raise ConfigError(f"--since: expected 90m, 24h, 7d, an ISO time or Unix seconds, got {text!r}") from None


def run(args: argparse.Namespace) -> int:
    if args.db:
        path = Path(args.db)
    elif args.config:
        path = Path(load_config(args.config).actuator.audit_db)
    else:
        raise ConfigError("infercast actuator log: give --config FILE or --db PATH")
    if not path.exists():
        raise ConfigError(f"{path}: no audit trail there (the actuator writes it at actuator.audit_db)")
    since = parse_since(args.since, time.time())
    if args.limit is not None and args.limit < 1:
        raise ConfigError(f"--limit: expected a positive number, got {args.limit}")
    try:
        with Audit(path) as audit:
            rows = audit.recent(since, args.limit)
    except AuditError as e:
        print(f"infercast: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([d.to_dict() for d in rows], indent=2))
    else:
        sys.stdout.write(table(rows))
    return 0


def _when(t: float | None) -> str:
    return "" if t is None else datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M:%S")


def table(rows: list[AuditRecord]) -> str:
    """The decisions as an aligned text table (a header and one line each)."""
    head = ("id", "decided (UTC)", "action", "status", "tries", "detail", "verdict", "why")
    lines = [
        (
            str(d.id),
            _when(d.decided_at),
            d.action.describe() if d.undoes is None else f"undo #{d.undoes}: {d.action.describe()}",
            d.status,
            "" if d.attempts is None else str(d.attempts),
            _cut(d.detail, 80),
            d.verdict or "",
            _cut(d.verdict_reason or str(d.inputs.get("reason", "")), 60),
        )
        for d in rows
    ]
    if not lines:
        return "no decisions in that window\n"
    widths = [max(len(h), *(len(r[i]) for r in lines)) for i, h in enumerate(head)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*head).rstrip(), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*r).rstrip() for r in lines]
    return "\n".join(out) + "\n"


def _cut(s: str, n: int) -> str:
    s = " ".join(s.split())
    return s if len(s) <= n else s[: n - 3] + "..."
