"""The exporter with `metrics.source: engines`: Prometheus scrapes the engines itself, so the exporter emits only
what the engines do not give, under the engine's own address.

Over loopback HTTP, with the captured payloads of tests/data/engines: what a user scraping both the engines and
the exporter sees on the exporter's /metrics.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from infercast.alertrules.sources import ENGINE_GIVEN
from infercast.catalog import (
    AVALANCHE_RISK_SCORE,
    BATCH_SATURATION_RATIO,
    HEALTH_SCORE,
    KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    KV_CACHE_USAGE_RATIO,
    REQUESTS_RUNNING,
    TARGET_UP,
)
from infercast.exporters.server import Exporter, build_sources, engine_labels
from infercast.tools.k8s.scrape import scrape_configs
from tests.exporters.conftest import fleet, good_targets
from tests.exporters.test_server import get, render, samples


def _scraped(config) -> dict:
    exp = Exporter(config, build_sources(config))
    try:
        exp.scrape()
        exp.scrape()
        return samples(render(exp))
    finally:
        exp.close()


def _with_source(source: str, targets: list[dict]):
    cfg = fleet(targets)
    return cfg.model_copy(update={"metrics": cfg.metrics.model_copy(update={"source": source})})


def test_engines_mode_leaves_out_what_the_engine_rules_record(fixture_server):
    targets = good_targets(fixture_server)
    full = _scraped(_with_source("exporter", targets))
    reduced = _scraped(_with_source("engines", targets))
    names_full = {n for n, _ in full}
    names_reduced = {n for n, _ in reduced}
    assert {KV_CACHE_USAGE_RATIO, BATCH_SATURATION_RATIO} <= names_full, "the default mode is unchanged"
    assert not names_reduced & ENGINE_GIVEN, "KV usage, batch saturation, running and waiting: the engine rules"
    assert REQUESTS_RUNNING in names_full and REQUESTS_RUNNING not in names_reduced
    # what the engines give no rule for, and the exporter's own, stay
    assert {KV_BLOCK_ALLOCATION_FAILURES_TOTAL, TARGET_UP} <= names_reduced
    # the derived scores are still computed from the KV usage the exporter reads (it just does not re-emit it)
    assert get(reduced, HEALTH_SCORE, pool="v4-main", version="v4") == get(full, HEALTH_SCORE, pool="v4-main")
    assert get(reduced, AVALANCHE_RISK_SCORE, pool="v4-main") == get(full, AVALANCHE_RISK_SCORE, pool="v4-main")


def test_engines_mode_keeps_the_engines_own_address_and_engine_label(fixture_server):
    targets = good_targets(fixture_server)
    cfg = _with_source("engines", targets)
    reduced = _scraped(cfg)
    vllm = urlsplit(next(t["url"] for t in targets if t["name"] == "vllm-a")).netloc
    # vLLM's two data-parallel engines: the address Prometheus' engine job gives them, and their `engine`
    # (the fixture serves every engine from one address, so vLLM's are told apart by their engine label)
    failures = {
        dict(lab)["engine"]: v
        for (n, lab), v in reduced.items()
        if n == KV_BLOCK_ALLOCATION_FAILURES_TOTAL and dict(lab)["instance"] == vllm and "engine" in dict(lab)
    }
    assert failures == {"0": 1870.0, "1": 2340.0}
    # the very address the generated scrape config scrapes that engine at: the rules join the two on it
    placed = [{**t, "pool": t.get("pool", "v4-main")} for t in targets if t["kind"] != "dcgm"]
    jobs = scrape_configs(_with_source("engines", placed))
    scraped = {a for job in jobs for sc in job["static_configs"] for a in sc["targets"]}
    assert vllm in scraped
    # a target with one engine gets no engine label (vLLM v3.5's)
    v35 = [
        dict(lab) for (n, lab) in reduced if n == KV_BLOCK_ALLOCATION_FAILURES_TOTAL and dict(lab)["version"] == "v3.5"
    ]
    assert v35 == [{"pool": "v3.5-fallback", "version": "v3.5", "instance": vllm}]


def test_engine_labels_touch_only_the_targets_own_series():
    url = "http://10.0.0.11:8000/metrics"
    assert engine_labels({"pool": "p", "instance": "vllm-a/1"}, "vllm-a", url) == {
        "pool": "p",
        "instance": "10.0.0.11:8000",
        "engine": "1",
    }
    assert engine_labels({"pool": "p", "instance": "vllm-ab"}, "vllm-a", url) == {"pool": "p", "instance": "vllm-ab"}
