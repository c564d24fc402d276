"""Issue 38 item 2: no invented traffic.  A fleet with engines but no router used to get zero-valued
`infercast_router_requests_total` series from the exporter (the fleet file's label sets, preset at 0), and the
predictor then forecast 0 req/s for a busy fleet.  Now the router's counters appear once a router reports (a twin
target, or the first POST to /ingest/router), and the predictor names the traffic series it reads and says when
there is none instead of forecasting 0."""

from __future__ import annotations

import logging

import numpy as np
import requests
from prometheus_client.parser import text_string_to_metric_families

from infercast.catalog import FORECAST_REQUESTS_PER_SECOND, ROUTER_REQUESTS_TOTAL
from infercast.exporters.server import Exporter, ExporterServer, build_sources
from infercast.predictors.service import PredictorLoop
from infercast.store.memory import MemoryStore
from tests.exporters.conftest import fleet


def _router_series(text: str) -> list[dict]:
    return [
        s.labels for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == ROUTER_REQUESTS_TOTAL
    ]


def test_no_router_series_until_a_router_reports(fixture_server):
    config = fleet([{"name": "a", "kind": "vllm", "url": fixture_server.url("/vllm"), "pool": "v4-main"}])
    srv = ExporterServer(Exporter(config, build_sources(config)), port=0, min_interval=0.0).start()
    base = f"http://127.0.0.1:{srv.port}"
    try:
        text = requests.get(base + "/metrics", timeout=30).text
        assert "infercast_kv_cache_usage_ratio" in text  # the engines are read ...
        assert _router_series(text) == []  # ... and no router traffic is made up
        body = {"requests": [{"pool": "v4-main", "version": "v4", "priority": "low", "outcome": "ok", "n": 3}]}
        assert requests.post(base + "/ingest/router", json=body, timeout=30).status_code == 200
        series = _router_series(requests.get(base + "/metrics", timeout=30).text)
        # a router reports: the fleet file's label sets start at 0 beside its counts (rate() from the first scrape)
        assert len(series) == len(config.pools) * 3 * 6
    finally:
        srv.close()


def test_a_twin_fleet_still_starts_its_router_counters_at_zero():
    config = fleet([{"name": "twin", "kind": "twin"}])
    exp = Exporter(config, [])
    exp.scrape()
    assert exp.recorder.snapshot()["requests"]  # preset: the twin is a router
    exp.close()


def test_the_predictor_forecasts_no_traffic_from_no_router_and_says_so(fixture_server, caplog):
    """A busy fleet with no router: KV usage is forecast, traffic is not (never 0 req/s), and the log names the
    series it looked for and what to do."""
    config = fleet([{"name": "a", "kind": "vllm", "url": fixture_server.url("/vllm"), "pool": "v4-main"}])
    exp = Exporter(config, build_sources(config))
    store = MemoryStore()
    loop = PredictorLoop.from_config(config, load_lstm=False, kv_model="last_value", rps_model="last_value")
    t0 = 1_800_000_000.0
    out = []
    with caplog.at_level(logging.INFO, logger="infercast.predictors.service"):
        for now in t0 + 15.0 * np.arange(30):
            exp.scrape()
            for family in exp.collect():
                for s in family.samples:
                    if not s.name.endswith("_created"):
                        store.write(s.name, dict(s.labels), float(now), s.value)
            out = loop.tick(float(now), store)
    exp.close()
    assert any(s.name.startswith("infercast_forecast_kv") for s in out)
    assert [s for s in out if s.name == FORECAST_REQUESTS_PER_SECOND] == []
    said = [r.getMessage() for r in caplog.records if "traffic" in r.getMessage()]
    assert any(ROUTER_REQUESTS_TOTAL in m and "no series" in m for m in said), said
    assert sum("no series" in m for m in said) == 1  # once, not every tick
