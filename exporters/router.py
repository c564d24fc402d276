"""The router SDK: routers count their decisions here, and the exporter serves them as catalog counters.

Python routers (the twin's included) hold a `RouterRecorder` and call `record_request` / `record_degradation`
with counts; routers in other languages POST the same counts as JSON to the exporter's `/ingest/router`
(`apply_ingest` below validates a body and applies it atomically; see docs/exporters.md for the format).

Counters only go up: the recorder keeps plain integer totals per label set, and `collect()` renders them as fresh
`CounterMetricFamily` objects on each scrape (prometheus_client's custom-collector protocol), so a recorder can be
registered on any `CollectorRegistry`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.metrics_core import Metric

from infercast import exposition
from infercast.catalog import DEGRADATIONS_TOTAL, ROUTER_REQUESTS_TOTAL, spec
from infercast.config import FleetConfig
from infercast.exporters.base import Sample

_REQ = spec(ROUTER_REQUESTS_TOTAL)
_DEG = spec(DEGRADATIONS_TOTAL)
_PRIORITIES = frozenset(_REQ.enum("priority"))
_OUTCOMES = frozenset(_REQ.enum("outcome"))
_REASONS = frozenset(_DEG.enum("reason"))

#: the most label sets one recorder keeps per family; beyond it new label sets are refused (cardinality guard)
MAX_SERIES = 10_000
#: the largest count one call or one ingest item may add (a router POSTs increments every few seconds; a million
#: requests in one is a bug or an attack, and unbounded integers once made every /metrics answer HTTP 500)
MAX_COUNT = 1_000_000


def _label(name: str, value: object) -> str:
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def _enum(name: str, value: object, allowed: frozenset[str]) -> str:
    if value not in allowed:
        raise ValueError(f"unknown {name} {value!r}; allowed: {', '.join(sorted(allowed))}")
    return value  # type: ignore[return-value]


def _count(n: object) -> int:
    # bool is an int subclass; a True count is almost certainly a bug in the caller.
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative integer, got {n!r}"[:200])
    if n > MAX_COUNT:
        shown = f"{n:,}" if n < 10**30 else f"a {len(str(n))}-digit number"
        raise ValueError(f"n must be at most {MAX_COUNT:,} per item, got {shown}")
    return n


def known_label_sets(config: FleetConfig) -> tuple[list[tuple[str, str, str, str]], list[tuple[str, str, str]]]:
    """The label sets the fleet file announces: every pool with its version x priority x outcome, and every
    degradation path (a pool's version to each failover pool's version) x reason.

    The exporter starts its counters at 0 for these (Prometheus' advice for label sets known in advance), so
    `rate()` and alerts over them work from the first scrape instead of from the first event.
    """
    requests = [
        (pool, p.version, priority, outcome)
        for pool, p in config.pools.items()
        for priority in _REQ.enum("priority")
        for outcome in _REQ.enum("outcome")
    ]
    paths = dict.fromkeys(
        (p.version, config.pools[f].version) for p in config.pools.values() for f in p.failover
    )  # ordered, unique
    degradations = [(a, b, reason) for a, b in paths for reason in _DEG.enum("reason")]
    return requests, degradations


class RouterRecorder:
    """In-process SDK for Python routers; thread-safe; cheap enough to call per simulation tick with counts."""

    def __init__(self, max_series: int = MAX_SERIES) -> None:
        self._lock = threading.Lock()
        self._requests: dict[tuple[str, str, str, str], int] = {}
        self._degradations: dict[tuple[str, str, str], int] = {}
        self._max_series = max_series

    # --- recording -------------------------------------------------------------------------------------------
    def record_request(self, pool: str, version: str, priority: str, outcome: str, n: int = 1) -> None:
        """Count `n` requests of `priority` that the router sent to `pool` (serving `version`) and their outcome."""
        key = (
            _label("pool", pool),
            _label("version", version),
            _enum("priority", priority, _PRIORITIES),
            _enum("outcome", outcome, _OUTCOMES),
        )
        self._add(self._requests, key, _count(n))

    def record_degradation(self, from_version: str, to_version: str, reason: str, n: int = 1) -> None:
        """Count `n` degradation decisions from one model version to another, and why."""
        key = (
            _label("from_version", from_version),
            _label("to_version", to_version),
            _enum("reason", reason, _REASONS),
        )
        self._add(self._degradations, key, _count(n))

    def _add(self, table: dict, key: tuple, n: int) -> None:
        with self._lock:
            if key not in table and len(table) >= self._max_series:
                raise ValueError(f"more than {self._max_series} label sets; refusing {key!r} (label cardinality)")
            table[key] = table.get(key, 0) + n

    def preset(
        self, requests: Iterable[tuple[str, str, str, str]], degradations: Iterable[tuple[str, str, str]]
    ) -> None:
        """Start these label sets at 0 (those already counted keep their counts)."""
        self.apply([(k, 0) for k in requests], [(k, 0) for k in degradations])

    def apply(self, requests: Iterable[tuple[tuple[str, str, str, str], int]], degradations) -> None:
        """Add already-validated counts in one step (all or nothing with respect to concurrent scrapes)."""
        with self._lock:
            new_req = {k for k, _ in requests if k not in self._requests}
            new_deg = {k for k, _ in degradations if k not in self._degradations}
            if len(self._requests) + len(new_req) > self._max_series or (
                len(self._degradations) + len(new_deg) > self._max_series
            ):
                raise ValueError(f"more than {self._max_series} label sets (label cardinality); nothing applied")
            for k, n in requests:
                self._requests[k] = self._requests.get(k, 0) + n
            for k, n in degradations:
                self._degradations[k] = self._degradations.get(k, 0) + n

    # --- reading ---------------------------------------------------------------------------------------------
    def collect(self) -> Iterable[Metric]:
        """Fresh counter families for a scrape (prometheus_client custom-collector protocol)."""
        with self._lock:
            requests = list(self._requests.items())
            degradations = list(self._degradations.items())
        return exposition.families(
            [(ROUTER_REQUESTS_TOTAL, dict(zip(_REQ.labels, k, strict=True)), v) for k, v in sorted(requests)]
            + [(DEGRADATIONS_TOTAL, dict(zip(_DEG.labels, k, strict=True)), v) for k, v in sorted(degradations)]
        )

    def snapshot(self) -> dict:
        """Plain counts, for tests and the twin's report.

        `{"requests": {(pool, version, priority, outcome): n}, "degradations": {(from, to, reason): n},
        "requests_by_outcome": {outcome: n}, "degradations_by_reason": {reason: n}}`.
        """
        with self._lock:
            requests = dict(self._requests)
            degradations = dict(self._degradations)
        by_outcome: dict[str, int] = {}
        for (_, _, _, outcome), n in requests.items():
            by_outcome[outcome] = by_outcome.get(outcome, 0) + n
        by_reason: dict[str, int] = {}
        for (_, _, reason), n in degradations.items():
            by_reason[reason] = by_reason.get(reason, 0) + n
        return {
            "requests": requests,
            "degradations": degradations,
            "requests_by_outcome": by_outcome,
            "degradations_by_reason": by_reason,
        }


# --- HTTP ingest (the body format; the HTTP handler lives in exporters/server.py) ------------------------------
MAX_INGEST_ITEMS = 1_000


def _check_fleet(field: str, key: tuple[str, ...], fleet: FleetConfig) -> None:
    """Pools and versions must be the fleet file's: a typo or a made-up pool is refused, naming it."""
    if field == "requests":
        pool, version = key[0], key[1]
        if pool not in fleet.pools:
            raise ValueError(f"unknown pool {pool!r} (the fleet file has {', '.join(sorted(fleet.pools))})")
        if fleet.pools[pool].version != version:
            raise ValueError(f"pool {pool!r} serves version {fleet.pools[pool].version!r}, not {version!r}")
    else:
        for v in key[:2]:
            if v not in fleet.versions:
                raise ValueError(f"unknown version {v!r} (the fleet file has {', '.join(sorted(fleet.versions))})")


def parse_ingest(body: Any, fleet: FleetConfig | None = None) -> tuple[list, list]:
    """Validate a decoded `/ingest/router` JSON body; raise ValueError naming the first bad item, else the counts.

    Body: `{"requests": [{"pool", "version", "priority", "outcome", "n"}...],
    "degradations": [{"from_version", "to_version", "reason", "n"}...]}`; both lists optional, `n` defaults to 1
    and is at most `MAX_COUNT`.  With a `fleet`, pools and versions must be its own (and a pool its version).
    """
    if not isinstance(body, Mapping):
        raise ValueError(f"expected a JSON object, got {type(body).__name__}")
    unknown = set(body) - {"requests", "degradations"}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}; expected 'requests' and/or 'degradations'")
    out_req: list = []
    out_deg: list = []
    for field, fields, out in (
        ("requests", ("pool", "version", "priority", "outcome"), out_req),
        ("degradations", ("from_version", "to_version", "reason"), out_deg),
    ):
        items = body.get(field, [])
        if not isinstance(items, list):
            raise ValueError(f"{field} must be a list")
        if len(items) > MAX_INGEST_ITEMS:
            raise ValueError(f"{field}: at most {MAX_INGEST_ITEMS} items per request, got {len(items)}")
        for i, item in enumerate(items):
            if not isinstance(item, Mapping):
                raise ValueError(f"{field}[{i}] must be an object")
            extra = set(item) - {*fields, "n"}
            if extra:
                raise ValueError(f"{field}[{i}]: unknown keys {sorted(extra)}")
            try:
                key = tuple(_label(f, item.get(f)) for f in fields)
                if field == "requests":
                    _enum("priority", key[2], _PRIORITIES)
                    _enum("outcome", key[3], _OUTCOMES)
                else:
                    _enum("reason", key[2], _REASONS)
                if fleet is not None:
                    _check_fleet(field, key, fleet)
                n = _count(item.get("n", 1))
            except ValueError as e:
                raise ValueError(f"{field}[{i}]: {e}") from None
            out.append((key, n))
    return out_req, out_deg


def apply_ingest(recorder: RouterRecorder, body: Any, fleet: FleetConfig | None = None) -> int:
    """Validate a body and add all of its counts, or none (ValueError); returns the number of items applied."""
    requests, degradations = parse_ingest(body, fleet)
    recorder.apply(requests, degradations)
    return len(requests) + len(degradations)


def recorder_samples(recorder: Any) -> list[Sample]:
    """The router SDK's counters as samples (the twin's recorder and the HTTP ingest's)."""
    snap = recorder.snapshot()
    out = [
        Sample(ROUTER_REQUESTS_TOTAL, {"pool": p, "version": v, "priority": pr, "outcome": o}, float(n))
        for (p, v, pr, o), n in sorted(snap["requests"].items())
    ]
    out += [
        Sample(DEGRADATIONS_TOTAL, {"from_version": f, "to_version": t, "reason": r}, float(n))
        for (f, t, r), n in sorted(snap["degradations"].items())
    ]
    return out
