"""Forecast headroom read from Prometheus' API: used by the risk when there, a logged fallback when not."""

from __future__ import annotations

import json
import logging

from infercast.exporters.forecasts import PrometheusForecasts
from infercast.servers import free_port
from tests.exporters.fakes import FixtureServer, Route


def api(result):
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})


def test_reads_the_upper_band_per_pool():
    srv = FixtureServer(
        {
            "/api/v1/query": Route(
                api(
                    [
                        {"metric": {"pool": "v3.5-fallback"}, "value": [1.0, "0.97"]},
                        {"metric": {"pool": "v4-main"}, "value": [1.0, "NaN"]},  # no usable forecast
                    ]
                )
            )
        }
    )
    try:
        f = PrometheusForecasts(srv.url(""), refresh_seconds=60)
        assert f() == {"v3.5-fallback": 0.97}
        assert f() == {"v3.5-fallback": 0.97}
        assert srv.hits == {next(iter(srv.hits)): 1}  # cached for refresh_seconds
    finally:
        srv.close()


def test_unavailable_prometheus_falls_back_and_logs_once(caplog):
    caplog.set_level(logging.WARNING, logger="infercast.exporters.forecasts")
    f = PrometheusForecasts(f"http://127.0.0.1:{free_port()}", refresh_seconds=0)
    assert f() is None and f() is None
    assert len([r for r in caplog.records if "unavailable" in r.getMessage()]) == 1
