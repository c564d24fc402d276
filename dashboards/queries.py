"""Every PromQL query of the dashboards, in one module (pure: strings only).

Panels refer to these by name; the test that runs each panel's queries against a real Prometheus reads them from
the generated JSON, so a query changed here is checked there.  Recorded series (`level:metric:operations`) are
those of alertrules/rules.py; `tests/alerting/test_dashboards.py` checks that each one used here is recorded.
Grafana variables: `$pool`, `$version` (multi-value regexes), `$__rate_interval`.
"""

from __future__ import annotations

from dataclasses import dataclass

# recorded series: the recording rules define them, the dashboards read them (one spelling)
from alertrules.rules import (
    BATCH_SAT_AVG,
    DEGRADATION_RATE,
    FAILURE_RATE,
    FRAG_MAX,
    GPU_MEM_RATIO,
    KV_USAGE_AVG,
    KV_USAGE_FLEET,
    KV_USAGE_MAX,
    REQ_RATE,
    REQ_SHARE,
)
from infercast.catalog import spec
from infercast.config import PredictorConfig


def _n(name: str) -> str:
    return spec(name).name


@dataclass(frozen=True)
class Q:
    """One query of a panel: PromQL, its legend, and whether Grafana asks for one value (instant) or a range."""

    expr: str
    legend: str = ""
    instant: bool = False


PV = 'pool=~"$pool",version=~"$version"'
P = 'pool=~"$pool"'
HORIZON = f"{int(PredictorConfig().horizon_seconds)}s"

KV_USAGE = _n("infercast_kv_cache_usage_ratio")
KV_FRAG = _n("infercast_kv_cache_fragmentation_ratio")
KV_FAILURES = _n("infercast_kv_block_allocation_failures_total")
KV_HIT = _n("infercast_kv_cache_hit_ratio")
BATCH_SAT = _n("infercast_batch_saturation_ratio")
RUNNING = _n("infercast_requests_running")
WAITING = _n("infercast_requests_waiting")
MEM_EFF = _n("infercast_memory_efficiency_ratio")
ROUTER = _n("infercast_router_requests_total")
DEGRADATIONS = _n("infercast_degradations_total")
RISK = _n("infercast_avalanche_risk_score")
HEALTH = _n("infercast_health_score")
HEALTH_DIM = _n("infercast_health_dimension_score")
GPU_USED = _n("infercast_gpu_memory_used_bytes")
GPU_TOTAL = _n("infercast_gpu_memory_total_bytes")
GPU_UTIL = _n("infercast_gpu_utilization_ratio")
GPU_SM = _n("infercast_gpu_sm_occupancy_ratio")
GPU_DRAM = _n("infercast_gpu_dram_active_ratio")
GPU_PCIE = _n("infercast_gpu_pcie_bytes_total")
GPU_TEMP = _n("infercast_gpu_temperature_celsius")
GPU_POWER = _n("infercast_gpu_power_watts")
GPU_ECC = _n("infercast_gpu_ecc_errors_total")
GPU_XID = _n("infercast_gpu_xid_errors_total")
TARGET_UP = _n("infercast_target_up")
SCRAPE_S = _n("infercast_target_scrape_duration_seconds")
F_KV = _n("infercast_forecast_kv_cache_usage_ratio")
F_RPS = _n("infercast_forecast_requests_per_second")
F_ETA = _n("infercast_forecast_breach_eta_seconds")
F_LAST = _n("infercast_forecast_last_success_timestamp_seconds")
F_SKIPPED = _n("infercast_forecast_skipped")
A_ACTIONS = _n("infercast_actuator_actions_total")
A_DECISIONS = _n("infercast_actuator_decisions_total")
A_VERDICTS = _n("infercast_actuator_verdicts_total")
A_WEIGHT = _n("infercast_actuator_pool_weight")
A_BREAKER = _n("infercast_actuator_breaker_threshold")
A_LEADER = _n("infercast_actuator_leader")
A_ACTIVE = _n("infercast_actuator_active")
A_FROZEN = _n("infercast_actuator_frozen")
A_FREEZES = _n("infercast_actuator_freezes_total")
A_BUDGET = _n("infercast_actuator_change_budget_used_ratio")
A_LATENCY = _n("infercast_actuator_decision_latency_seconds")
A_TICKS = _n("infercast_actuator_ticks_total")
A_ALERTS = _n("infercast_actuator_webhook_alerts_total")


def _forecast(band: str, metric: str = F_KV) -> str:
    return f'max by (pool, version) ({metric}{{{PV},ml_forecast="{band}",horizon="{HORIZON}"}})'


# --- Fleet overview ----------------------------------------------------------------------------------------------
REQUEST_SHARE = Q(f'{REQ_SHARE}{{version=~"$version"}}', "{{version}}")
REQUEST_RATE = Q(f"{REQ_RATE}{{{PV}}}", "{{pool}} / {{version}}")
FLEET_KV = Q(KV_USAGE_FLEET, "fleet", instant=True)
KV_BY_POOL = Q(f"{KV_USAGE_AVG}{{{PV}}}", "{{pool}} / {{version}} avg")
KV_MAX_BY_POOL = Q(f"{KV_USAGE_MAX}{{{PV}}}", "{{pool}} / {{version}} fullest")
AVALANCHE_RISK = Q(f"{RISK}{{{P}}}", "{{pool}}")
AVALANCHE_RISK_NOW = Q(f"max({RISK}{{{P}}})", "worst pool", instant=True)
HEALTH_SCORE = Q(f"{HEALTH}{{{PV}}}", "{{pool}} / {{version}}")
HEALTH_WORST = Q(f"min({HEALTH}{{{PV}}})", "worst", instant=True)
HEALTH_DIMENSIONS = Q(
    f"bottomk(5, min by (dimension) ({HEALTH_DIM}{{{PV}}}))", "{{dimension}}", instant=True
)  # the five weakest dimensions now
DEGRADATIONS_BY_REASON = Q(
    f'sum by (reason) ({DEGRADATION_RATE}{{from_version=~"$version"}})', "{{reason}}"
)  # per second, 5-minute rate
DEGRADATIONS_BY_PATH = Q(
    f'sum by (from_version, to_version) ({DEGRADATION_RATE}{{from_version=~"$version"}})',
    "{{from_version}} -> {{to_version}}",
)

# --- KV-cache health ---------------------------------------------------------------------------------------------
FRAGMENTATION = Q(f"{FRAG_MAX}{{{PV}}}", "{{pool}} / {{version}}")
FRAGMENTATION_BY_INSTANCE = Q(f"{KV_FRAG}{{{PV}}}", "{{instance}}")
FRAGMENTATION_NOW = Q(f"max({FRAG_MAX}{{{PV}}})", "worst", instant=True)
KV_USAGE_BY_INSTANCE = Q(f"{KV_USAGE}{{{PV}}}", "{{instance}}")
ALLOCATION_FAILURES = Q(f"{FAILURE_RATE}{{{PV}}}", "{{pool}} / {{version}}")
ALLOCATION_FAILURES_BY_INSTANCE = Q(
    f"sum by (instance) (rate({KV_FAILURES}{{{PV}}}[$__rate_interval]))", "{{instance}}"
)
BATCH_EFFICIENCY = Q(f"{BATCH_SAT_AVG}{{{PV}}}", "{{pool}} / {{version}}")  # running / max batch = actual / ideal
REQUESTS_RUNNING = Q(f"sum by (pool, version) ({RUNNING}{{{PV}}})", "running {{pool}} / {{version}}")
REQUESTS_WAITING = Q(f"sum by (pool, version) ({WAITING}{{{PV}}})", "waiting {{pool}} / {{version}}")
MEMORY_EFFICIENCY = Q(f"avg by (pool, version) ({MEM_EFF}{{{PV}}})", "{{pool}} / {{version}}")
PREFIX_HIT = Q(f"avg by (pool, version) ({KV_HIT}{{{PV}}})", "{{pool}} / {{version}}")

# --- Forecasts ---------------------------------------------------------------------------------------------------
ACTUAL_KV = Q(f"{KV_USAGE_MAX}{{{PV}}}", "actual {{pool}} / {{version}}")
FORECAST_KV = Q(_forecast("yhat"), "forecast +5m {{pool}} / {{version}}")
FORECAST_KV_LOWER = Q(_forecast("yhat_lower"), "lower {{pool}} / {{version}}")
FORECAST_KV_UPPER = Q(_forecast("yhat_upper"), "upper {{pool}} / {{version}}")
ACTUAL_RPS = Q(f"sum by (pool, version) ({REQ_RATE}{{{PV}}})", "actual {{pool}} / {{version}}")
FORECAST_RPS = Q(_forecast("yhat", F_RPS), "forecast +5m {{pool}} / {{version}}")
FORECAST_RPS_UPPER = Q(_forecast("yhat_upper", F_RPS), "upper {{pool}} / {{version}}")
BREACH_ETA = Q(f"min by (pool, version, threshold) ({F_ETA}{{{PV}}})", "{{pool}} / {{version}} > {{threshold}}")
BREACH_ETA_NOW = Q(f"min({F_ETA}{{{PV}}})", "soonest", instant=True)
FORECAST_AGE = Q(f"time() - max by (model) ({F_LAST})", "{{model}}")
FORECAST_SKIPS = Q(f"sum by (reason) ({F_SKIPPED}{{{PV}}})", "{{reason}}", instant=True)
# Live backtest: the forecast each model made one horizon ago against what happened (mean absolute error).
BACKTEST_MAE = Q(
    f'avg by (model) (abs(({F_KV}{{{PV},ml_forecast="yhat",horizon="{HORIZON}"}} offset {HORIZON}) '
    f"- on (pool, version) group_left () {KV_USAGE_MAX}))",
    "{{model}}",
)

# --- GPU ---------------------------------------------------------------------------------------------------------
GPU = 'node=~"$node"'
GPU_MEMORY = Q(f"{GPU_MEM_RATIO}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_MEMORY_BYTES = Q(f"{GPU_USED}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_UTILIZATION = Q(f"{GPU_UTIL}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_SM_OCCUPANCY = Q(f"{GPU_SM}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_HBM = Q(f"{GPU_DRAM}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_PCIE_RATE = Q(
    f"sum by (node, gpu, direction) (rate({GPU_PCIE}{{{GPU}}}[$__rate_interval]))", "{{node}} gpu {{gpu}} {{direction}}"
)
GPU_TEMPERATURE = Q(f"{GPU_TEMP}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_POWER_DRAW = Q(f"{GPU_POWER}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_ECC_ERRORS = Q(f"sum by (node, gpu, type) (increase({GPU_ECC}{{{GPU}}}[1h]))", "{{node}} gpu {{gpu}} {{type}}")
GPU_XID_ERRORS = Q(f"sum by (node, gpu, xid) (increase({GPU_XID}{{{GPU}}}[1h]))", "{{node}} gpu {{gpu}} xid {{xid}}")

# --- the exporter's sources --------------------------------------------------------------------------------------
TARGETS_UP = Q(f"{TARGET_UP}", "{{target}} ({{kind}})", instant=True)
SCRAPE_DURATION = Q(f"{SCRAPE_S}", "{{target}}")

# --- Actuator ----------------------------------------------------------------------------------------------------
# `pool` on the actuator's series is what an action changes: a pool, or `fleet` for fleet-wide settings.
AP = 'pool=~"$pool|fleet"'
ACTUATOR_ACTIVE = Q(f"max({A_ACTIVE})", "active", instant=True)  # 1 active, 0 advisory
ACTUATOR_LEADERS = Q(f"sum({A_LEADER})", "leaders", instant=True)  # exactly 1 when healthy
ACTUATOR_FROZEN_NOW = Q(f"max({A_FROZEN})", "frozen", instant=True)
ACTUATOR_BUDGET_NOW = Q(f"max({A_BUDGET}{{{AP}}})", "worst", instant=True)
ACTUATOR_MODE = Q(f"max({A_ACTIVE})", "active (1) / advisory (0)")
ACTUATOR_LEADER = Q(f"sum({A_LEADER})", "replicas leading")
ACTUATOR_ACTIONS = Q(
    f"sum by (outcome) (increase({A_ACTIONS}{{{AP}}}[$__rate_interval]))", "{{outcome}}"
)  # per scrape-window: bars on a timeline
ACTUATOR_DECISIONS = Q(
    f"sum by (action, pool, reason) (increase({A_DECISIONS}{{{AP}}}[$__rate_interval]))",
    "{{action}} {{pool}}: {{reason}}",
)
ACTUATOR_WEIGHTS = Q(f"{A_WEIGHT}{{{P}}}", "{{pool}}")
ACTUATOR_BREAKERS = Q(f"{A_BREAKER}{{{AP}}}", "{{pool}} {{kind}}")
ACTUATOR_VERDICTS = Q(f"sum by (verdict) (increase({A_VERDICTS}{{{AP}}}[$__rate_interval]))", "{{verdict}}")
ACTUATOR_ROLLBACKS = Q(
    f'sum by (action, pool) (increase({A_VERDICTS}{{{AP},verdict="rolled_back"}}[1h]))', "{{action}} {{pool}}"
)
ACTUATOR_FROZEN = Q(f"max({A_FROZEN})", "frozen")
ACTUATOR_FREEZES = Q(f"sum by (reason) (increase({A_FREEZES}[1h]))", "{{reason}}")
ACTUATOR_BUDGET = Q(f"{A_BUDGET}{{{AP}}}", "{{pool}}")
ACTUATOR_LATENCY_P99 = Q(
    f"histogram_quantile(0.99, sum by (le, loop) (rate({A_LATENCY}_bucket[$__rate_interval])))", "p99 {{loop}}"
)
ACTUATOR_LATENCY_P50 = Q(
    f"histogram_quantile(0.5, sum by (le, loop) (rate({A_LATENCY}_bucket[$__rate_interval])))", "p50 {{loop}}"
)
ACTUATOR_TICKS = Q(f"sum by (loop, outcome) (increase({A_TICKS}[$__rate_interval]))", "{{loop}} {{outcome}}")
ACTUATOR_ALERTS = Q(f"sum by (outcome) (increase({A_ALERTS}[$__rate_interval]))", "{{outcome}}")

# --- template variables ------------------------------------------------------------------------------------------
VAR_POOL = f"label_values({KV_USAGE}, pool)"
VAR_VERSION = f'label_values({KV_USAGE}{{pool=~"$pool"}}, version)'
VAR_NODE = f"label_values({GPU_TEMP}, node)"
VAR_ACTUATOR_POOL = f"label_values({A_DECISIONS}, pool)"
