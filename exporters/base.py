"""What every collector shares: the target it scrapes, the samples it returns, and a strict text-format parser.

A collector is a pure `build(raw, target) -> list[Sample]` over the samples of the families it reads (`WANTED`,
with the largest value each may take in `MAXIMA`), and `parse(text, target)` = `build(parse_text(text, ...))`;
`infercast.exporters.sources` feeds the same `TextParser` the body as it arrives instead.  Samples carry catalog names
(from `infercast.catalog`) and the catalog's labels; a few carry an internal name starting with `_` (raw counters
and rates that `infercast.exporters.windows` turns into windowed ratios, integrated counters or change counts, since
those need the previous scrape).

The parser is strict on purpose: an engine that sends a malformed line, a duplicate series, or a NaN, infinite,
negative or out-of-range value (a `kv_cache_usage_perc` of 57.0 is not a ratio) in a family we read is a target
we cannot trust this round, so the scrape fails with `ScrapeError` (the exporter then reports
`infercast_target_up 0` with the reason) instead of exporting a half-true picture.  The same goes for what the
collectors derive: a ratio over 1, two series of a page landing on the same labels, a served model the fleet file
does not know.  A scrape also has a budget (`Budget`): its deadline and a number of series.

The exporter's own scrapes (`infercast.exporters.sources.HttpSource`) parse with `isolate=True` instead: a bad line in a
family it reads (malformed labels, a value that is not a number, NaN, negative or out of range, a duplicate series)
drops *that family* for the round -- the parser's `errors` say which and why, and the target stays up with the
rest of its page -- rather than the whole target.  A body that is not Prometheus text at all (a line that does not
even start with a metric name: an HTML error page, JSON), over its budget or not UTF-8 still fails the scrape.
Each collector names the families it `EXPECTED` (alternatives: renamed families); one absent from a page is
reported as `infercast_target_metric_missing{target,metric} 1` (exporters/server.py) instead of a forecast that
silently stops.
"""

from __future__ import annotations

import codecs
import math
import re
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from infercast.catalog import (
    BATCH_SATURATION_RATIO,
    CATALOG,
    ENGINE_EXTENSION,
)
from infercast.config import FleetConfig, TargetConfig


class ScrapeError(Exception):
    """A target could not be scraped or its body could not be trusted; the message is the reason logged."""


class OverBudget(ScrapeError):
    """The scrape's budget (deadline, series) is spent: the whole scrape fails, even when isolating families."""


class Sample(NamedTuple):
    name: str
    labels: dict[str, str]
    value: float


#: internal diagnostics a source returns beside its samples (never exported as such; exporters/server.py turns them
#: into `infercast_target_metric_missing` and `infercast_target_parse_errors_total`)
METRIC_MISSING = "_metric_missing"  # {metric}: an expected family absent from the page
FAMILY_DROPPED = "_family_dropped"  # {family, reason}: a family dropped this round as malformed or untrusted


def diagnostics(expected: Iterable[tuple[str, ...]], present: Iterable[str], errors: dict[str, str]) -> list[Sample]:
    """The diagnostics samples of one parse: each expected family (a tuple of alternative names, the current one
    first) that is neither on the page nor dropped, and each dropped family with its reason."""
    seen = set(present) | set(errors)
    out = [Sample(METRIC_MISSING, {"metric": names[0]}, 1.0) for names in expected if not seen & set(names)]
    out += [Sample(FAMILY_DROPPED, {"family": fam, "reason": why}, 1.0) for fam, why in sorted(errors.items())]
    return out


def served_models(fleet: FleetConfig) -> dict[str, str]:
    """Served model name -> version, from the fleet file's `versions[*].model.name` (every collector's one map)."""
    return {v.model.name: name for name, v in fleet.versions.items()}


def target_max_batch(t: TargetConfig, fleet: FleetConfig) -> int | None:
    """A target's maximum batch, for its batch saturation: the target's own `max_batch`, else its pool's
    `pools.<pool>.engines.max_batch`, else its version's `batcher.max_batch` (vLLM's default --max-num-seqs, 256,
    unless the fleet file gives another) -- the same figure the engines-mode rules divide by
    (`infercast.alertrules.engines.pool_max_batch`).  An engine that exports its own limit (Triton, older SGLang)
    is read first by its parser.  None for a target with neither pool nor version."""
    if t.max_batch is not None:
        return t.max_batch
    pool = fleet.pools.get(t.pool) if t.pool is not None else None
    if pool is not None and pool.engines.max_batch is not None:
        return pool.engines.max_batch
    version = fleet.versions.get(t.version or (pool.version if pool is not None else ""))
    return version.batcher.max_batch if version is not None else None


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
        max_batch = t.max_batch
        if fleet is not None:
            models = served_models(fleet)
            for pname, p in fleet.pools.items():
                pools.setdefault(p.version, pname)
                pool_versions[pname] = p.version
            max_batch = target_max_batch(t, fleet)
        return cls(t.name, t.kind, t.url, t.pool, t.version, t.node, max_batch, models, pools, pool_versions)

    def serving_labels(self, model_name: str | None, instance: str) -> dict[str, str]:
        """pool, version and instance labels for a series of `model_name` (None where the engine has no model label).

        The version is the one the fleet file gives that served model name (what the engine actually serves; a
        Triton server serves several), else the target's `version`.  A model the fleet file does not name on a
        target without a `version` is a ScrapeError naming it, rather than a "version" of its own that would split
        the pool's health score.  The pool is the target's when it serves that version, else the first pool
        serving it, else the target's, else "unknown".
        """
        version = self.models.get(model_name) if model_name is not None else None
        version = version or self.version
        if version is None:
            if model_name is None:
                raise ScrapeError(f"target {self.name!r}: the engine names no model; give the target a version")
            known = ", ".join(sorted(self.models)) or "none"
            raise ScrapeError(
                f"serves model {model_name[:100]!r}, which no version of the fleet file names "
                f"(versions[*].model.name: {known}); add it, or give the target a version"
            )
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
#: the metric name a malformed sample line starts with (isolating mode: which family to drop)
_LEAD_RE = re.compile(rf"({_NAME})(?:[{{ \t]|$)")


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


Raw = dict[str, list[tuple[dict[str, str], float]]]

#: the most series of the families it reads one target may hand the exporter per scrape (the fleet file's
#: `exporter.max_series_per_target` overrides it): a page of 100,000 distinct model names is refused, not kept
MAX_SERIES = 2_000
#: the longest line of any family (only shape-checked when not read) and of a family the exporter reads: real
#: engines' lines are under 1,100 and 340 characters; these caps bound what one scrape holds while it parses
MAX_LINE = 64 * 1024
MAX_SERIES_LINE = 2048
_CHECK_EVERY = 256  # lines between two looks at the clock


@dataclass
class Budget:
    """What one scrape of one target may spend: a deadline (time.monotonic()) and a number of series."""

    deadline: float = math.inf
    timeout: float = math.inf  # for the message
    max_series: int = MAX_SERIES


class TextParser:
    """Strict, incremental Prometheus text parser: feed it the body as it arrives, then `result()`.

    Every line is checked for shape (so a non-Prometheus body fails); labels and values are fully parsed only for
    `wanted` names, which must be finite, non-negative, at most their `maxima` (e.g. 1 for a ratio) and not
    duplicated.  The `budget` makes parsing stop -- in this thread, with ScrapeError -- at the scrape's deadline or
    past `max_series` wanted series, so neither a slow parse nor a page of distinct labels outlives its scrape.
    Memory: the wanted samples kept (at most `max_series` lines of at most MAX_SERIES_LINE characters) plus one
    partial line (at most MAX_LINE).
    """

    def __init__(
        self,
        wanted: Iterable[str],
        maxima: dict[str, float] | None = None,
        budget: Budget | None = None,
        *,
        isolate: bool = False,
    ):
        self.wanted = wanted if isinstance(wanted, set | frozenset) else frozenset(wanted)
        self.maxima = maxima or {}
        self.budget = budget or Budget()
        self.isolate = isolate  # a bad line drops its family (errors), not the whole parse
        self.errors: dict[str, str] = {}  # wanted family -> why it was dropped (the first reason)
        self.out: Raw = {}
        self._seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        self._kept = 0
        self._lineno = 0
        self._tail = ""
        self._decoder = codecs.getincrementaldecoder("utf-8")()

    def feed_bytes(self, chunk: bytes, final: bool = False) -> None:
        try:
            text = self._decoder.decode(chunk, final)
        except UnicodeDecodeError:
            raise ScrapeError("body is not UTF-8 text") from None
        self.feed(text)

    def feed(self, text: str) -> None:
        """Parse the complete lines of `text` (after what earlier calls left over); keep the partial last one."""
        if self._tail:
            text = self._tail + text
        start = 0
        n = len(text)
        while True:
            end = text.find("\n", start)
            if end < 0:
                break
            self.line(text[start:end])
            start = end + 1
        self._tail = text[start:] if start < n else ""
        if len(self._tail) > MAX_LINE:
            raise ScrapeError(f"line {self._lineno + 1}: longer than {MAX_LINE} characters")

    def result(self) -> Raw:
        self.feed_bytes(b"", final=True)
        if self._tail:
            tail, self._tail = self._tail, ""
            self.line(tail)
        return self.out

    def line(self, line: str) -> None:
        self._lineno += 1
        lineno = self._lineno
        if lineno % _CHECK_EVERY == 0 and time.monotonic() > self.budget.deadline:
            raise OverBudget(f"timed out after {self.budget.timeout:g}s (still parsing the body)")
        if len(line) > MAX_LINE:
            raise ScrapeError(f"line {lineno}: longer than {MAX_LINE} characters")
        if not line or line.isspace():
            return
        if line[0] == "#":
            if line.startswith(("# HELP", "# TYPE")):
                m = _META_RE.fullmatch(line.rstrip("\r"))
                if not m:
                    raise ScrapeError(f"line {lineno}: malformed {line[:7]!r} line")
                if m.group(1) == "TYPE" and (m.group(3) or "").strip() not in _TYPES:
                    raise ScrapeError(f"line {lineno}: unknown metric type {m.group(3)!r}")
            return
        m = _SAMPLE_RE.fullmatch(line.rstrip("\r"))
        if not m:
            lead = _LEAD_RE.match(line) if self.isolate else None
            if lead is None:
                raise ScrapeError(f"line {lineno}: not a Prometheus sample: {line[:80]!r}")
            if lead.group(1) in self.wanted:  # a malformed line of a family we read: that family goes
                self._drop(lead.group(1), f"line {lineno}: not a Prometheus sample: {line[:80]!r}")
            return  # of a family we do not read: it costs nothing
        name = m.group(1)
        if name not in self.wanted or name in self.errors:
            return
        try:
            self._sample(name, m, line, lineno)
        except OverBudget:
            raise
        except ScrapeError as e:
            if not self.isolate:
                raise
            self._drop(name, str(e))

    def _drop(self, name: str, reason: str) -> None:
        """Forget family `name` for this parse (its kept series too) and remember why."""
        self.errors.setdefault(name, reason[:300])
        gone = self.out.pop(name, [])
        self._kept -= len(gone)

    def _sample(self, name: str, m: re.Match[str], line: str, lineno: int) -> None:
        if len(line) > MAX_SERIES_LINE:
            raise ScrapeError(f"line {lineno}: {name} series of {len(line)} characters (at most {MAX_SERIES_LINE})")
        labels = _labels(m.group(2), lineno) if m.group(2) else {}
        value = _value(m.group(3), lineno)
        if math.isnan(value) or math.isinf(value) or value < 0:
            raise ScrapeError(f"line {lineno}: {name} has value {m.group(3)!r} (expected a finite value >= 0)")
        top = self.maxima.get(name)
        if top is not None and value > top:
            raise ScrapeError(f"line {lineno}: {name} has value {m.group(3)!r} (expected 0-{top:g})")
        key = (name, tuple(sorted(labels.items())))
        if key in self._seen:
            raise ScrapeError(f"line {lineno}: duplicate series {name}{{{m.group(2) or ''}}}")
        self._kept += 1
        if self._kept > self.budget.max_series:
            raise OverBudget(
                f"line {lineno}: more than {self.budget.max_series} series of the families read (label cardinality; "
                "exporter.max_series_per_target)"
            )
        self._seen.add(key)
        self.out.setdefault(name, []).append((labels, value))


def parse_text(
    text: str, wanted: Iterable[str], maxima: dict[str, float] | None = None, budget: Budget | None = None
) -> Raw:
    """Parse a whole Prometheus text body with `TextParser`; return the samples of the `wanted` names."""
    p = TextParser(wanted, maxima, budget)
    p.feed(text)
    return p.result()


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
#: a serving target's up with its pool and version (HTTP targets and twin nodes): the health and avalanche scores
#: read it; `infercast.exporters.server.families` exposes a twin node's as `infercast_target_up{target,kind}`
SERVING_UP = "_target_up"


#: how far over 1 a ratio computed from two engine values may be (float rounding), before it is an error
RATIO_SLACK = 1e-6


#: an engine series' (model_name, rank) where the engine runs several ranks in one server (vLLM `engine`, SGLang
#: `dp_rank`); either is None where the page has no such label
RankKey = tuple[str | None, str | None]


def by_rank(keys: Iterable[RankKey], target: Target, prefix: str = "") -> Iterator[tuple[RankKey, str, dict[str, str]]]:
    """Each (model, rank) key, in a stable order, with its instance and its serving labels: the instance is the
    target's name when the page shows one rank (or the series has none), else `<target>/<prefix><rank>`."""
    keys = set(keys)
    ranks = {rank for _, rank in keys}
    for key in sorted(keys, key=lambda k: (k[0] or "", k[1] or "")):
        model, rank = key
        instance = target.name if len(ranks) <= 1 or rank is None else f"{target.name}/{prefix}{rank}"
        yield key, instance, target.serving_labels(model, instance)


def saturation(running: float | None, max_batch: float | None) -> float | None:
    """running / max batch, or None where either is unknown (then the metric is absent, never a made-up zero)."""
    if running is None or not max_batch:
        return None
    return running / max_batch


_OVER_BATCH = (
    "more running than the maximum batch (the engine's, else the fleet file's targets[].max_batch, "
    "pools.<pool>.engines.max_batch or batcher.max_batch, default 256): give the engines' --max-num-seqs there"
)

#: catalog family -> its label names (what `Emitter.add` checks); names starting with `_` are internal
_FAMILY_LABELS = {m.name: frozenset(m.labels) for m in (*CATALOG, *ENGINE_EXTENSION)}


class Emitter:
    """Collects samples for one parse; skips None values so that what a source lacks stays absent.

    The last line of defence for derived values: a `_ratio` over 1 (beyond rounding) and two series of one page
    landing on the same labels (two model versions overwriting each other) are ScrapeErrors, never exported; but
    a batch saturation over 1 (its divisor the fleet file's word, not the page's) drops only that family, saying
    why (`FAMILY_DROPPED`).
    A sample must name a catalog family (or an internal `_` name) and carry every label the catalog gives it; a
    collector may add attribution labels (dcgm-exporter's pod, namespace, container).  A miss is a ValueError: a bug
    in the collector, not in the page.
    """

    def __init__(self) -> None:
        self.samples: list[Sample] = []
        self._keys: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
        self._dropped: set[str] = set()

    def add(self, name: str, labels: dict[str, str], value: float | None) -> None:
        if value is None or name in self._dropped:
            return
        want = _FAMILY_LABELS.get(name)
        if (want is not None and not want <= labels.keys()) or (want is None and not name.startswith("_")):
            raise ValueError(f"{name}{sorted(labels)}: the catalog has {sorted(want) if want else 'no such family'}")
        value = float(value)
        where = labels.get("instance") or labels.get("node") or ""
        if not math.isfinite(value) or value < 0:
            raise ScrapeError(f"{name} of {where!r} would be {value!r}")
        if name == BATCH_SATURATION_RATIO and value > 1.0 + RATIO_SLACK:
            # its divisor is usually the fleet file's (a target's, the pool's or the version's default 256), not the
            # page's: the family goes with the reason (logged once, counted in infercast_target_parse_errors_total),
            # the target and the rest of its page stay
            self._drop(name, f"{name} of {where!r} would be {value:.4g}, over 1: {_OVER_BATCH}")
            return
        if name.endswith("_ratio") and value > 1.0 + RATIO_SLACK:
            raise ScrapeError(f"{name} of {where!r} would be {value:.4g}, over 1: the page's values disagree")
        key = (name, tuple(sorted(labels.items())))
        if key in self._keys:
            raise ScrapeError(f"two series of the page map to {name}{dict(key[1])} (a model or version label lost?)")
        self._keys.add(key)
        self.samples.append(Sample(name, labels, min(value, 1.0) if name.endswith("_ratio") else value))

    def _drop(self, family: str, reason: str) -> None:
        """Leave every series of `family` out of this parse, saying why once (a `FAMILY_DROPPED` diagnostic)."""
        self.samples = [s for s in self.samples if s.name != family]
        self._keys = {k for k in self._keys if k[0] != family}
        if family not in self._dropped:
            self._dropped.add(family)
            self.samples.append(Sample(FAMILY_DROPPED, {"family": family, "reason": reason[:400]}, 1.0))
