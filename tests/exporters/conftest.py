"""Fixtures for the exporter tests: fleet files pointing at loopback fixture servers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from infercast.config import FleetConfig, parse_config
from tests.exporters.fakes import FixtureServer, Route, payload

REPO = Path(__file__).resolve().parents[2]


def fleet(targets: list[dict], **exporter) -> FleetConfig:
    """The seed's fleet file with other targets and exporter settings."""
    data = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    data["targets"] = targets
    # a loopback fixture answers in milliseconds, but with two copies of the suite on 2 cores a 0.5 s timeout
    # downed a healthy target (test_scrape_faults); tests of slow targets set their own, shorter than the delay
    data["exporter"] = {"scrape_timeout_seconds": 3.0, "staleness_seconds": 60, **exporter}
    return parse_config(data)


GOOD_ROUTES = {
    "/vllm": Route(payload("vllm.prom")),
    "/vllm35": Route(payload("vllm-chat-v3.5.prom")),
    "/sglang": Route(payload("sglang.prom")),
    "/tgi": Route(payload("tgi.prom")),
    "/trt": Route(payload("tensorrt-llm-triton.prom")),
    "/dcgm": Route(payload("dcgm-exporter.prom")),
}


def good_targets(srv: FixtureServer) -> list[dict]:
    return [
        {"name": "vllm-a", "kind": "vllm", "url": srv.url("/vllm"), "max_batch": 256},
        {"name": "vllm-b", "kind": "vllm", "url": srv.url("/vllm35")},
        {"name": "sglang-a", "kind": "sglang", "url": srv.url("/sglang")},
        {"name": "tgi-a", "kind": "tgi", "url": srv.url("/tgi"), "pool": "v4-main", "version": "v4", "max_batch": 256},
        {"name": "trt-a", "kind": "trtllm", "url": srv.url("/trt")},
        {"name": "dcgm-a", "kind": "dcgm", "url": srv.url("/dcgm"), "pool": "v4-main"},
    ]


@pytest.fixture
def fixture_server():
    srv = FixtureServer(dict(GOOD_ROUTES))
    yield srv
    srv.close()
