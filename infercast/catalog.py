"""The metric catalog: the only place infercast spells a metric name.

Each family has one module-level symbol (`KV_CACHE_USAGE_RATIO = "infercast_kv_cache_usage_ratio"`).  Exporters
emit these symbols, alert rules and dashboards query them, predictors read and publish them, and the actuator
reads them, so a rename is one edit here and a misspelt symbol fails at import.  `tests/test_catalog.py` checks
the names follow Prometheus' conventions and every symbol matches its family; `tests/test_no_metric_literals.py`
fails on an `infercast_` metric name spelt out in code outside this module and the tests.

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


# Label sets kept small and fixed: every label multiplies the series a family exposes.
SERVING = ("pool", "version", "instance")
GPU = ("node", "gpu", "uuid")
#: A forecast series names its `forecaster` (the pipeline that made it: `lstm_aci`, `kalman`, ...; not the served LLM)
#: and its `band` (`FORECAST_BANDS`: the central value and the band's edges).
FORECAST = ("pool", "version", "forecaster", "horizon", "band")
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
FORECAST_BANDS = ("point", "lower", "upper")
#: Deprecated in 0.1, removed in the next release: the forecast labels' former names, (new label, old label), and the
#: band's former values (Prophet's column names).  While `predictor.legacy_forecast_labels` is on, the predictor adds
#: them to the same series (no series doubled) so queries and alerts written against them keep matching.
LEGACY_FORECAST_LABELS = (("forecaster", "model"), ("band", "ml_forecast"))
LEGACY_BAND_VALUES = (("point", "yhat"), ("lower", "yhat_lower"), ("upper", "yhat_upper"))
_LEGACY_NOTE = (
    "Deprecated: until the next release the same series also carries model (= forecaster) and ml_forecast "
    "(= band: yhat, yhat_lower, yhat_upper) unless predictor.legacy_forecast_labels is false."
)
#: unknown: the backend's answer was lost and reading the target back could not tell (reconciled on later ticks)
ACTION_OUTCOMES = ("applied", "advisory", "refused", "rolled_back", "failed", "unknown")
#: why the actuator decided an action (a short code; the words go to the audit trail)
ACTION_REASONS = ("forecast", "live_metrics", "alert", "relax", "rollback", "manual", "other")
VERDICTS = ("verified", "rolled_back", "no_effect")
#: why the actuator froze (decides nothing): its inputs are stale, not finite or negative, or a source is down
FREEZE_REASONS = ("stale_inputs", "bad_value", "forecaster_down", "store_down", "backend_down", "other")
#: what an `infercast_actuator_breaker_threshold` series holds: a pool's latency breaker (seconds) or, with
#: pool="fleet", an admission limit (memory ratio, context tokens, queue seconds)
BREAKER_KINDS = ("latency", "memory", "context_tokens", "normal_queue", "low_queue")
#: what ran the control loop: its schedule (every `actuator.interval_seconds`) or an alert the webhook accepted
ACTUATOR_LOOPS = ("scheduled", "alert")
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


# --- one symbol per metric ------------------------------------------------------------------------------
# Every emitter, query, rule and dashboard imports these (`from infercast.catalog import KV_CACHE_USAGE_RATIO`):
# a rename is one edit here, and a misspelt symbol fails at import.  Each is the exposed family name.
KV_CACHE_USAGE_RATIO = "infercast_kv_cache_usage_ratio"
KV_CACHE_FRAGMENTATION_RATIO = "infercast_kv_cache_fragmentation_ratio"
KV_BLOCK_ALLOCATION_FAILURES_TOTAL = "infercast_kv_block_allocation_failures_total"
KV_CACHE_HIT_RATIO = "infercast_kv_cache_hit_ratio"
BATCH_SATURATION_RATIO = "infercast_batch_saturation_ratio"
REQUESTS_RUNNING = "infercast_requests_running"
REQUESTS_WAITING = "infercast_requests_waiting"
MEMORY_EFFICIENCY_RATIO = "infercast_memory_efficiency_ratio"
ROUTER_REQUESTS_TOTAL = "infercast_router_requests_total"
DEGRADATIONS_TOTAL = "infercast_degradations_total"
AVALANCHE_RISK_SCORE = "infercast_avalanche_risk_score"
HEALTH_SCORE = "infercast_health_score"
HEALTH_DIMENSION_SCORE = "infercast_health_dimension_score"
GPU_MEMORY_USED_BYTES = "infercast_gpu_memory_used_bytes"
GPU_MEMORY_TOTAL_BYTES = "infercast_gpu_memory_total_bytes"
GPU_UTILIZATION_RATIO = "infercast_gpu_utilization_ratio"
GPU_SM_OCCUPANCY_RATIO = "infercast_gpu_sm_occupancy_ratio"
GPU_DRAM_ACTIVE_RATIO = "infercast_gpu_dram_active_ratio"
GPU_PCIE_BYTES_TOTAL = "infercast_gpu_pcie_bytes_total"
GPU_TEMPERATURE_CELSIUS = "infercast_gpu_temperature_celsius"
GPU_POWER_WATTS = "infercast_gpu_power_watts"
GPU_ECC_ERRORS_TOTAL = "infercast_gpu_ecc_errors_total"
GPU_XID_ERRORS_TOTAL = "infercast_gpu_xid_errors_total"
TARGET_UP = "infercast_target_up"
TARGET_SCRAPE_DURATION_SECONDS = "infercast_target_scrape_duration_seconds"
TARGET_METRIC_MISSING = "infercast_target_metric_missing"
TARGET_PARSE_ERRORS_TOTAL = "infercast_target_parse_errors_total"
FORECAST_KV_CACHE_USAGE_RATIO = "infercast_forecast_kv_cache_usage_ratio"
FORECAST_REQUESTS_PER_SECOND = "infercast_forecast_requests_per_second"
FORECAST_BREACH_ETA_SECONDS = "infercast_forecast_breach_eta_seconds"
FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS = "infercast_forecast_last_success_timestamp_seconds"
FORECAST_SKIPPED = "infercast_forecast_skipped"
ACTUATOR_ACTIONS_TOTAL = "infercast_actuator_actions_total"
ACTUATOR_POOL_WEIGHT = "infercast_actuator_pool_weight"
ACTUATOR_BREAKER_THRESHOLD = "infercast_actuator_breaker_threshold"
ACTUATOR_LEADER = "infercast_actuator_leader"
ACTUATOR_ACTIVE = "infercast_actuator_active"
ACTUATOR_DECISIONS_TOTAL = "infercast_actuator_decisions_total"
ACTUATOR_VERDICTS_TOTAL = "infercast_actuator_verdicts_total"
ACTUATOR_FROZEN = "infercast_actuator_frozen"
ACTUATOR_FENCED = "infercast_actuator_fenced"
ACTUATOR_FREEZES_TOTAL = "infercast_actuator_freezes_total"
ACTUATOR_CHANGE_BUDGET_USED_RATIO = "infercast_actuator_change_budget_used_ratio"
ACTUATOR_DECISION_LATENCY_SECONDS = "infercast_actuator_decision_latency_seconds"
ACTUATOR_TICKS_TOTAL = "infercast_actuator_ticks_total"
ACTUATOR_WEBHOOK_ALERTS_TOTAL = "infercast_actuator_webhook_alerts_total"
ACTUATOR_AUDIT_FAILED = "infercast_actuator_audit_failed"
ACTUATOR_AUDIT_UNKNOWN = "infercast_actuator_audit_unknown"
ACTUATOR_AUDIT_UNRECORDED_TOTAL = "infercast_actuator_audit_unrecorded_total"
ENGINE_EXTENSION_INFO = "infercast_engine_extension_info"
ENGINE_KV_CACHE_FRAGMENTATION_RATIO = "infercast_engine_kv_cache_fragmentation_ratio"
ENGINE_MEMORY_EFFICIENCY_RATIO = "infercast_engine_memory_efficiency_ratio"
ENGINE_MAX_NUM_SEQS = "infercast_engine_max_num_seqs"
ENGINE_KV_BLOCK_ALLOCATION_FAILURES_TOTAL = "infercast_engine_kv_block_allocation_failures_total"
ENGINE_GPU_MEMORY_USED_BYTES = "infercast_engine_gpu_memory_used_bytes"
ENGINE_GPU_MEMORY_TOTAL_BYTES = "infercast_engine_gpu_memory_total_bytes"

# --- recorded series computed from the engines' own metrics (alertrules/engines.py) --------------------------------
# Named `level:metric:operations` (Prometheus' recording-rule convention, as kube-prometheus'
# `instance:node_memory_utilisation:ratio`).  The engines' series keep their own labels; `pool` and `version` are
# target labels set by the generated PodMonitors' relabelings or plain scrape configs (infercast/tools/k8s/scrape.py).
# `instance:` series are one per engine (a vLLM data-parallel engine, a Triton model), the same instances the
# exporter counts; `pool_version:` aggregate them per the fleet file's pool and version.  Not metric families of
# the catalog (no `infercast_` prefix): the rules make them, nothing exposes them.
#: KV-cache usage of one engine, 0-1 (vLLM kv_cache_usage_perc, SGLang token_usage, TGI tokens, Triton blocks)
REC_ENGINE_KV_USAGE = "instance:engine_kv_cache_usage:ratio"
#: running requests / maximum batch of one engine (Triton exports its maximum; the others' from the fleet file)
REC_ENGINE_BATCH_SATURATION = "instance:engine_batch_saturation:ratio"
#: requests an engine finished per second (5-minute rate)
REC_ENGINE_REQUESTS_RATE = "instance:engine_requests:rate5m"
#: requests one engine is running now (in its batch), as it reports them
REC_ENGINE_REQUESTS_RUNNING = "instance:engine_requests_running:count"
#: requests waiting in one engine's queue, as it reports them
REC_ENGINE_REQUESTS_WAITING = "instance:engine_requests_waiting:count"
#: a pool's configured maximum batch (a constant series per pool, from the fleet file)
REC_ENGINE_MAX_BATCH = "pool:engine_max_batch:config"
REC_ENGINE_KV_USAGE_AVG = "pool_version:engine_kv_cache_usage:avg"
#: the fullest engine of a pool and version: what breaks first
REC_ENGINE_KV_USAGE_MAX = "pool_version:engine_kv_cache_usage:max"
REC_ENGINE_BATCH_SATURATION_AVG = "pool_version:engine_batch_saturation:avg"
REC_ENGINE_BATCH_SATURATION_MAX = "pool_version:engine_batch_saturation:max"
#: requests per second (QPS) of a pool and version
REC_ENGINE_REQUESTS_POOL_RATE = "pool_version:engine_requests:rate5m"
#: a pool and version's share of the fleet's QPS
REC_ENGINE_REQUESTS_POOL_SHARE = "pool_version:engine_requests:share_rate5m"
#: a version's share of the fleet's QPS (every pool serving it)
REC_ENGINE_REQUESTS_VERSION_SHARE = "version:engine_requests:share_rate5m"
#: the fleet's mean KV-cache usage over every engine (recorded with the alert rules when `metrics.source` is
#: engines: alertrules/rules.py)
REC_FLEET_ENGINE_KV_USAGE = "fleet:engine_kv_cache_usage:avg"

# --- recorded SLO series (alertrules/slo.py): one name per window, the `slo` label says which SLI --------------------
#: the share of a pool and version's requests that missed the objective (availability: ended in error, timeout,
#: rejected or shed; latency: first token later than the pool's target) over the window in the suffix (`...rate1h`)
REC_SLO_ERROR_RATIO = "pool_version:slo_errors:ratio_rate"
#: that share over the pool's error budget (1 - objective): 1 spends the budget exactly as fast as it accrues
REC_SLO_BURN_RATE = "pool_version:slo_errors:burnrate"


def _g(name: str, unit: str, labels: tuple[str, ...], help: str, **kw) -> MetricSpec:
    return MetricSpec(name, Kind.GAUGE, unit, labels, help, **kw)


def _c(name: str, unit: str, labels: tuple[str, ...], help: str, **kw) -> MetricSpec:
    return MetricSpec(name, Kind.COUNTER, unit, labels, help, **kw)


CATALOG: tuple[MetricSpec, ...] = (
    # --- serving engines, per model version -------------------------------------------------------------
    _g(
        KV_CACHE_USAGE_RATIO,
        "ratio",
        SERVING,
        "KV-cache slots (or blocks) in use / total.",
    ),
    _g(
        KV_CACHE_FRAGMENTATION_RATIO,
        "ratio",
        SERVING,
        "Allocated KV capacity that holds no token / allocated KV capacity.",
    ),
    _c(
        KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
        "",
        SERVING,
        "Times a KV block could not be allocated (preemption or rejection).",
    ),
    _g(
        KV_CACHE_HIT_RATIO,
        "ratio",
        SERVING,
        "Prefix-cache hits / queries over the last window.",
    ),
    _g(
        BATCH_SATURATION_RATIO,
        "ratio",
        SERVING,
        "Running requests / maximum batch size.",
    ),
    _g(
        REQUESTS_RUNNING,
        "",
        SERVING,
        "Requests in model execution batches, as the engine reports.",
    ),
    _g(REQUESTS_WAITING, "", SERVING, "Requests waiting to be scheduled, as the engine reports."),
    _g(
        MEMORY_EFFICIENCY_RATIO,
        "ratio",
        SERVING,
        "Memory holding live tokens and weights / memory allocated.",
    ),
    # --- router -------------------------------------------------------------------------------------------
    _c(
        ROUTER_REQUESTS_TOTAL,
        "",
        ("pool", "version", "priority", "outcome"),
        "Requests the router handled.",
        enums=(("priority", PRIORITIES), ("outcome", ROUTER_OUTCOMES)),
    ),
    _c(
        DEGRADATIONS_TOTAL,
        "",
        ("from_version", "to_version", "reason"),
        "Degradation decisions of the router.",
        enums=(("reason", DEGRADATION_REASONS),),
    ),
    # --- derived fleet scores -----------------------------------------------------------------------------
    _g(
        AVALANCHE_RISK_SCORE,
        "score",
        ("pool",),
        "0-100 risk that a failure in this pool cascades (headroom of its failover targets included).",
    ),
    _g(HEALTH_SCORE, "score", ("pool", "version"), "0-100 health, composed of the dimensions."),
    _g(
        HEALTH_DIMENSION_SCORE,
        "score",
        ("pool", "version", "dimension"),
        "0-100 score of one health dimension.",
        enums=(("dimension", HEALTH_DIMENSIONS),),
    ),
    # --- GPUs (NVML or DCGM) --------------------------------------------------------------------------------
    _g(GPU_MEMORY_USED_BYTES, "bytes", GPU, "GPU framebuffer memory in use."),
    _g(GPU_MEMORY_TOTAL_BYTES, "bytes", GPU, "GPU framebuffer memory in total."),
    _g(GPU_UTILIZATION_RATIO, "ratio", GPU, "Fraction of time a kernel was running on the GPU."),
    _g(GPU_SM_OCCUPANCY_RATIO, "ratio", GPU, "Warps resident on the SMs / the maximum."),
    _g(GPU_DRAM_ACTIVE_RATIO, "ratio", GPU, "Fraction of cycles the HBM interface was busy."),
    _c(
        GPU_PCIE_BYTES_TOTAL,
        "bytes",
        (*GPU, "direction"),
        "PCIe traffic.",
        enums=(("direction", ("tx", "rx")),),
    ),
    _g(GPU_TEMPERATURE_CELSIUS, "celsius", GPU, "GPU core temperature."),
    _g(GPU_POWER_WATTS, "watts", GPU, "GPU power draw."),
    _c(
        GPU_ECC_ERRORS_TOTAL,
        "",
        (*GPU, "type"),
        "ECC memory errors.",
        enums=(("type", ("correctable", "uncorrectable")),),
    ),
    _c(GPU_XID_ERRORS_TOTAL, "", (*GPU, "xid"), "XID errors reported by the driver."),
    # --- the exporter's view of its sources -------------------------------------------------------------
    _g(
        TARGET_UP,
        "",
        ("target", "kind"),
        "1 if the last scrape of the target succeeded, else 0.",
        enums=(("kind", TARGET_KINDS),),
    ),
    _g(
        TARGET_SCRAPE_DURATION_SECONDS,
        "seconds",
        ("target", "kind"),
        "Duration of the last scrape of the target.",
    ),
    _g(
        TARGET_METRIC_MISSING,
        "",
        ("target", "metric"),
        "1 while a family the target's engine must expose (metric: its current name) is absent from its page "
        "(renamed by an upgrade, or not enabled): the series built from it stop; 0 when present.",
    ),
    _c(
        TARGET_PARSE_ERRORS_TOTAL,
        "",
        ("target", "family"),
        "Scrapes in which a family of the target's page was dropped as malformed or untrusted (the rest of the "
        "page was kept).",
    ),
    # --- forecasts ------------------------------------------------------------------------------------------
    _g(
        FORECAST_KV_CACHE_USAGE_RATIO,
        "ratio",
        KV_FORECAST,
        "Forecast of KV-cache usage at the horizon: of the pool's mean (aggregate=mean) or its fullest instance (max); "
        "band=point, lower or upper. " + _LEGACY_NOTE,
        enums=(("band", FORECAST_BANDS), ("aggregate", KV_AGGREGATES)),
    ),
    _g(
        FORECAST_REQUESTS_PER_SECOND,
        "",
        FORECAST,
        "Forecast of request rate at the horizon; band=point, lower or upper. " + _LEGACY_NOTE,
        enums=(("band", FORECAST_BANDS),),
    ),
    _g(
        FORECAST_BREACH_ETA_SECONDS,
        "seconds",
        ("pool", "version", "threshold", "aggregate"),
        "Seconds until the forecast upper band crosses the threshold (+Inf if not within the horizon), per aggregate.",
        enums=(("aggregate", KV_AGGREGATES),),
    ),
    _g(
        FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS,
        "seconds",
        ("forecaster",),
        "Unix time of the last successful forecast round of the forecaster. Deprecated: until the next release the "
        "same series also carries model (= forecaster) unless predictor.legacy_forecast_labels is false.",
    ),
    _g(
        FORECAST_SKIPPED,
        "",
        ("pool", "version", "series", "reason"),
        "1 when no forecast is published for a series, labelled with why.",
        enums=(("reason", FORECAST_SKIP_REASONS),),
    ),
    # --- actuator -------------------------------------------------------------------------------------------
    _c(
        ACTUATOR_ACTIONS_TOTAL,
        "",
        ("action", "pool", "outcome"),
        "Actions the actuator decided, by outcome.",
        enums=(("outcome", ACTION_OUTCOMES),),
    ),
    _g(ACTUATOR_POOL_WEIGHT, "", ("pool",), "Router pool weight the actuator last set."),
    _g(
        ACTUATOR_BREAKER_THRESHOLD,
        "",
        ("pool", "kind"),
        "Breaker threshold the actuator last set.",
        enums=(("kind", BREAKER_KINDS),),
    ),
    _g(ACTUATOR_LEADER, "", (), "1 if this actuator replica holds the leadership."),
    _g(ACTUATOR_ACTIVE, "", (), "1 if the actuator acts, 0 in advisory mode."),
    _c(
        ACTUATOR_DECISIONS_TOTAL,
        "",
        ("action", "pool", "reason"),
        "Actions the actuator decided, by why (advisory ones included).",
        enums=(("reason", ACTION_REASONS),),
    ),
    _c(
        ACTUATOR_VERDICTS_TOTAL,
        "",
        ("action", "pool", "verdict"),
        "Verdicts on applied actions after their verification window (rolled_back: undone).",
        enums=(("verdict", VERDICTS),),
    ),
    _g(ACTUATOR_FROZEN, "", (), "1 while the actuator is frozen (decides nothing), else 0."),
    _g(
        ACTUATOR_FENCED,
        "",
        (),
        "1 while this leader's fencing token is behind the one its backend holds and it could not re-acquire above "
        "it: it leads but cannot act.",
    ),
    _c(
        ACTUATOR_FREEZES_TOTAL,
        "",
        ("reason",),
        "Times the actuator froze, by reason.",
        enums=(("reason", FREEZE_REASONS),),
    ),
    _g(
        ACTUATOR_CHANGE_BUDGET_USED_RATIO,
        "ratio",
        ("pool",),
        "Share of the hourly change budget of a pool (or fleet) used.",
    ),
    MetricSpec(
        ACTUATOR_DECISION_LATENCY_SECONDS,
        Kind.HISTOGRAM,
        "seconds",
        ("loop",),
        "Time from a decision to the backend's answer.",
        enums=(("loop", ACTUATOR_LOOPS),),
    ),
    _c(
        ACTUATOR_TICKS_TOTAL,
        "",
        ("loop", "outcome"),
        "Runs of the actuator's loops: ok, error (the tick raised) or missed (late or overrunning).",
        enums=(("loop", ACTUATOR_LOOPS), ("outcome", TICK_OUTCOMES)),
    ),
    _c(
        ACTUATOR_WEBHOOK_ALERTS_TOTAL,
        "",
        ("outcome",),
        "Alerts received on the actuator's webhook: accepted, duplicate (same fingerprint and status) or dropped "
        "(inbox full).",
        enums=(("outcome", WEBHOOK_OUTCOMES),),
    ),
    _g(
        ACTUATOR_AUDIT_FAILED,
        "",
        (),
        "1 while the audit trail cannot be written (its database deleted, replaced or corrupt under the daemon): the "
        "actuator does not act until it is restored and the daemon restarted.  Page on it.",
    ),
    _g(
        ACTUATOR_AUDIT_UNKNOWN,
        "",
        (),
        "Decisions whose answer was lost and whose effect the target could not confirm yet (reconciled each tick).",
    ),
    _c(
        ACTUATOR_AUDIT_UNRECORDED_TOTAL,
        "",
        (),
        "Audit rows that could not be written (each logged whole at ERROR instead).",
    ),
)

# --- the engine extension (text format v1) ----------------------------------------------------------------
# What real engines lack and the twin (or an instrumented engine) can expose beside its own /metrics.
# Labels follow vLLM: model_name and engine.  See docs/engine-extension.md.
ENGINE_EXTENSION_VERSION = "1"
ENGINE_EXTENSION: tuple[MetricSpec, ...] = (
    _g(
        ENGINE_EXTENSION_INFO,
        "",
        ("version",),
        "Always 1; the version label names the infercast engine-extension format.",
    ),
    _g(
        ENGINE_KV_CACHE_FRAGMENTATION_RATIO,
        "ratio",
        ("model_name", "engine"),
        "Allocated KV capacity that holds no token / allocated KV capacity.",
    ),
    _g(
        ENGINE_MEMORY_EFFICIENCY_RATIO,
        "ratio",
        ("model_name", "engine"),
        "GPU memory holding live tokens and weights / GPU memory allocated.",
    ),
    _g(
        ENGINE_MAX_NUM_SEQS,
        "",
        ("model_name", "engine"),
        "Configured maximum batch size (requests).",
    ),
    _c(
        ENGINE_KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
        "",
        ("model_name", "engine"),
        "KV block allocations that failed (preemptions and admission rejections for lack of blocks).",
    ),
    _g(
        ENGINE_GPU_MEMORY_USED_BYTES,
        "bytes",
        ("model_name", "engine"),
        "GPU memory in use: weights, KV cache allocated, activations.",
    ),
    _g(
        ENGINE_GPU_MEMORY_TOTAL_BYTES,
        "bytes",
        ("model_name", "engine"),
        "GPU memory of the engine's devices in total.",
    ),
)

_BY_NAME = {m.name: m for m in (*CATALOG, *ENGINE_EXTENSION)}
#: families about one GPU (labelled node, gpu, uuid)
GPU_FAMILIES = frozenset(m.name for m in CATALOG if m.labels[: len(GPU)] == GPU)
#: symbol -> name of every family (the module's `infercast_` constants)
SYMBOLS: dict[str, str] = {k: v for k, v in globals().items() if k.isupper() and str(v).startswith("infercast_")}
if set(SYMBOLS.values()) != set(_BY_NAME) or len(SYMBOLS) != len(_BY_NAME):
    raise ImportError(f"catalog symbols and families differ: {sorted(set(SYMBOLS.values()) ^ set(_BY_NAME))}")


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


def breach_threshold_label(trigger: float) -> str:
    """The `threshold` label of `FORECAST_BREACH_ETA_SECONDS`: the fleet file's `thresholds.kv_forecast_trigger`
    (`0.75` -> "0.75", `0.7` -> "0.7").  The predictor publishes the series under it and the actuator selects the
    series by it, both through this function, so the two cannot spell the same trigger differently."""
    return f"{trigger:g}"
