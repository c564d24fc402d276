"""The metric catalog: the only place infercast spells a metric name.

Exporters emit these names, alert rules and dashboards query them, predictors read and publish them, and the
actuator reads them.  Change a name here and every part follows; `tests/test_catalog.py` checks that rules,
dashboards and code use no name that is not in this table.

Pure: data only, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    GAUGE = "gauge"
    COUNTER = "counter"
    HISTOGRAM = "histogram"
    INFO = "info"


@dataclass(frozen=True)
class MetricSpec:
    """One metric family: its exposed name, type, unit, labels and help text."""

    name: str
    kind: Kind
    unit: str
    labels: tuple[str, ...]
    help: str
    #: allowed values for enum-like labels (documentation and validation)
    enums: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def enum(self, label: str) -> tuple[str, ...]:
        for name, values in self.enums:
            if name == label:
                return values
        raise KeyError(f"{self.name} has no enumerated label {label!r}")


# Label sets kept small and fixed (see STYLE.md "Names").
SERVING = ("pool", "version", "instance")
GPU = ("node", "gpu", "uuid")
FORECAST = ("pool", "version", "model", "horizon", "ml_forecast")
#: KV forecasts are made of two series per pool and version: the mean over its instances and the fullest instance
#: (`aggregate="max"`: what breaks first; the predictive alert and the actuator read it).
KV_FORECAST = (*FORECAST, "aggregate")

DEGRADATION_REASONS = (
    "timeout",
    "oom",
    "breaker_open",
    "memory_pressure",
    "context_too_long",
    "health_check",
    "manual",
)
ROUTER_OUTCOMES = ("ok", "error", "timeout", "rejected", "shed", "retried")
PRIORITIES = ("urgent", "normal", "low")
ML_FORECAST = ("yhat", "yhat_lower", "yhat_upper")
ACTION_OUTCOMES = ("applied", "advisory", "refused", "rolled_back", "failed")
#: why the actuator decided an action (a short code; the words go to the audit trail)
ACTION_REASONS = ("forecast", "live_metrics", "alert", "relax", "rollback", "manual", "other")
VERDICTS = ("verified", "rolled_back", "no_effect")
#: why the actuator froze (decides nothing): its inputs are stale, not finite or negative, or a source is down
FREEZE_REASONS = ("stale_inputs", "bad_value", "forecaster_down", "store_down", "backend_down", "other")
#: what an `infercast_actuator_breaker_threshold` series holds: a pool's latency breaker (seconds) or, with
#: pool="fleet", an admission limit (memory ratio, context tokens, queue seconds)
BREAKER_KINDS = ("latency", "memory", "context_tokens", "normal_queue", "low_queue")
ACTUATOR_LOOPS = ("fast", "predictive", "alert")
TICK_OUTCOMES = ("ok", "error", "missed")
WEBHOOK_OUTCOMES = ("accepted", "duplicate", "dropped")
TARGET_KINDS = ("vllm", "sglang", "tgi", "trtllm", "dcgm", "nvml", "router", "twin")
HEALTH_DIMENSIONS = (
    "kv_usage",
    "fragmentation",
    "allocation_failures",
    "batch_saturation",
    "queue_depth",
    "latency_slo",
    "error_rate",
    "degradation_rate",
    "gpu_temperature",
    "gpu_errors",
    "staleness",
)
KV_AGGREGATES = ("mean", "max")
FORECAST_SKIP_REASONS = ("stale", "too_short", "gap", "nan", "source_down", "model_error")


def _g(name: str, unit: str, labels: tuple[str, ...], help: str, **kw) -> MetricSpec:
    return MetricSpec(name, Kind.GAUGE, unit, labels, help, **kw)


def _c(name: str, unit: str, labels: tuple[str, ...], help: str, **kw) -> MetricSpec:
    return MetricSpec(name, Kind.COUNTER, unit, labels, help, **kw)


CATALOG: tuple[MetricSpec, ...] = (
    # --- serving engines, per model version -------------------------------------------------------------
    _g(
        "infercast_kv_cache_usage_ratio",
        "ratio",
        SERVING,
        "KV-cache slots (or blocks) in use / total.",
    ),
    _g(
        "infercast_kv_cache_fragmentation_ratio",
        "ratio",
        SERVING,
        "Allocated KV capacity that holds no token / allocated KV capacity.",
    ),
    _c(
        "infercast_kv_block_allocation_failures_total",
        "",
        SERVING,
        "Times a KV block could not be allocated (preemption or rejection).",
    ),
    _g(
        "infercast_kv_cache_hit_ratio",
        "ratio",
        SERVING,
        "Prefix-cache hits / queries over the last window.",
    ),
    _g(
        "infercast_batch_saturation_ratio",
        "ratio",
        SERVING,
        "Running requests / maximum batch size.",
    ),
    _g(
        "infercast_requests_running",
        "",
        SERVING,
        "Requests in model execution batches, as the engine reports.",
    ),
    _g("infercast_requests_waiting", "", SERVING, "Requests waiting to be scheduled, as the engine reports."),
    _g(
        "infercast_memory_efficiency_ratio",
        "ratio",
        SERVING,
        "Memory holding live tokens and weights / memory allocated.",
    ),
    # --- router -------------------------------------------------------------------------------------------
    _c(
        "infercast_router_requests_total",
        "",
        ("pool", "version", "priority", "outcome"),
        "Requests the router handled.",
        enums=(("priority", PRIORITIES), ("outcome", ROUTER_OUTCOMES)),
    ),
    _c(
        "infercast_degradations_total",
        "",
        ("from_version", "to_version", "reason"),
        "Degradation decisions of the router.",
        enums=(("reason", DEGRADATION_REASONS),),
    ),
    # --- derived fleet scores -----------------------------------------------------------------------------
    _g(
        "infercast_avalanche_risk_score",
        "score",
        ("pool",),
        "0-100 risk that a failure in this pool cascades (headroom of its failover targets included).",
    ),
    _g("infercast_health_score", "score", ("pool", "version"), "0-100 health, composed of the dimensions."),
    _g(
        "infercast_health_dimension_score",
        "score",
        ("pool", "version", "dimension"),
        "0-100 score of one health dimension.",
        enums=(("dimension", HEALTH_DIMENSIONS),),
    ),
    # --- GPUs (NVML or DCGM) --------------------------------------------------------------------------------
    _g("infercast_gpu_memory_used_bytes", "bytes", GPU, "GPU framebuffer memory in use."),
    _g("infercast_gpu_memory_total_bytes", "bytes", GPU, "GPU framebuffer memory in total."),
    _g("infercast_gpu_utilization_ratio", "ratio", GPU, "Fraction of time a kernel was running on the GPU."),
    _g("infercast_gpu_sm_occupancy_ratio", "ratio", GPU, "Warps resident on the SMs / the maximum."),
    _g("infercast_gpu_dram_active_ratio", "ratio", GPU, "Fraction of cycles the HBM interface was busy."),
    _c(
        "infercast_gpu_pcie_bytes_total",
        "bytes",
        (*GPU, "direction"),
        "PCIe traffic.",
        enums=(("direction", ("tx", "rx")),),
    ),
    _g("infercast_gpu_temperature_celsius", "celsius", GPU, "GPU core temperature."),
    _g("infercast_gpu_power_watts", "watts", GPU, "GPU power draw."),
    _c(
        "infercast_gpu_ecc_errors_total",
        "",
        (*GPU, "type"),
        "ECC memory errors.",
        enums=(("type", ("correctable", "uncorrectable")),),
    ),
    _c("infercast_gpu_xid_errors_total", "", (*GPU, "xid"), "XID errors reported by the driver."),
    # --- the exporter's view of its sources -------------------------------------------------------------
    _g(
        "infercast_target_up",
        "",
        ("target", "kind"),
        "1 if the last scrape of the target succeeded, else 0.",
        enums=(("kind", TARGET_KINDS),),
    ),
    _g(
        "infercast_target_scrape_duration_seconds",
        "seconds",
        ("target", "kind"),
        "Duration of the last scrape of the target.",
    ),
    # --- forecasts ------------------------------------------------------------------------------------------
    _g(
        "infercast_forecast_kv_cache_usage_ratio",
        "ratio",
        KV_FORECAST,
        "Forecast of KV-cache usage at the horizon: of the pool's mean (aggregate=mean) or its fullest instance (max).",
        enums=(("ml_forecast", ML_FORECAST), ("aggregate", KV_AGGREGATES)),
    ),
    _g(
        "infercast_forecast_requests_per_second",
        "",
        FORECAST,
        "Forecast of request rate at the horizon.",
        enums=(("ml_forecast", ML_FORECAST),),
    ),
    _g(
        "infercast_forecast_breach_eta_seconds",
        "seconds",
        ("pool", "version", "threshold", "aggregate"),
        "Seconds until the forecast upper band crosses the threshold (+Inf if not within the horizon), per aggregate.",
        enums=(("aggregate", KV_AGGREGATES),),
    ),
    _g(
        "infercast_forecast_last_success_timestamp_seconds",
        "seconds",
        ("model",),
        "Unix time of the last successful forecast round of the model.",
    ),
    _g(
        "infercast_forecast_skipped",
        "",
        ("pool", "version", "series", "reason"),
        "1 when no forecast is published for a series, labelled with why.",
        enums=(("reason", FORECAST_SKIP_REASONS),),
    ),
    # --- actuator -------------------------------------------------------------------------------------------
    _c(
        "infercast_actuator_actions_total",
        "",
        ("action", "pool", "outcome"),
        "Actions the actuator decided, by outcome.",
        enums=(("outcome", ACTION_OUTCOMES),),
    ),
    _g("infercast_actuator_pool_weight", "", ("pool",), "Router pool weight the actuator last set."),
    _g(
        "infercast_actuator_breaker_threshold",
        "",
        ("pool", "kind"),
        "Breaker threshold the actuator last set.",
        enums=(("kind", BREAKER_KINDS),),
    ),
    _g("infercast_actuator_leader", "", (), "1 if this actuator replica holds the leadership."),
    _g("infercast_actuator_active", "", (), "1 if the actuator acts, 0 in advisory mode."),
    _c(
        "infercast_actuator_decisions_total",
        "",
        ("action", "pool", "reason"),
        "Actions the actuator decided, by why (advisory ones included).",
        enums=(("reason", ACTION_REASONS),),
    ),
    _c(
        "infercast_actuator_verdicts_total",
        "",
        ("action", "pool", "verdict"),
        "Verdicts on applied actions after their verification window (rolled_back: undone).",
        enums=(("verdict", VERDICTS),),
    ),
    _g("infercast_actuator_frozen", "", (), "1 while the actuator is frozen (decides nothing), else 0."),
    _c(
        "infercast_actuator_freezes_total",
        "",
        ("reason",),
        "Times the actuator froze, by reason.",
        enums=(("reason", FREEZE_REASONS),),
    ),
    _g(
        "infercast_actuator_change_budget_used_ratio",
        "ratio",
        ("pool",),
        "Share of the hourly change budget of a pool (or fleet) used.",
    ),
    MetricSpec(
        "infercast_actuator_decision_latency_seconds",
        Kind.HISTOGRAM,
        "seconds",
        ("loop",),
        "Time from a decision to the backend's answer.",
        enums=(("loop", ACTUATOR_LOOPS),),
    ),
    _c(
        "infercast_actuator_ticks_total",
        "",
        ("loop", "outcome"),
        "Runs of the actuator's loops: ok, error (the tick raised) or missed (late or overrunning).",
        enums=(("loop", ACTUATOR_LOOPS), ("outcome", TICK_OUTCOMES)),
    ),
    _c(
        "infercast_actuator_webhook_alerts_total",
        "",
        ("outcome",),
        "Alerts received on the actuator's webhook: accepted, duplicate (same fingerprint and status) or dropped "
        "(inbox full).",
        enums=(("outcome", WEBHOOK_OUTCOMES),),
    ),
)

# --- the engine extension (text format v1) ----------------------------------------------------------------
# What real engines lack and the twin (or an instrumented engine) can expose beside its own /metrics.
# Labels follow vLLM: model_name and engine.  See docs/engine-extension.md.
ENGINE_EXTENSION_VERSION = "1"
ENGINE_EXTENSION: tuple[MetricSpec, ...] = (
    _g(
        "infercast_engine_extension_info",
        "",
        ("version",),
        "Always 1; the version label names the infercast engine-extension format.",
    ),
    _g(
        "infercast_engine_kv_cache_fragmentation_ratio",
        "ratio",
        ("model_name", "engine"),
        "Allocated KV capacity that holds no token / allocated KV capacity.",
    ),
    _g(
        "infercast_engine_memory_efficiency_ratio",
        "ratio",
        ("model_name", "engine"),
        "GPU memory holding live tokens and weights / GPU memory allocated.",
    ),
    _g(
        "infercast_engine_max_num_seqs",
        "",
        ("model_name", "engine"),
        "Configured maximum batch size (requests).",
    ),
    _c(
        "infercast_engine_kv_block_allocation_failures_total",
        "",
        ("model_name", "engine"),
        "KV block allocations that failed (preemptions and admission rejections for lack of blocks).",
    ),
    _g(
        "infercast_engine_gpu_memory_used_bytes",
        "bytes",
        ("model_name", "engine"),
        "GPU memory in use: weights, KV cache allocated, activations.",
    ),
    _g(
        "infercast_engine_gpu_memory_total_bytes",
        "bytes",
        ("model_name", "engine"),
        "GPU memory of the engine's devices in total.",
    ),
)

_BY_NAME = {m.name: m for m in (*CATALOG, *ENGINE_EXTENSION)}


def spec(name: str) -> MetricSpec:
    """The spec of a catalog metric; KeyError names the unknown metric."""
    try:
        return _BY_NAME[name]
    except KeyError:
        raise KeyError(f"{name!r} is not in the infercast metric catalog") from None


def names() -> frozenset[str]:
    return frozenset(_BY_NAME)


def exposed_names(m: MetricSpec) -> tuple[str, ...]:
    """Sample names a family exposes (counters end in _total already)."""
    if m.kind is Kind.HISTOGRAM:
        return (f"{m.name}_bucket", f"{m.name}_sum", f"{m.name}_count")
    return (m.name,)
