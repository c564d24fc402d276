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
from infercast import catalog as metric
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


def _forecast(band: str, metric: str = metric.FORECAST_KV_CACHE_USAGE_RATIO) -> str:
    return f'max by (pool, version) ({metric}{{{PV},ml_forecast="{band}",horizon="{HORIZON}"}})'


# --- Fleet overview ----------------------------------------------------------------------------------------------
REQUEST_SHARE = Q(f'{REQ_SHARE}{{version=~"$version"}}', "{{version}}")
REQUEST_RATE = Q(f"{REQ_RATE}{{{PV}}}", "{{pool}} / {{version}}")
FLEET_KV = Q(KV_USAGE_FLEET, "fleet", instant=True)
KV_BY_POOL = Q(f"{KV_USAGE_AVG}{{{PV}}}", "{{pool}} / {{version}} avg")
KV_MAX_BY_POOL = Q(f"{KV_USAGE_MAX}{{{PV}}}", "{{pool}} / {{version}} fullest")
AVALANCHE_RISK = Q(f"{metric.AVALANCHE_RISK_SCORE}{{{P}}}", "{{pool}}")
AVALANCHE_RISK_NOW = Q(f"max({metric.AVALANCHE_RISK_SCORE}{{{P}}})", "worst pool", instant=True)
HEALTH_SCORE = Q(f"{metric.HEALTH_SCORE}{{{PV}}}", "{{pool}} / {{version}}")
HEALTH_WORST = Q(f"min({metric.HEALTH_SCORE}{{{PV}}})", "worst", instant=True)
HEALTH_DIMENSIONS = Q(
    f"bottomk(5, min by (dimension) ({metric.HEALTH_DIMENSION_SCORE}{{{PV}}}))", "{{dimension}}", instant=True
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
FRAGMENTATION_BY_INSTANCE = Q(f"{metric.KV_CACHE_FRAGMENTATION_RATIO}{{{PV}}}", "{{instance}}")
FRAGMENTATION_NOW = Q(f"max({FRAG_MAX}{{{PV}}})", "worst", instant=True)
KV_USAGE_BY_INSTANCE = Q(f"{metric.KV_CACHE_USAGE_RATIO}{{{PV}}}", "{{instance}}")
ALLOCATION_FAILURES = Q(f"{FAILURE_RATE}{{{PV}}}", "{{pool}} / {{version}}")
ALLOCATION_FAILURES_BY_INSTANCE = Q(
    f"sum by (instance) (rate({metric.KV_BLOCK_ALLOCATION_FAILURES_TOTAL}{{{PV}}}[$__rate_interval]))", "{{instance}}"
)
BATCH_EFFICIENCY = Q(f"{BATCH_SAT_AVG}{{{PV}}}", "{{pool}} / {{version}}")  # running / max batch = actual / ideal
REQUESTS_RUNNING = Q(f"sum by (pool, version) ({metric.REQUESTS_RUNNING}{{{PV}}})", "running {{pool}} / {{version}}")
REQUESTS_WAITING = Q(f"sum by (pool, version) ({metric.REQUESTS_WAITING}{{{PV}}})", "waiting {{pool}} / {{version}}")
MEMORY_EFFICIENCY = Q(f"avg by (pool, version) ({metric.MEMORY_EFFICIENCY_RATIO}{{{PV}}})", "{{pool}} / {{version}}")
PREFIX_HIT = Q(f"avg by (pool, version) ({metric.KV_CACHE_HIT_RATIO}{{{PV}}})", "{{pool}} / {{version}}")

# --- Forecasts ---------------------------------------------------------------------------------------------------
ACTUAL_KV = Q(f"{KV_USAGE_MAX}{{{PV}}}", "actual {{pool}} / {{version}}")
FORECAST_KV = Q(_forecast("yhat"), "forecast +5m {{pool}} / {{version}}")
FORECAST_KV_LOWER = Q(_forecast("yhat_lower"), "lower {{pool}} / {{version}}")
FORECAST_KV_UPPER = Q(_forecast("yhat_upper"), "upper {{pool}} / {{version}}")
ACTUAL_RPS = Q(f"sum by (pool, version) ({REQ_RATE}{{{PV}}})", "actual {{pool}} / {{version}}")
FORECAST_RPS = Q(_forecast("yhat", metric.FORECAST_REQUESTS_PER_SECOND), "forecast +5m {{pool}} / {{version}}")
FORECAST_RPS_UPPER = Q(_forecast("yhat_upper", metric.FORECAST_REQUESTS_PER_SECOND), "upper {{pool}} / {{version}}")
BREACH_ETA = Q(
    f"min by (pool, version, threshold) ({metric.FORECAST_BREACH_ETA_SECONDS}{{{PV}}})",
    "{{pool}} / {{version}} > {{threshold}}",
)
BREACH_ETA_NOW = Q(f"min({metric.FORECAST_BREACH_ETA_SECONDS}{{{PV}}})", "soonest", instant=True)
FORECAST_AGE = Q(f"time() - max by (model) ({metric.FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS})", "{{model}}")
FORECAST_SKIPS = Q(f"sum by (reason) ({metric.FORECAST_SKIPPED}{{{PV}}})", "{{reason}}", instant=True)
# Live backtest: the forecast each model made one horizon ago against what happened (mean absolute error).
BACKTEST_MAE = Q(
    f"avg by (model) (abs(({metric.FORECAST_KV_CACHE_USAGE_RATIO}"
    f'{{{PV},ml_forecast="yhat",horizon="{HORIZON}"}} offset {HORIZON}) '
    f"- on (pool, version) group_left () {KV_USAGE_MAX}))",
    "{{model}}",
)

# --- GPU ---------------------------------------------------------------------------------------------------------
GPU = 'node=~"$node"'
GPU_MEMORY = Q(f"{GPU_MEM_RATIO}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_MEMORY_BYTES = Q(f"{metric.GPU_MEMORY_USED_BYTES}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_UTILIZATION = Q(f"{metric.GPU_UTILIZATION_RATIO}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_SM_OCCUPANCY = Q(f"{metric.GPU_SM_OCCUPANCY_RATIO}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_HBM = Q(f"{metric.GPU_DRAM_ACTIVE_RATIO}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_PCIE_RATE = Q(
    f"sum by (node, gpu, direction) (rate({metric.GPU_PCIE_BYTES_TOTAL}{{{GPU}}}[$__rate_interval]))",
    "{{node}} gpu {{gpu}} {{direction}}",
)
GPU_TEMPERATURE = Q(f"{metric.GPU_TEMPERATURE_CELSIUS}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_POWER_DRAW = Q(f"{metric.GPU_POWER_WATTS}{{{GPU}}}", "{{node}} gpu {{gpu}}")
GPU_ECC_ERRORS = Q(
    f"sum by (node, gpu, type) (increase({metric.GPU_ECC_ERRORS_TOTAL}{{{GPU}}}[1h]))", "{{node}} gpu {{gpu}} {{type}}"
)
GPU_XID_ERRORS = Q(
    f"sum by (node, gpu, xid) (increase({metric.GPU_XID_ERRORS_TOTAL}{{{GPU}}}[1h]))",
    "{{node}} gpu {{gpu}} xid {{xid}}",
)

# --- the exporter's sources --------------------------------------------------------------------------------------
TARGETS_UP = Q(f"{metric.TARGET_UP}", "{{target}} ({{kind}})", instant=True)
SCRAPE_DURATION = Q(f"{metric.TARGET_SCRAPE_DURATION_SECONDS}", "{{target}}")

# --- Actuator ----------------------------------------------------------------------------------------------------
# `pool` on the actuator's series is what an action changes: a pool, or `fleet` for fleet-wide settings.
AP = 'pool=~"$pool|fleet"'
ACTUATOR_ACTIVE = Q(f"max({metric.ACTUATOR_ACTIVE})", "active", instant=True)  # 1 active, 0 advisory
ACTUATOR_LEADERS = Q(f"sum({metric.ACTUATOR_LEADER})", "leaders", instant=True)  # exactly 1 when healthy
ACTUATOR_FROZEN_NOW = Q(f"max({metric.ACTUATOR_FROZEN})", "frozen", instant=True)
ACTUATOR_BUDGET_NOW = Q(f"max({metric.ACTUATOR_CHANGE_BUDGET_USED_RATIO}{{{AP}}})", "worst", instant=True)
ACTUATOR_MODE = Q(f"max({metric.ACTUATOR_ACTIVE})", "active (1) / advisory (0)")
ACTUATOR_LEADER = Q(f"sum({metric.ACTUATOR_LEADER})", "replicas leading")
ACTUATOR_ACTIONS = Q(
    f"sum by (outcome) (increase({metric.ACTUATOR_ACTIONS_TOTAL}{{{AP}}}[$__rate_interval]))", "{{outcome}}"
)  # per scrape-window: bars on a timeline
ACTUATOR_DECISIONS = Q(
    f"sum by (action, pool, reason) (increase({metric.ACTUATOR_DECISIONS_TOTAL}{{{AP}}}[$__rate_interval]))",
    "{{action}} {{pool}}: {{reason}}",
)
ACTUATOR_WEIGHTS = Q(f"{metric.ACTUATOR_POOL_WEIGHT}{{{P}}}", "{{pool}}")
ACTUATOR_BREAKERS = Q(f"{metric.ACTUATOR_BREAKER_THRESHOLD}{{{AP}}}", "{{pool}} {{kind}}")
ACTUATOR_VERDICTS = Q(
    f"sum by (verdict) (increase({metric.ACTUATOR_VERDICTS_TOTAL}{{{AP}}}[$__rate_interval]))", "{{verdict}}"
)
ACTUATOR_ROLLBACKS = Q(
    f'sum by (action, pool) (increase({metric.ACTUATOR_VERDICTS_TOTAL}{{{AP},verdict="rolled_back"}}[1h]))',
    "{{action}} {{pool}}",
)
ACTUATOR_FROZEN = Q(f"max({metric.ACTUATOR_FROZEN})", "frozen")
ACTUATOR_FREEZES = Q(f"sum by (reason) (increase({metric.ACTUATOR_FREEZES_TOTAL}[1h]))", "{{reason}}")
ACTUATOR_BUDGET = Q(f"{metric.ACTUATOR_CHANGE_BUDGET_USED_RATIO}{{{AP}}}", "{{pool}}")
ACTUATOR_LATENCY_P99 = Q(
    "histogram_quantile(0.99, sum by (le, loop) "
    f"(rate({metric.ACTUATOR_DECISION_LATENCY_SECONDS}_bucket[$__rate_interval])))",
    "p99 {{loop}}",
)
ACTUATOR_LATENCY_P50 = Q(
    "histogram_quantile(0.5, sum by (le, loop) "
    f"(rate({metric.ACTUATOR_DECISION_LATENCY_SECONDS}_bucket[$__rate_interval])))",
    "p50 {{loop}}",
)
ACTUATOR_TICKS = Q(
    f"sum by (loop, outcome) (increase({metric.ACTUATOR_TICKS_TOTAL}[$__rate_interval]))", "{{loop}} {{outcome}}"
)
ACTUATOR_ALERTS = Q(
    f"sum by (outcome) (increase({metric.ACTUATOR_WEBHOOK_ALERTS_TOTAL}[$__rate_interval]))", "{{outcome}}"
)

# --- template variables ------------------------------------------------------------------------------------------
VAR_POOL = f"label_values({metric.KV_CACHE_USAGE_RATIO}, pool)"
VAR_VERSION = f'label_values({metric.KV_CACHE_USAGE_RATIO}{{pool=~"$pool"}}, version)'
VAR_NODE = f"label_values({metric.GPU_TEMPERATURE_CELSIUS}, node)"
VAR_ACTUATOR_POOL = f"label_values({metric.ACTUATOR_DECISIONS_TOTAL}, pool)"
