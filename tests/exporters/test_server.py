"""The exporter end to end over loopback HTTP: every source, bad targets, staleness, the ingest endpoint."""

from __future__ import annotations

import logging
import shutil
import subprocess
import time

import pytest
import requests
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from infercast.exporters.server import Exporter, ExporterServer, build_sources
from infercast.simulator.twin.source import TwinSource
from tests.exporters.conftest import fleet, good_targets
from tests.exporters.fakes import FakeFleet, FakeNode, Route, payload


def render(exporter: Exporter) -> str:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(exporter)
    return generate_latest(reg).decode()


def samples(text: str) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def get(text_or_map, name, **labels):
    m = samples(text_or_map) if isinstance(text_or_map, str) else text_or_map
    found = [v for (n, lab), v in m.items() if n == name and all(dict(lab).get(k) == x for k, x in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def fake_twin(config):
    nodes = [
        FakeNode("v4-main-0", "v4-main", "v4", payload("twin-node.prom")),
        FakeNode("v4-main-1", "v4-main", "v4", payload("twin-node.prom"), up=False),  # OOM: renders nothing
    ]
    fleet_ = FakeFleet(nodes)
    fleet_.recorder.record_request("v4-main", "v4", "urgent", "ok", 90)
    fleet_.recorder.record_request("v4-main", "v4", "urgent", "timeout", 10)
    fleet_.recorder.record_degradation("v4", "v3.5", "oom", 4)
    return TwinSource(config, name="twin", fleet=fleet_)


def test_every_source_feeds_the_catalog(fixture_server):
    config = fleet([*good_targets(fixture_server), {"name": "twin", "kind": "twin"}])
    twin = fake_twin(config)
    exp = Exporter(config, build_sources(config, twin=twin))
    exp.scrape()
    twin.fleet.advance(30)  # windowed ratios and rates need two scrapes some time apart
    twin.fleet.recorder.record_request("v4-main", "v4", "urgent", "ok", 90)
    twin.fleet.recorder.record_request("v4-main", "v4", "urgent", "timeout", 10)
    exp.scrape()
    m = samples(render(exp))
    for t in ("vllm-a", "vllm-b", "sglang-a", "tgi-a", "trt-a", "dcgm-a", "twin", "v4-main-0"):
        assert get(m, "infercast_target_up", target=t) == 1, t
    assert get(m, "infercast_target_up", target="v4-main-1", kind="twin") == 0  # the OOM'd twin node
    assert get(m, "infercast_kv_cache_usage_ratio", instance="vllm-a/1", version="v4") == 0.9688
    assert get(m, "infercast_batch_saturation_ratio", instance="vllm-a/0") == 0.5  # 128 / configured 256
    assert get(m, "infercast_kv_cache_usage_ratio", instance="trt-a", version="v3.5") == 0.383
    assert get(m, "infercast_kv_cache_fragmentation_ratio", instance="v4-main-0") == 0.22  # twin extension
    assert get(m, "infercast_gpu_temperature_celsius", node="gpu-node-17", gpu="0") == 64
    assert get(m, "infercast_router_requests_total", pool="v4-main", outcome="timeout", priority="urgent") == 20
    assert get(m, "infercast_degradations_total", reason="oom") == 4
    assert get(m, "infercast_target_scrape_duration_seconds", target="vllm-a") < 0.5
    # derived scores exist per pool; health dimensions only where inputs exist
    assert 0 <= get(m, "infercast_avalanche_risk_score", pool="v4-main") <= 100
    assert 0 <= get(m, "infercast_health_score", pool="v4-main", version="v4") <= 100
    dims = {dict(lab)["dimension"]: v for (n, lab), v in m.items() if n == "infercast_health_dimension_score"}
    assert {"kv_usage", "fragmentation", "staleness", "gpu_temperature", "latency_slo"} <= set(dims)
    v4 = {
        dict(lab)["dimension"]: v
        for (n, lab), v in m.items()
        if n == "infercast_health_dimension_score" and dict(lab)["version"] == "v4"
    }
    assert v4["latency_slo"] == 0.0  # 10% of urgent requests timed out in the window: well past the 5% budget
    assert v4["staleness"] < 100  # one twin node of v4-main is down
    # fragmentation for a real engine: absent, never a made-up zero
    assert not [
        1 for (n, lab) in m if n == "infercast_kv_cache_fragmentation_ratio" and dict(lab)["instance"] == "vllm-a/0"
    ]
    exp.close()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian package prometheus) not installed")
def test_promtool_check_metrics_accepts_the_exposition(fixture_server):
    config = fleet([*good_targets(fixture_server), {"name": "twin", "kind": "twin"}])
    twin = TwinSource(config)  # the real in-process twin of the seed's fleet, beside every captured payload
    twin.advance(30)
    exp = Exporter(config, build_sources(config, twin=twin))
    exp.scrape()
    text = render(exp)
    exp.close()
    r = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "infercast_kv_cache_usage_ratio" in text and 'instance="v4-main-0"' in text


BAD = {
    "/dead": None,  # no route: replaced by a closed port below
    "/slow": Route(payload("vllm.prom"), delay=3.0),
    "/dribble": Route(payload("vllm-chat-v3.5.prom"), dribble=0.02),
    "/redirect": Route("", status=302, location="http://example.com/metrics"),
    "/huge": Route(huge_bytes=5_000_000),
    "/html": Route("<html><body>502 Bad Gateway</body></html>"),
    "/nan": Route(payload("vllm.prom").replace("0.9312", "NaN")),
    "/negative": Route(payload("vllm.prom").replace(" 1870.0", " -1870.0")),
    "/dup": Route(
        payload("vllm-chat-v3.5.prom") + 'vllm:num_requests_running{engine="0",model_name="chat-v3.5"} 3.0\n'
    ),
    "/malformed": Route(
        payload("vllm.prom").replace('vllm:num_requests_running{engine="0"', "vllm:num_requests_running{engine=0")
    ),
    "/500": Route("oops", status=500),
    "/empty": Route(""),
}
#: pages with one bad family: since issue 24 item 6 that family is dropped and counted, and the target stays up
LOCAL = {
    "/nan": "vllm:kv_cache_usage_perc",
    "/negative": "vllm:num_preemptions_total",
    "/dup": "vllm:num_requests_running",
    "/malformed": "vllm:num_requests_running",
}


def test_bad_targets_end_in_up_0_and_never_stall_the_cycle(fixture_server, caplog):
    from infercast.servers import free_port

    for path, route in BAD.items():
        if route is not None:
            fixture_server.routes[path] = route
    dead_url = f"http://127.0.0.1:{free_port()}/metrics"
    targets = [{"name": "good", "kind": "vllm", "url": fixture_server.url("/vllm")}]
    targets += [
        {"name": p.strip("/"), "kind": "vllm", "url": dead_url if p == "/dead" else fixture_server.url(p)} for p in BAD
    ]
    config = fleet(targets, max_body_bytes=1_000_000, scrape_timeout_seconds=1.0)
    exp = Exporter(config, build_sources(config))
    caplog.set_level(logging.WARNING, logger="infercast.exporters.server")
    t0 = time.monotonic()
    exp.scrape()
    took = time.monotonic() - t0
    m = samples(render(exp))
    assert get(m, "infercast_target_up", target="good") == 1
    for p in BAD:
        if p in LOCAL:
            assert get(m, "infercast_target_up", target=p.strip("/")) == 1, p
            assert get(m, "infercast_target_parse_errors_total", target=p.strip("/"), family=LOCAL[p]) == 1, p
        else:
            assert get(m, "infercast_target_up", target=p.strip("/")) == 0, p
    assert took <= 1.0 * 1.1 + 0.3  # the per-target timeout + 10% (plus scheduling slack on a loaded machine)
    reasons = {r.getMessage().split(" ")[1]: r.getMessage() for r in caplog.records}
    assert "redirect" in reasons["redirect"] and "not followed" in reasons["redirect"]
    assert "byte limit" in reasons["huge"]
    assert "timed out" in reasons["slow"] and "timed out" in reasons["dribble"]
    assert "NaN" in reasons["nan"] and "duplicate series" in reasons["dup"] and "dropped" in reasons["dup"]
    assert "connection failed" in reasons["dead"] and "HTTP 500" in reasons["500"]
    assert "no vLLM families" in reasons["empty"]
    # the good target's series are all there
    assert get(m, "infercast_kv_cache_usage_ratio", instance="good/0") == 0.9312
    # a second cycle: the same reasons are not logged again, and the slow target is not hammered
    caplog.clear()
    exp.scrape()
    assert [r.getMessage() for r in caplog.records if "is down" in r.getMessage()] == []
    assert fixture_server.hits.get("/slow", 0) <= 2
    exp.close()


def test_last_good_reading_is_kept_for_the_staleness_window(fixture_server):
    clock = [1000.0]
    config = fleet([{"name": "a", "kind": "vllm", "url": fixture_server.url("/vllm")}], staleness_seconds=30)
    exp = Exporter(config, build_sources(config), clock=lambda: clock[0])
    exp.scrape()
    fixture_server.routes["/vllm"] = Route("garbage here")
    clock[0] += 20
    exp.scrape()
    m = samples(render(exp))
    assert get(m, "infercast_target_up", target="a") == 0
    assert get(m, "infercast_kv_cache_usage_ratio", instance="a/0") == 0.9312  # still shown: 20 s < 30 s
    clock[0] += 20
    exp.scrape()
    m = samples(render(exp))
    assert not [k for k in m if k[0] == "infercast_kv_cache_usage_ratio"]  # stale: gone, not frozen
    fixture_server.routes["/vllm"] = Route(payload("vllm.prom"))
    exp.scrape()
    assert get(render(exp), "infercast_target_up", target="a") == 1
    exp.close()


def test_http_server_metrics_and_router_ingest(fixture_server):
    config = fleet([{"name": "a", "kind": "vllm", "url": fixture_server.url("/vllm")}])
    srv = ExporterServer(Exporter(config, build_sources(config)), port=0, min_interval=0.0).start()
    base = f"http://127.0.0.1:{srv.port}"
    try:
        body = {
            "requests": [{"pool": "v4-main", "version": "v4", "priority": "low", "outcome": "shed", "n": 7}],
            "degradations": [{"from_version": "v4", "to_version": "v3.5", "reason": "memory_pressure", "n": 2}],
        }
        r = requests.post(base + "/ingest/router", json=body, timeout=5)
        assert r.status_code == 200 and r.json() == {"applied": 2}
        bad = {"requests": [{"pool": "p", "version": "v", "priority": "vip", "outcome": "ok"}]}
        r = requests.post(base + "/ingest/router", json=bad, timeout=5)
        assert r.status_code == 400 and "'vip'" in r.text
        assert requests.post(base + "/ingest/router", data=b"{not json", timeout=5).status_code == 400
        text = requests.get(base + "/metrics", timeout=5).text
        assert get(text, "infercast_router_requests_total", pool="v4-main", outcome="shed", priority="low") == 7
        assert get(text, "infercast_degradations_total", reason="memory_pressure") == 2
        assert get(text, "infercast_target_up", target="a") == 1
        assert requests.get(base + "/nope", timeout=5).status_code == 404
    finally:
        srv.close()


def test_a_counter_reset_is_not_an_error(fixture_server, caplog):
    # an engine restart: counters fall back near 0; the target stays up, no ratio or rate goes negative
    config = fleet([{"name": "a", "kind": "vllm", "url": fixture_server.url("/vllm35")}])
    exp = Exporter(config, build_sources(config))
    exp.scrape()
    time.sleep(0.05)
    restarted = (
        payload("vllm-chat-v3.5.prom")
        .replace("7.04876486e+08", "1000.0")
        .replace("3.64804864e+08", "400.0")
        .replace(" 16.0\n", " 0.0\n")
    )
    fixture_server.routes["/vllm35"] = Route(restarted)
    caplog.set_level(logging.INFO, logger="infercast.exporters.server")
    exp.scrape()
    m = samples(render(exp))
    assert get(m, "infercast_target_up", target="a") == 1
    assert get(m, "infercast_kv_block_allocation_failures_total", instance="a") == 0
    assert not [k for k in m if k[0] == "infercast_kv_cache_hit_ratio"]  # window restarted: absent, not negative
    assert any("counters went down" in r.getMessage() for r in caplog.records)
    time.sleep(0.05)
    fixture_server.routes["/vllm35"] = Route(
        restarted.replace(" 1000.0\n", " 2000.0\n").replace(" 400.0\n", " 900.0\n")
    )
    exp.scrape()
    assert get(render(exp), "infercast_kv_cache_hit_ratio", instance="a") == 0.5  # (900-400)/(2000-1000)
    exp.close()
