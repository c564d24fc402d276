"""A real Prometheus scrapes the exporter (serving the fixture payloads over loopback HTTP and an in-process twin)
and the catalog metrics come back through its HTTP API."""

from __future__ import annotations

import time

import pytest
import requests

from infercast.exporters.server import Exporter, ExporterServer, build_sources
from infercast.servers import ServerUnavailable, prometheus_config, start_prometheus
from infercast.simulator.twin.source import TwinSource
from tests.exporters.conftest import fleet, good_targets

pytestmark = [pytest.mark.servers, pytest.mark.slow]


def query(prom_url: str, q: str) -> list[dict]:
    r = requests.get(f"{prom_url}/api/v1/query", params={"query": q}, timeout=5)
    r.raise_for_status()
    return r.json()["data"]["result"]


def wait_for(prom_url: str, q: str, timeout: float = 30.0) -> list[dict]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        res = query(prom_url, q)
        if res:
            return res
        time.sleep(0.5)
    raise AssertionError(f"Prometheus never returned {q}")


def value(res: list[dict], **labels) -> float:
    found = [float(r["value"][1]) for r in res if all(r["metric"].get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (labels, res)
    return found[0]


def test_prometheus_reads_the_catalog_back(fixture_server):
    config = fleet([*good_targets(fixture_server), {"name": "twin", "kind": "twin"}], scrape_timeout_seconds=1.0)
    twin = TwinSource(config)  # the real in-process twin of the seed's fleet
    twin.advance(30)
    twin_node = next(n for n in twin.fleet.nodes if n.up and n.pool == "v4-main")
    srv = ExporterServer(Exporter(config, build_sources(config, twin=twin)), port=0, min_interval=0.0).start()
    try:
        prom = start_prometheus(prometheus_config({"infercast": f"127.0.0.1:{srv.port}"}, scrape_timeout="1s"))
    except ServerUnavailable as e:
        srv.close()
        pytest.skip(str(e))
    try:
        up = wait_for(prom.url, 'up{job="infercast"} == 1')
        assert up
        usage = wait_for(prom.url, "infercast_kv_cache_usage_ratio")
        assert value(usage, instance="vllm-a/0", pool="v4-main", version="v4") == 0.9312
        assert value(usage, instance="trt-a", version="v3.5") == 0.383
        assert value(usage, instance="sglang-a") == 0.8729
        assert 0 < value(usage, instance=twin_node.name, pool="v4-main", version="v4") <= 1  # a twin node
        frag = query(prom.url, "infercast_kv_cache_fragmentation_ratio")  # from the twin's engine extension
        assert 0 <= value(frag, instance=twin_node.name) <= 1
        sat = query(prom.url, "infercast_batch_saturation_ratio")
        assert value(sat, instance="tgi-a") == 118 / 256
        fails = query(prom.url, "infercast_kv_block_allocation_failures_total")
        assert value(fails, instance="sglang-a") == 2217
        gpu = query(prom.url, 'infercast_gpu_memory_used_bytes{node="gpu-node-17", gpu="0"}')
        assert value(gpu) == 74108 * 2**20
        assert value(gpu, pod="vllm-chat-v4-6f9c8d7b5-x2k4q")  # dcgm-exporter's pod label survives
        # PCIe counters integrated from dcgm-exporter's rates keep growing between scrapes
        pcie = 'infercast_gpu_pcie_bytes_total{node="gpu-node-17", gpu="0", direction="tx"}'
        first = value(wait_for(prom.url, pcie))
        # polled until a later scrape lands (not a fixed wait: a busy machine may scrape late; issue 25)
        deadline = time.monotonic() + 30
        while value(query(prom.url, pcie)) <= first and time.monotonic() < deadline:
            time.sleep(0.25)
        assert value(query(prom.url, pcie)) > first
        ups = query(prom.url, "infercast_target_up")
        assert value(ups, target=twin_node.name, kind="twin") == 1
        assert value(ups, target="twin", kind="twin") == 1
        assert value(ups, target="dcgm-a", kind="dcgm") == 1
        routed = query(prom.url, 'infercast_router_requests_total{pool="v4-main", outcome="ok"}')
        assert sum(float(r["value"][1]) for r in routed) > 0  # the twin's router, through the router SDK
        assert 0 <= value(query(prom.url, 'infercast_avalanche_risk_score{pool="v4-main"}')) <= 100
        dims = query(prom.url, 'infercast_health_dimension_score{pool="v4-main", version="v4"}')
        assert {r["metric"]["dimension"] for r in dims} >= {"kv_usage", "fragmentation", "gpu_temperature"}
    finally:
        prom.close()
        srv.close()
