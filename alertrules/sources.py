"""Where the per-engine serving figures are read from: the fleet file's `metrics.source` (one table, pure).

- `exporter` (the default): the alerts, dashboards and predictor read the series the infercast exporter
  re-emits from the engines (`infercast_kv_cache_usage_ratio`, ...) and the recording rules of alertrules/rules.py
  built on them (`pool_version:infercast_kv_cache_usage_ratio:max`, ...).
- `engines`: they read the recording rules on the engines' own metrics (alertrules/engines.py:
  `pool_version:engine_kv_cache_usage:max`, ...), Prometheus scraping the engines itself (PodMonitors or the
  generated `scrape_configs`); the exporter emits only what the engines do not give (`ENGINE_GIVEN`).

`ENGINE_SERIES` is the one table: each exporter-path series -> the engine-path series that holds the same figure.
Everything that reads a serving figure names the exporter-path series and goes through `series_name()` / `translate()`,
so a reader cannot pick one path for the alerts and the other for the dashboards.  The recording rules that
compute the exporter-path aggregates are left out in `engines` mode (`recording_rules` in rules.py): the engine
rules record the same figures.
"""

from __future__ import annotations

import re

from infercast.catalog import (
    BATCH_SATURATION_RATIO,
    KV_CACHE_USAGE_RATIO,
    REC_FLEET_ENGINE_KV_USAGE,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
)
from infercast.config import MetricsSource

from .engines import RATE_WINDOW, names
from .recorded import BATCH_SAT_AVG, KV_USAGE_AVG, KV_USAGE_FLEET, KV_USAGE_MAX, REQ_RATE, REQ_SHARE

EXPORTER: MetricsSource = "exporter"
ENGINES: MetricsSource = "engines"
SOURCES: tuple[MetricsSource, ...] = (EXPORTER, ENGINES)

#: the exporter's families the engines give themselves (their rules record the same figure per engine): the
#: exporter does not emit them in `engines` mode.  The prefix-cache hit ratio has no engine rule yet (SGLang
#: exports a ratio, vLLM two counters, TGI nothing), so the exporter still emits it (docs/exporters.md).
ENGINE_GIVEN: frozenset[str] = frozenset(
    {KV_CACHE_USAGE_RATIO, BATCH_SATURATION_RATIO, REQUESTS_RUNNING, REQUESTS_WAITING}
)


def engine_series(window: str = RATE_WINDOW) -> dict[str, str]:
    """Exporter-path series -> the engine-path series recording the same figure (rates over `window`)."""
    n = names(window)
    return {
        KV_USAGE_AVG: n["kv_usage_avg"],
        KV_USAGE_MAX: n["kv_usage_max"],
        KV_USAGE_FLEET: REC_FLEET_ENGINE_KV_USAGE,
        BATCH_SAT_AVG: n["batch_saturation_avg"],
        # requests per second: the router's counters on the exporter path, the engines' finished requests here
        REQ_RATE: n["requests_pool_rate"],
        REQ_SHARE: n["requests_version_share"],
        # one series per engine (the predictor's raw fallback combines them per pool and version)
        KV_CACHE_USAGE_RATIO: n["kv_usage"],
        BATCH_SATURATION_RATIO: n["batch_saturation"],
        REQUESTS_RUNNING: n["requests_running"],
        REQUESTS_WAITING: n["requests_waiting"],
    }


def series_name(name: str, source: str = EXPORTER, window: str = RATE_WINDOW) -> str:
    """The series a reader reads for exporter-path `name` under `source`."""
    _check(source)
    return engine_series(window).get(name, name) if source == ENGINES else name


def translate(promql: str, source: str = EXPORTER, window: str = RATE_WINDOW) -> str:
    """`promql` (or a template that holds PromQL) with every exporter-path series of `ENGINE_SERIES` replaced by
    its engine-path series when `source` is `engines`; unchanged otherwise.  Whole names only: `...:avg` is not
    touched inside `...:avg_over_time`, nor a name inside a longer one."""
    _check(source)
    if source == EXPORTER:
        return promql
    table = engine_series(window)
    # longest first: a name that is a prefix of another never takes its place
    alternatives = "|".join(re.escape(k) for k in sorted(table, key=len, reverse=True))
    return re.sub(rf"(?<![\w:])({alternatives})(?![\w:])", lambda m: table[m.group(1)], promql)


def _check(source: str) -> None:
    if source not in SOURCES:
        raise ValueError(f"metrics.source must be one of {', '.join(SOURCES)}, got {source!r}")
