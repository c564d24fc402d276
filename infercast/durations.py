"""Prometheus durations, the one grammar infercast reads and writes them in ('500ms', '15s', '1m30s', '7d').

Used by the generated rules (`for:`, range selectors), the live demo's checks of a server's intervals, and the
command line (`infercast actuator log --since 24h`), so a duration an operator copies from a Prometheus file
means the same everywhere; and the points in time the command line takes beside them (`parse_time`: Unix seconds
or an ISO time).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

_UNITS = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}
_PART = re.compile(r"(\d+)(ms|s|m|h|d|w|y)")


def duration(seconds: float) -> str:
    """Prometheus duration text: 90 -> '90s', 300 -> '5m', 7200 -> '2h'."""
    s = round(seconds)
    if s % 3600 == 0 and s:
        return f"{s // 3600}h"
    if s % 60 == 0 and s:
        return f"{s // 60}m"
    return f"{s}s"


def parse_duration(text: str) -> float:
    """Seconds of a Prometheus duration ('500ms', '15s', '1m30s'); ValueError when it is not one."""
    parts = _PART.findall(text)
    if not text or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"not a Prometheus duration: {text!r}")
    return sum(int(n) * _UNITS[u] for n, u in parts)


def parse_time(text: str) -> float:
    """Unix seconds of `text`: Unix seconds, or an ISO / RFC 3339 time (UTC when it names no zone); ValueError when
    it is neither."""
    try:
        return float(text)
    except ValueError:
        pass
    ts = datetime.fromisoformat(text)  # ValueError when it is not one
    return (ts if ts.tzinfo else ts.replace(tzinfo=UTC)).timestamp()
