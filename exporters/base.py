"""What every collector shares: the target it scrapes, the samples it returns, and a strict text-format parser.

A collector is a pure `parse(text, target) -> list[Sample]` plus a thin `fetch()`.  Samples carry catalog names
(from `infercast.catalog`) and the catalog's labels; a few carry an internal name starting with `_` (raw counters
and rates that `exporters.windows` turns into windowed ratios, integrated counters or change counts, since those
need the previous scrape).

The parser is strict on purpose: an engine that sends a malformed line, a duplicate series, or a NaN, infinite or
negative value in a family we read is a target we cannot trust this round, so the scrape fails with `ScrapeError`
(the exporter then reports `infercast_target_up 0` with the reason) instead of exporting a half-true picture.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from infercast.config import FleetConfig, TargetConfig


class ScrapeError(Exception):
    """A target could not be scraped or its body could not be trusted; the message is the reason logged."""


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


@dataclass(frozen=True)
class Target:
    """A configured source, with what the fleet file says about it (pool, version, batch limit)."""

    name: str
    kind: str
    url: str | None = None
    pool: str | None = None
    version: str | None = None
    node: str | None = None
    max_batch: int | None = None
    #: served model name -> version, from `versions[*].model.name`
    models: dict[str, str] = field(default_factory=dict)
    #: version -> the pool serving it (first in the fleet file); pool -> its version
    pools_by_version: dict[str, str] = field(default_factory=dict)
    pool_versions: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_config(cls, t: TargetConfig, fleet: FleetConfig | None = None) -> Target:
        models: dict[str, str] = {}
        pools: dict[str, str] = {}
        pool_versions: dict[str, str] = {}
        if fleet is not None:
            models = {v.model.name: name for name, v in fleet.versions.items()}
            for pname, p in fleet.pools.items():
                pools.setdefault(p.version, pname)
                pool_versions[pname] = p.version
        return cls(t.name, t.kind, t.url, t.pool, t.version, t.node, t.max_batch, models, pools, pool_versions)

    def serving_labels(self, model_name: str | None, instance: str) -> dict[str, str]:
        """pool, version and instance labels for a series of `model_name` (None where the engine has no model label).

        The version is the one the fleet file gives that served model name (what the engine actually serves; a
        Triton server serves several), else the target's `version`, else the model name, else "unknown".  The pool
        is the target's when it serves that version, else the first pool serving it, else the target's, else
        "unknown".
        """
        version = self.models.get(model_name) if model_name is not None else None
        version = version or self.version or model_name or "unknown"
        if self.pool is not None and self.pool_versions.get(self.pool, version) == version:
            pool = self.pool
        else:
            pool = self.pools_by_version.get(version) or self.pool or "unknown"
        return {"pool": pool, "version": version, "instance": instance}


# --- the text format ------------------------------------------------------------------------------------------
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE_RE = re.compile(rf"({_NAME})(?:\{{(.*)\}})?[ \t]+([^ \t]+)(?:[ \t]+(-?[0-9]+))?[ \t]*")
_LABEL_RE = re.compile(r'[ \t]*([a-zA-Z_][a-zA-Z0-9_]*)[ \t]*=[ \t]*"((?:[^"\\\n]|\\.)*)"[ \t]*(,|$)')
_META_RE = re.compile(rf"#[ \t]+(HELP|TYPE)[ \t]+({_NAME})(?:[ \t]+(.*))?")
_TYPES = frozenset({"counter", "gauge", "histogram", "summary", "untyped", "unknown", "info", "stateset"})
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_ESC_RE = re.compile(r"\\[\\\"n]")


def _labels(raw: str, lineno: int) -> dict[str, str]:
    out: dict[str, str] = {}
    pos = 0
    raw = raw.rstrip()
    while pos < len(raw):
        m = _LABEL_RE.match(raw, pos)
        if not m:
            raise ScrapeError(f"line {lineno}: malformed labels {raw[pos : pos + 60]!r}")
        name, value = m.group(1), m.group(2)
        if "\\" in value:
            value = _ESC_RE.sub(lambda e: _ESCAPES[e.group(0)], value)
        if name in out:
            raise ScrapeError(f"line {lineno}: label {name!r} given twice")
        out[name] = value
        pos = m.end()
        if m.group(3) == "" and pos < len(raw):
            raise ScrapeError(f"line {lineno}: malformed labels {raw[pos : pos + 60]!r}")
    return out


def _value(raw: str, lineno: int) -> float:
    try:
        if "_" in raw:
            raise ValueError
        return float(raw)
    except ValueError:
        raise ScrapeError(f"line {lineno}: value {raw[:40]!r} is not a number") from None


def parse_text(text: str, wanted: Iterable[str]) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Parse Prometheus text exposition; return the samples of the `wanted` sample names, validated.

    Every line is checked for shape (so a non-Prometheus body fails); labels and values are fully parsed only for
    wanted names, which must be finite, non-negative and not duplicated.
    """
    wanted = wanted if isinstance(wanted, (set, frozenset)) else frozenset(wanted)
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line or line.isspace():
            continue
        if line[0] == "#":
            if line.startswith(("# HELP", "# TYPE")):
                m = _META_RE.fullmatch(line.rstrip("\r"))
                if not m:
                    raise ScrapeError(f"line {lineno}: malformed {line[:7]!r} line")
                if m.group(1) == "TYPE" and (m.group(3) or "").strip() not in _TYPES:
                    raise ScrapeError(f"line {lineno}: unknown metric type {m.group(3)!r}")
            continue
        m = _SAMPLE_RE.fullmatch(line.rstrip("\r"))
        if not m:
            raise ScrapeError(f"line {lineno}: not a Prometheus sample: {line[:80]!r}")
        name = m.group(1)
        if name not in wanted:
            continue
        labels = _labels(m.group(2), lineno) if m.group(2) else {}
        value = _value(m.group(3), lineno)
        if math.isnan(value) or math.isinf(value) or value < 0:
            raise ScrapeError(f"line {lineno}: {name} has value {m.group(3)!r} (expected a finite value >= 0)")
        key = (name, tuple(sorted(labels.items())))
        if key in seen:
            raise ScrapeError(f"line {lineno}: duplicate series {name}{{{m.group(2) or ''}}}")
        seen.add(key)
        out.setdefault(name, []).append((labels, value))
    return out


def first(samples: dict[str, list[tuple[dict[str, str], float]]], *names: str) -> str | None:
    """The first of `names` present in a parse result (renamed families: the current name first)."""
    for n in names:
        if n in samples:
            return n
    return None


# --- building catalog samples ----------------------------------------------------------------------------------
# Internal sample names (not exported): raw counters and rates for the stateful stage in exporters/windows.py.
HIT_QUERIES = "_prefix_cache_queries"
HIT_HITS = "_prefix_cache_hits"
PCIE_RATE = "_gpu_pcie_bytes_per_second"
XID_LAST = "_gpu_xid_last"

USAGE = "infercast_kv_cache_usage_ratio"
FRAGMENTATION = "infercast_kv_cache_fragmentation_ratio"
FAILURES = "infercast_kv_block_allocation_failures_total"
HIT_RATIO = "infercast_kv_cache_hit_ratio"
SATURATION = "infercast_batch_saturation_ratio"
RUNNING = "infercast_requests_running"
WAITING = "infercast_requests_waiting"
EFFICIENCY = "infercast_memory_efficiency_ratio"
GPU_USED = "infercast_gpu_memory_used_bytes"
GPU_TOTAL = "infercast_gpu_memory_total_bytes"


def saturation(running: float | None, max_batch: float | None) -> float | None:
    """running / max batch, or None where either is unknown (then the metric is absent, never a made-up zero)."""
    if running is None or not max_batch:
        return None
    return running / max_batch


class Emitter:
    """Collects samples for one parse; skips None values so that what a source lacks stays absent."""

    def __init__(self) -> None:
        self.samples: list[Sample] = []

    def add(self, name: str, labels: dict[str, str], value: float | None) -> None:
        if value is not None:
            self.samples.append(Sample(name, labels, float(value)))
