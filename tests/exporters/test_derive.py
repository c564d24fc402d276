"""Avalanche risk and health scores: seed 000's cascade scores high, missing dimensions are excluded, not zero."""

from __future__ import annotations

import pytest

from infercast.config import load_config
from infercast.exporters.base import Sample
from infercast.exporters.derive import avalanche_risk, derive, health, health_score, ramp
from infercast.exporters.windows import RATE_PREFIX
from tests.exporters.conftest import REPO

CONFIG = load_config(REPO / "examples" / "flash-sale.yaml")


def serving(name, pool, version, instance, value):
    return Sample(name, {"pool": pool, "version": version, "instance": instance}, value)


def seed_000(v4_usage=0.98, v35_usage=0.5):
    """The 03:00 picture of seed 000: v4 nodes nearly full, the older v3.5 pool half full."""
    out = [serving("infercast_kv_cache_usage_ratio", "v4-main", "v4", f"v4-{i}", v4_usage) for i in range(3)]
    out += [serving("infercast_kv_cache_usage_ratio", "v3.5-fallback", "v3.5", f"v35-{i}", v35_usage) for i in range(2)]
    return out


def by(samples, name, **labels):
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def test_ramp():
    assert ramp(0.5, 0.75, 1.0) == 100 and ramp(1.2, 0.75, 1.0) == 0 and ramp(0.875, 0.75, 1.0) == 50


def test_seed_000_cascade_is_high_risk():
    out = derive(CONFIG, seed_000())
    v4 = by(out, "infercast_avalanche_risk_score", pool="v4-main")
    # own pressure 0.92 (usage 0.98 between trigger 0.75 and 1.0); five half-full v3.5 nodes at 56% of v4's
    # throughput absorb ~11% of twelve full v4 nodes' KV load -> ~89% of it cascades: risk ~82
    assert 80 < v4 < 95
    assert by(out, "infercast_avalanche_risk_score", pool="v3.5-fallback") == 0  # under the trigger: no pressure


def test_forecast_headroom_of_the_failover_pool_is_used():
    samples = seed_000(v4_usage=0.9, v35_usage=0.2)
    now = avalanche_risk(CONFIG, samples, health(CONFIG, samples))["v4-main"]
    # the forecast says v3.5 will be full in five minutes: its current headroom does not count
    ahead = avalanche_risk(CONFIG, samples, health(CONFIG, samples), forecast_usage={"v3.5-fallback": 1.0})["v4-main"]
    assert ahead > now
    assert ahead == pytest.approx(100 * (1 - ramp(0.9, 0.75, 1.0) / 100))  # C = 1: nothing can be absorbed


def test_a_large_failover_pool_absorbs_the_load():
    import yaml

    from infercast.config import parse_config

    data = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    data["pools"]["v3.5-fallback"]["nodes"] = 200
    data["versions"]["v3.5"]["peak_throughput_factor"] = 1.0
    big = parse_config(data)
    assert avalanche_risk(big, seed_000(v35_usage=0.1), health(big, seed_000(v35_usage=0.1)))["v4-main"] == 0


def test_missing_dimensions_are_excluded_not_zero():
    out = derive(CONFIG, seed_000(v4_usage=0.5))
    dims = {s.labels["dimension"] for s in out if s.name == "infercast_health_dimension_score"}
    assert dims == {"kv_usage"}  # no fragmentation, GPUs, router or targets in the input: absent
    assert by(out, "infercast_health_score", pool="v4-main", version="v4") == 100


def test_one_collapsed_dimension_pulls_the_score_down():
    d = {"kv_usage": 100.0, "fragmentation": 0.0, "queue_depth": 100.0, "staleness": 100.0}
    assert health_score(d) == pytest.approx((75 + 0) / 2)


def test_dimensions_from_every_input():
    L = {"pool": "v4-main", "version": "v4", "instance": "n1"}
    samples = [
        Sample("infercast_kv_cache_fragmentation_ratio", L, 0.20),  # halfway between green 0.15 and release 0.25
        Sample("infercast_batch_saturation_ratio", L, 0.9),
        Sample("infercast_requests_waiting", L, 5),
        Sample("infercast_requests_running", L, 100),
        Sample(RATE_PREFIX + "infercast_kv_block_allocation_failures_total", L, 0.5),  # 0.005 /s per request
        Sample(RATE_PREFIX + "infercast_router_requests_total", {**L, "priority": "urgent", "outcome": "ok"}, 98),
        Sample(RATE_PREFIX + "infercast_router_requests_total", {**L, "priority": "urgent", "outcome": "error"}, 2),
        Sample(
            RATE_PREFIX + "infercast_degradations_total",
            {"from_version": "v4", "to_version": "v3.5", "reason": "oom"},
            1,
        ),
        Sample("infercast_gpu_temperature_celsius", {"node": "g1", "gpu": "0", "uuid": "u"}, 80),
        Sample(
            RATE_PREFIX + "infercast_gpu_xid_errors_total", {"node": "g1", "gpu": "0", "uuid": "u", "xid": "79"}, 0.1
        ),
        Sample("_target_up", {"target": "a", "kind": "vllm", **L}, 1),
        Sample("_target_up", {"target": "b", "kind": "vllm", **L}, 0),
    ]
    d = health(CONFIG, samples, gpu_pools={("g1", "0"): "v4-main"})[("v4-main", "v4")]
    assert d["fragmentation"] == pytest.approx(50)
    assert d["batch_saturation"] == pytest.approx(50)  # 0.9 between gpu_utilization_breaker 0.8 and 1.0
    assert d["queue_depth"] == 100  # 5 waiting = thresholds.queue_saturated
    assert d["allocation_failures"] == pytest.approx(50)
    assert d["error_rate"] == pytest.approx(60)  # 2% errors of a 5% budget
    assert d["degradation_rate"] == pytest.approx(80) and d["latency_slo"] == 100
    assert d["gpu_temperature"] == pytest.approx(100 * (85 - 80) / 15)
    assert d["gpu_errors"] == 0
    assert d["staleness"] == 50


def test_fragmentation_on_an_idle_cache_is_not_cascade_pressure():
    def with_frag(usage):
        L = {"pool": "v4-main", "version": "v4", "instance": "n1"}
        s = [
            Sample("infercast_kv_cache_usage_ratio", L, usage),
            Sample("infercast_kv_cache_fragmentation_ratio", L, 0.3),
        ]
        return avalanche_risk(CONFIG, s, health(CONFIG, s))["v4-main"]

    idle, full = with_frag(0.15), with_frag(0.75)
    assert idle == pytest.approx(full * 0.15 / 0.75)  # same fragmentation, a fifth as full: a fifth of the pressure
    assert full > 50


def test_nodes_already_down_raise_the_risk():
    def risk(up_flags, usage=0.5):
        L = {"pool": "v4-main", "version": "v4"}
        s = [
            Sample("infercast_kv_cache_usage_ratio", {**L, "instance": f"n{i}"}, usage)
            for i, u in enumerate(up_flags)
            if u
        ]
        s += [Sample("_target_up", {"target": f"n{i}", "kind": "twin", **L}, float(u)) for i, u in enumerate(up_flags)]
        return avalanche_risk(CONFIG, s, health(CONFIG, s))["v4-main"]

    assert risk([1] * 8) == 0  # half full, all up: no pressure
    # (no v3.5 usage in the input: its headroom is unknown and counts as none, so C = 1)
    # two of eight down (OOM): a quarter of the pool gone is full pressure
    assert risk([1] * 6 + [0] * 2) == 100
    # one of eight down: survivors at 0.5 / (7/8) = 0.57, under the trigger; the down share gives pressure 0.5
    assert risk([1] * 7 + [0]) == pytest.approx(50)
