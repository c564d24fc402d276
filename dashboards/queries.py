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
from infercast.catalog import (
    ACTUATOR_ACTIONS_TOTAL,
    ACTUATOR_ACTIVE,
    ACTUATOR_BREAKER_THRESHOLD,
    ACTUATOR_CHANGE_BUDGET_USED_RATIO,
    ACTUATOR_DECISION_LATENCY_SECONDS,
    ACTUATOR_DECISIONS_TOTAL,
    ACTUATOR_FREEZES_TOTAL,
    ACTUATOR_FROZEN,
    ACTUATOR_LEADER,
    ACTUATOR_POOL_WEIGHT,
    ACTUATOR_TICKS_TOTAL,
    ACTUATOR_VERDICTS_TOTAL,
    ACTUATOR_WEBHOOK_ALERTS_TOTAL,
    AVALANCHE_RISK_SCORE,
    BATCH_SATURATION_RATIO,
    DEGRADATIONS_TOTAL,
    FORECAST_BREACH_ETA_SECONDS,
    FORECAST_KV_CACHE_USAGE_RATIO,
    FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS,
    FORECAST_REQUESTS_PER_SECOND,
    FORECAST_SKIPPED,
    GPU_DRAM_ACTIVE_RATIO,
    GPU_ECC_ERRORS_TOTAL,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USED_BYTES,
    GPU_PCIE_BYTES_TOTAL,
    GPU_POWER_WATTS,
    GPU_SM_OCCUPANCY_RATIO,
    GPU_TEMPERATURE_CELSIUS,
    GPU_UTILIZATION_RATIO,
    GPU_XID_ERRORS_TOTAL,
    HEALTH_DIMENSION_SCORE,
    HEALTH_SCORE,
    KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    KV_CACHE_FRAGMENTATION_RATIO,
    KV_CACHE_HIT_RATIO,
    KV_CACHE_USAGE_RATIO,
    MEMORY_EFFICIENCY_RATIO,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    ROUTER_REQUESTS_TOTAL,
    TARGET_SCRAPE_DURATION_SECONDS,
    TARGET_UP,
)
from infercast.config import PredictorConfig


@dataclass(frozen=True)
class Q:
    """One query of a panel: PromQL, its legend, and whether Grafana asks for one value (instant) or a range."""

    expr: str
    legend: str = ""
    instant: bool = False


PV = 'pool=~"$pool",version=~"$version"'
P = 'pool=~"$pool"'
HORIZON = f"{int(PredictorConfig().horizon_seconds)}s"

KV_USAGE = KV_CACHE_USAGE_RATIO
KV_FRAG = KV_CACHE_FRAGMENTATION_RATIO
KV_FAILURES = KV_BLOCK_ALLOCATION_FAILURES_TOTAL
KV_HIT = KV_CACHE_HIT_RATIO
BATCH_SAT = BATCH_SATURATION_RATIO
RUNNING = REQUESTS_RUNNING
WAITING = REQUESTS_WAITING
MEM_EFF = MEMORY_EFFICIENCY_RATIO
ROUTER = ROUTER_REQUESTS_TOTAL
DEGRADATIONS = DEGRADATIONS_TOTAL
RISK = AVALANCHE_RISK_SCORE
HEALTH = HEALTH_SCORE
HEALTH_DIM = HEALTH_DIMENSION_SCORE
GPU_USED = GPU_MEMORY_USED_BYTES
GPU_TOTAL = GPU_MEMORY_TOTAL_BYTES
GPU_UTIL = GPU_UTILIZATION_RATIO
GPU_SM = GPU_SM_OCCUPANCY_RATIO
GPU_DRAM = GPU_DRAM_ACTIVE_RATIO
GPU_PCIE = GPU_PCIE_BYTES_TOTAL
GPU_TEMP = GPU_TEMPERATURE_CELSIUS
GPU_POWER = GPU_POWER_WATTS
GPU_ECC = GPU_ECC_ERRORS_TOTAL
GPU_XID = GPU_XID_ERRORS_TOTAL
SCRAPE_S = TARGET_SCRAPE_DURATION_SECONDS
F_KV = FORECAST_KV_CACHE_USAGE_RATIO
F_RPS = FORECAST_REQUESTS_PER_SECOND
F_ETA = FORECAST_BREACH_ETA_SECONDS
F_LAST = FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS
F_SKIPPED = FORECAST_SKIPPED
A_ACTIONS = ACTUATOR_ACTIONS_TOTAL
A_DECISIONS = ACTUATOR_DECISIONS_TOTAL
A_VERDICTS = ACTUATOR_VERDICTS_TOTAL
A_WEIGHT = ACTUATOR_POOL_WEIGHT
A_BREAKER = ACTUATOR_BREAKER_THRESHOLD
A_LEADER = ACTUATOR_LEADER
A_ACTIVE = ACTUATOR_ACTIVE
A_FROZEN = ACTUATOR_FROZEN
A_FREEZES = ACTUATOR_FREEZES_TOTAL
A_BUDGET = ACTUATOR_CHANGE_BUDGET_USED_RATIO
A_LATENCY = ACTUATOR_DECISION_LATENCY_SECONDS
A_TICKS = ACTUATOR_TICKS_TOTAL
A_ALERTS = ACTUATOR_WEBHOOK_ALERTS_TOTAL


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
