"""The predictor with `metrics.source: engines`: its history comes from the engine recording rules
(alertrules/engines.py), never from the exporter's series, through the same `query_range` interface.

Driven by script (`tick(now, store)` on an in-memory store holding what Prometheus would): the series a tick asks
for are the engine rules' names, the forecasts carry the pools the engines were scraped under, and where the
per-(pool, version) rules are not there yet (a rule loaded a minute ago) the raw fallback combines the engines'
own per-engine rule, as the exporter path combines the exporter's per-instance gauge.
"""

from __future__ import annotations

import numpy as np

from infercast.alertrules.engines import names
from infercast.catalog import FORECAST_KV_CACHE_USAGE_RATIO, FORECAST_REQUESTS_PER_SECOND, KV_CACHE_USAGE_RATIO
from infercast.config import PredictorConfig, load_config
from infercast.predictors.service import PredictorLoop, SourceSeries
from infercast.store.memory import MemoryStore
from tests.conftest import REPO

T0 = 1_800_000_000.0
N = names()


class Recording(MemoryStore):
    """A memory store that notes every metric a tick asks for."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[str] = []

    def query_range(self, metric, matchers, start, end, step):
        self.asked.append(metric)
        return super().query_range(metric, matchers, start, end, step)


def _cfg() -> PredictorConfig:
    return PredictorConfig(history_seconds=1800.0, step_seconds=15.0, min_history_points=20)


def _loop(**kw) -> PredictorLoop:
    return PredictorLoop(_cfg(), trigger=0.75, rps_model="last_value", kv_model="last_value", **kw)


def _engines(store: MemoryStore, start: float, end: float, *, rules: bool = True) -> None:
    """Two vLLM engines of v4-main at 0.30 and 0.70 KV usage, 40 requests per second in all: the per-engine rule
    always, the per-(pool, version) rules when `rules`."""
    pool = {"pool": "v4-main", "version": "v4"}
    for t in np.arange(start, end, 15.0):
        for engine, kv in (("0", 0.3), ("1", 0.7)):
            store.write(N["kv_usage"], {**pool, "instance": "10.0.0.11:8000", "engine": engine}, t, kv)
        if rules:
            store.write(N["kv_usage_max"], pool, t, 0.7)
            store.write(N["kv_usage_avg"], pool, t, 0.5)
        store.write(N["requests_pool_rate"], pool, t, 40.0)
        # the exporter's copy, if one still ran: never read in engines mode
        store.write(KV_CACHE_USAGE_RATIO, {**pool, "instance": "x"}, t, 0.99)


def _forecasts(samples, name):
    return {
        (s.label_dict["pool"], s.label_dict.get("aggregate", "")): s.value
        for s in samples
        if s.name == name and s.label_dict.get("band") == "point"
    }


def test_the_fleet_files_metrics_source_picks_the_engine_rules():
    cfg = load_config(REPO / "examples" / "flash-sale.yaml")
    assert PredictorLoop.from_config(cfg, load_lstm=False, rps_model="last_value").inputs == SourceSeries.of("exporter")
    engines = cfg.model_copy(update={"metrics": cfg.metrics.model_copy(update={"source": "engines"})})
    loop = PredictorLoop.from_config(engines, load_lstm=False, rps_model="last_value")
    assert loop.inputs.kv_rules == {"max": N["kv_usage_max"], "mean": N["kv_usage_avg"]}
    assert loop.inputs.kv == N["kv_usage"]
    assert loop.inputs.rps == (N["requests_pool_rate"], "sum")


def test_engines_mode_reads_the_engine_rules_and_forecasts_them():
    store = Recording()
    _engines(store, T0 - 1800, T0 + 1)
    out = _loop(metrics_source="engines").tick(T0, store)
    assert KV_CACHE_USAGE_RATIO not in store.asked, "the exporter's series is never read"
    assert set(store.asked) <= {N["kv_usage_max"], N["kv_usage_avg"], N["requests_pool_rate"]}
    kv = _forecasts(out, FORECAST_KV_CACHE_USAGE_RATIO)
    assert kv[("v4-main", "max")] == 0.7 and kv[("v4-main", "mean")] == 0.5  # last value of each rule
    assert _forecasts(out, FORECAST_REQUESTS_PER_SECOND)[("v4-main", "")] == 40.0  # the engines' rate as it is


def test_without_the_pool_rules_the_per_engine_rule_is_combined_here():
    store = Recording()
    _engines(store, T0 - 1800, T0 + 1, rules=False)
    out = _loop(metrics_source="engines").tick(T0, store)
    assert N["kv_usage"] in store.asked and KV_CACHE_USAGE_RATIO not in store.asked
    kv = _forecasts(out, FORECAST_KV_CACHE_USAGE_RATIO)
    assert kv[("v4-main", "max")] == 0.7  # the fuller engine
    assert kv[("v4-main", "mean")] == 0.5  # the mean of 0.3 and 0.7


def test_exporter_mode_is_unchanged():
    store = Recording()
    _engines(store, T0 - 1800, T0 + 1)
    out = _loop().tick(T0, store)
    assert KV_CACHE_USAGE_RATIO in store.asked
    assert not set(store.asked) & set(N.values()), "no engine rule is read in the default mode"
    assert _forecasts(out, FORECAST_KV_CACHE_USAGE_RATIO)[("v4-main", "max")] == 0.99  # the exporter's series
