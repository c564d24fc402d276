"""The catalog follows Prometheus naming, has one symbol per family and holds the metrics the parts rely on."""

from __future__ import annotations

import re

from infercast.catalog import CATALOG, ENGINE_EXTENSION, Kind, names, spec


def test_names_follow_conventions():
    for m in (*CATALOG, *ENGINE_EXTENSION):
        assert re.fullmatch(r"infercast_[a-z0-9_]+", m.name), m.name
        assert ":" not in m.name
        if m.kind is Kind.COUNTER:
            assert m.name.endswith("_total"), m.name
        if m.unit == "ratio":
            assert m.name.endswith("_ratio"), m.name
        if m.unit == "seconds":
            assert m.name.endswith("_seconds"), m.name
        if m.unit == "score":
            assert m.name.endswith("_score"), m.name
        assert m.help.strip(), m.name


def test_core_metrics_are_covered():
    design = {
        "infercast_kv_cache_usage_ratio",
        "infercast_kv_cache_fragmentation_ratio",
        "infercast_kv_block_allocation_failures_total",
        "infercast_kv_cache_hit_ratio",
        "infercast_batch_saturation_ratio",
        "infercast_requests_running",
        "infercast_requests_waiting",
        "infercast_memory_efficiency_ratio",
        "infercast_router_requests_total",
        "infercast_degradations_total",
        "infercast_avalanche_risk_score",
        "infercast_health_score",
        "infercast_health_dimension_score",
        "infercast_gpu_memory_used_bytes",
        "infercast_gpu_memory_total_bytes",
        "infercast_gpu_utilization_ratio",
        "infercast_gpu_sm_occupancy_ratio",
        "infercast_gpu_dram_active_ratio",
        "infercast_gpu_pcie_bytes_total",
        "infercast_gpu_temperature_celsius",
        "infercast_gpu_power_watts",
        "infercast_gpu_ecc_errors_total",
        "infercast_gpu_xid_errors_total",
        "infercast_target_up",
        "infercast_target_scrape_duration_seconds",
        "infercast_forecast_kv_cache_usage_ratio",
        "infercast_forecast_requests_per_second",
        "infercast_forecast_breach_eta_seconds",
        "infercast_forecast_last_success_timestamp_seconds",
        "infercast_actuator_actions_total",
        "infercast_actuator_pool_weight",
        "infercast_actuator_breaker_threshold",
        "infercast_actuator_leader",
        "infercast_actuator_active",
    }
    assert design <= names()


def test_degradation_reasons_are_the_designed_enum():
    assert spec("infercast_degradations_total").enum("reason") == (
        "timeout",
        "oom",
        "breaker_open",
        "memory_pressure",
        "context_too_long",
        "health_check",
        "manual",
    )


def test_unknown_name_is_named():
    try:
        spec("infercast_nope")
    except KeyError as e:
        assert "infercast_nope" in str(e)
    else:
        raise AssertionError("expected KeyError")


def test_one_symbol_per_family():
    import infercast.catalog as catalog

    assert sorted(catalog.SYMBOLS.values()) == sorted(names())
    for symbol, name in catalog.SYMBOLS.items():
        assert symbol == name.removeprefix("infercast_").upper()
        assert getattr(catalog, symbol) == spec(name).name
