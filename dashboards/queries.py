"""Every PromQL query of the dashboards, in one module (pure: strings only).

Panels refer to these by name; the test that runs each panel's queries against a real Prometheus reads them from
the generated JSON, so a query changed here is checked there.  Recorded series (`level:metric:operations`) are
those of alertrules/rules.py; `tests/alerting/test_dashboards.py` checks that each one used here is recorded.
Grafana variables: `$cluster`, `$namespace` (regexes, "All" is `.*`), `$pool`, `$version`, `$node`, `$model_name`
(multi-value regexes), `$__rate_interval`, `$__interval`.

Scope: a raw series is selected with `cluster=~"$cluster",namespace=~"$namespace"` (`SCOPE`): the cluster (an
external label of a multi-cluster Prometheus, Thanos or Mimir) and the namespace it was scraped in.  A regex that
matches the empty string also matches a series without the label, so with "All" (`.*`) every query works where
neither label exists (a single Prometheus, docker-compose).  Recorded series are aggregated over namespaces by the
recording rules, so they are selected by `$cluster` only (`CLUSTER`), except the SLO series, which keep the
namespace (alertrules/slo.py) and so respect `$namespace` (`SPV`).

vLLM's own families (`VLLM_*`, for the latency panels) are read as Prometheus scrapes them from the engines: labels
`model_name` (the served model name) and `engine`; the version is the fleet file's `versions.<v>.model.name`
mapped back by `versioned()`.  The names are those of vLLM 0.34 (tests/data/engines/vllm.prom, whose every
`VLLM_*` name the dashboards test checks).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from infercast import catalog as metric

# recorded series (`rec.*`): the recording rules define them, the dashboards read them (one spelling)
from infercast.alertrules import recorded as rec
from infercast.alertrules.rules import ENGINE_KINDS, forecast_age
from infercast.alertrules.slo import VLLM_SUCCESS, VLLM_TTFT, burn_rate, error_ratio
from infercast.config import PredictorConfig


@dataclass(frozen=True)
class Q:
    """One query of a panel: PromQL, its legend, and whether Grafana asks for one value (instant) or a range."""

    expr: str
    legend: str = ""
    instant: bool = False

    def now(self, legend: str) -> Q:
        """The same query as one value now (instant): the stat beside a time series panel of the same series."""
        return Q(self.expr, legend, instant=True)


CLUSTER = 'cluster=~"$cluster"'
SCOPE = f'{CLUSTER},namespace=~"$namespace"'
PV = f'{SCOPE},pool=~"$pool",version=~"$version"'
P = f'{SCOPE},pool=~"$pool"'
#: recorded series: per pool and version, over every namespace
RPV = f'{CLUSTER},pool=~"$pool",version=~"$version"'
HORIZON = f"{int(PredictorConfig().horizon_seconds)}s"


def _forecast(band: str, metric: str = metric.FORECAST_KV_CACHE_USAGE_RATIO) -> str:
    return f'max by (pool, version) ({metric}{{{PV},band="{band}",horizon="{HORIZON}"}})'


# --- Fleet overview ----------------------------------------------------------------------------------------------
REQUEST_SHARE = Q(f'{rec.REQ_SHARE}{{{CLUSTER},version=~"$version"}}', "{{version}}")
REQUEST_RATE = Q(f"{rec.REQ_RATE}{{{RPV}}}", "{{pool}} / {{version}}")
#: the fullest instance of the selected pools: what the memory breaker (and InfercastKVCacheUsageHigh) acts on
FLEET_KV = Q(f"max({rec.KV_USAGE_MAX}{{{RPV}}})", "fullest instance", instant=True)
FLEET_KV_MEAN = Q(f"avg({rec.KV_USAGE_FLEET}{{{CLUSTER}}})", "fleet mean")
KV_BY_POOL = Q(f"{rec.KV_USAGE_AVG}{{{RPV}}}", "{{pool}} / {{version}} avg")
KV_MAX_BY_POOL = Q(f"{rec.KV_USAGE_MAX}{{{RPV}}}", "{{pool}} / {{version}} fullest")
AVALANCHE_RISK = Q(f"{metric.AVALANCHE_RISK_SCORE}{{{P}}}", "{{pool}}")
AVALANCHE_RISK_NOW = Q(f"max({metric.AVALANCHE_RISK_SCORE}{{{P}}})", "worst pool", instant=True)
HEALTH_SCORE = Q(f"{metric.HEALTH_SCORE}{{{PV}}}", "{{pool}} / {{version}}")
HEALTH_WORST = Q(f"min({metric.HEALTH_SCORE}{{{PV}}})", "worst", instant=True)
HEALTH_DIMENSIONS = Q(
    f"bottomk(5, min by (dimension) ({metric.HEALTH_DIMENSION_SCORE}{{{PV}}}))", "{{dimension}}", instant=True
)  # the five weakest dimensions now
DEGRADATIONS_BY_REASON = Q(
    f'sum by (reason) ({rec.DEGRADATION_RATE}{{{CLUSTER},from_version=~"$version"}})', "{{reason}}"
)  # per second, 5-minute rate
DEGRADATIONS_BY_PATH = Q(
    f'sum by (from_version, to_version) ({rec.DEGRADATION_RATE}{{{CLUSTER},from_version=~"$version"}})',
    "{{from_version}} -> {{to_version}}",
)

# --- what users get: outcomes and the SLOs (alertrules/slo.py) ---------------------------------------------------
#: the SLO series are recorded per namespace too (alertrules/slo.py): they respect $namespace
SPV = PV

#: failed requests per second by outcome (`retried`: an attempt the client tries again)
ERRORS_BY_OUTCOME = Q(
    f'sum by (pool, version, outcome) (rate({metric.ROUTER_REQUESTS_TOTAL}{{{PV},outcome!="ok"}}[$__rate_interval]))',
    "{{pool}} / {{version}} {{outcome}}",
)


def slo_errors(sli: str) -> tuple[Q, Q]:
    """The share of requests that missed the `sli` objective over 5 minutes and 1 hour (the fast page's windows)."""
    return (
        Q(f'{error_ratio("fast_short")}{{{SPV},slo="{sli}"}}', "{{pool}} / {{version}} 5m"),
        Q(f'{error_ratio("fast_long")}{{{SPV},slo="{sli}"}}', "{{pool}} / {{version}} 1h"),
    )


def slo_burn(sli: str) -> tuple[Q, ...]:
    """The `sli` burn rates the pages compare: fast (1 h and 5 m) and slow (6 h and 30 m)."""
    return tuple(
        Q(f'{burn_rate(role)}{{{SPV},slo="{sli}"}}', f"{{{{pool}}}} / {{{{version}}}} {window}")
        for role, window in (("fast_long", "1h"), ("fast_short", "5m"), ("slow_long", "6h"), ("slow_short", "30m"))
    )


#: engines answering their scrape per pool: Prometheus' own (engines scraped with a pool label) or the exporter's
#: engine targets (alertrules/rules.py's `_engines_up` reads the same two)
ENGINES_SCRAPED = f'up{{{P},pool!=""}}'
ENGINE_TARGETS = f'{metric.TARGET_UP}{{{P},kind=~"{ENGINE_KINDS}"}}'
ENGINES_UP = Q(f"sum by (pool) ({ENGINES_SCRAPED}) or sum by (pool) ({ENGINE_TARGETS})", "{{pool}} up")
ENGINES_DOWN = Q(
    f"sum by (pool) ({ENGINES_SCRAPED} == bool 0) or sum by (pool) ({ENGINE_TARGETS} == bool 0)", "{{pool}} down"
)
ENGINES_UP_NOW = Q(f"sum({ENGINES_SCRAPED}) or sum({ENGINE_TARGETS})", "engines up", instant=True)

# --- KV-cache health ---------------------------------------------------------------------------------------------
#: what the fragmentation alerts read: the pool's mean (InfercastKVCacheFragmentationHigh) and the worst instance
#: among the full ones (InfercastKVCacheFragmentationCritical)
FRAGMENTATION = Q(f"{rec.FRAG_AVG}{{{RPV}}}", "{{pool}} / {{version}} mean")
FRAGMENTATION_FULL = Q(f"{rec.FRAG_FULL}{{{RPV}}}", "{{pool}} / {{version}} worst full instance")
FRAGMENTATION_BY_INSTANCE = Q(f"{metric.KV_CACHE_FRAGMENTATION_RATIO}{{{PV}}}", "{{instance}}")
FRAGMENTATION_NOW = Q(f"max({rec.FRAG_AVG}{{{RPV}}})", "worst pool mean", instant=True)
KV_USAGE_BY_INSTANCE = Q(f"{metric.KV_CACHE_USAGE_RATIO}{{{PV}}}", "{{instance}}")
ALLOCATION_FAILURES = Q(f"{rec.FAILURE_RATE}{{{RPV}}}", "{{pool}} / {{version}}")
ALLOCATION_FAILURES_BY_INSTANCE = Q(
    f"sum by (instance) (rate({metric.KV_BLOCK_ALLOCATION_FAILURES_TOTAL}{{{PV}}}[$__rate_interval]))", "{{instance}}"
)
#: running requests / the maximum batch size: how full the batches are (1: pinned, requests queue behind them)
BATCH_SATURATION = Q(f"{rec.BATCH_SAT_AVG}{{{RPV}}}", "{{pool}} / {{version}}")
REQUESTS_RUNNING = Q(f"sum by (pool, version) ({metric.REQUESTS_RUNNING}{{{PV}}})", "running {{pool}} / {{version}}")
REQUESTS_WAITING = Q(f"sum by (pool, version) ({metric.REQUESTS_WAITING}{{{PV}}})", "waiting {{pool}} / {{version}}")
MEMORY_EFFICIENCY = Q(f"avg by (pool, version) ({metric.MEMORY_EFFICIENCY_RATIO}{{{PV}}})", "{{pool}} / {{version}}")
PREFIX_HIT = Q(f"avg by (pool, version) ({metric.KV_CACHE_HIT_RATIO}{{{PV}}})", "{{pool}} / {{version}}")

# --- Forecasts ---------------------------------------------------------------------------------------------------
# Forecast series: `forecaster` names the pipeline that made them and `band` is point, lower or upper (their former
# names `model` and `ml_forecast` are deprecated: the dashboards read only the new ones).
ACTUAL_KV = Q(f"{rec.KV_USAGE_MAX}{{{RPV}}}", "actual {{pool}} / {{version}}")
FORECAST_KV = Q(_forecast("point"), "forecast +5m {{pool}} / {{version}}")
FORECAST_KV_LOWER = Q(_forecast("lower"), "lower {{pool}} / {{version}}")
FORECAST_KV_UPPER = Q(_forecast("upper"), "upper {{pool}} / {{version}}")
ACTUAL_RPS = Q(f"sum by (pool, version) ({rec.REQ_RATE}{{{RPV}}})", "actual {{pool}} / {{version}}")
FORECAST_RPS = Q(_forecast("point", metric.FORECAST_REQUESTS_PER_SECOND), "forecast +5m {{pool}} / {{version}}")
FORECAST_RPS_UPPER = Q(_forecast("upper", metric.FORECAST_REQUESTS_PER_SECOND), "upper {{pool}} / {{version}}")
BREACH_ETA = Q(
    f"min by (pool, version, threshold) ({metric.FORECAST_BREACH_ETA_SECONDS}{{{PV}}})",
    "{{pool}} / {{version}} > {{threshold}}",
)
BREACH_ETA_NOW = Q(f"min({metric.FORECAST_BREACH_ETA_SECONDS}{{{PV}}})", "soonest", instant=True)
FORECAST_AGE = Q(forecast_age(f"{{{SCOPE}}}"), "{{forecaster}}")
FORECAST_SKIPS = Q(f"sum by (reason) ({metric.FORECAST_SKIPPED}{{{PV}}})", "{{reason}}", instant=True)
# Live backtest: the forecast each forecaster made one horizon ago against what happened (mean absolute error).
BACKTEST_MAE = Q(
    f"avg by (forecaster) (abs(({metric.FORECAST_KV_CACHE_USAGE_RATIO}"
    f'{{{PV},band="point",horizon="{HORIZON}"}} offset {HORIZON}) '
    f"- on (pool, version) group_left () {rec.KV_USAGE_MAX}{{{CLUSTER}}}))",
    "{{forecaster}}",
)

# --- GPU ---------------------------------------------------------------------------------------------------------
GPU = f'{SCOPE},node=~"$node"'
GPU_MEMORY = Q(f'{rec.GPU_MEM_RATIO}{{{CLUSTER},node=~"$node"}}', "{{node}} gpu {{gpu}}")
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
TARGETS_UP = Q(f"{metric.TARGET_UP}{{{SCOPE}}}", "{{target}} ({{kind}})", instant=True)
SCRAPE_DURATION = Q(f"{metric.TARGET_SCRAPE_DURATION_SECONDS}{{{SCOPE}}}", "{{target}}")
#: an expected family absent from a source's page (a renamed metric): 1 per target and metric
TARGET_METRIC_MISSING = Q(
    f"max by (target, metric) ({metric.TARGET_METRIC_MISSING}{{{SCOPE}}})", "{{target}}: {{metric}}"
)
#: families dropped from a page for a malformed line, in the last hour (the rest of the target is kept)
TARGET_PARSE_ERRORS = Q(
    f"sum by (target, family) (increase({metric.TARGET_PARSE_ERRORS_TOTAL}{{{SCOPE}}}[1h]))", "{{target}}: {{family}}"
)

# --- Actuator ----------------------------------------------------------------------------------------------------
# `pool` on the actuator's series is what an action changes: a pool, or `fleet` for fleet-wide settings.
AP = f'{SCOPE},pool=~"$pool|fleet"'
ACTUATOR_MODE = Q(f"max({metric.ACTUATOR_ACTIVE}{{{SCOPE}}})", "active (1) / advisory (0)")
ACTUATOR_LEADER = Q(f"sum({metric.ACTUATOR_LEADER}{{{SCOPE}}})", "replicas leading")  # exactly 1 when healthy
ACTUATOR_FENCED = Q(f"max({metric.ACTUATOR_FENCED}{{{SCOPE}}})", "fenced (leads, cannot act)")
ACTUATOR_FROZEN = Q(f"max({metric.ACTUATOR_FROZEN}{{{SCOPE}}})", "frozen")
#: the audit trail: 1 while it cannot be written (the actuator then does not act); decisions of unknown outcome
ACTUATOR_AUDIT_FAILED = Q(f"max({metric.ACTUATOR_AUDIT_FAILED}{{{SCOPE}}})", "audit trail unusable")
ACTUATOR_AUDIT_UNKNOWN = Q(f"sum({metric.ACTUATOR_AUDIT_UNKNOWN}{{{SCOPE}}})", "decisions of unknown outcome")
ACTUATOR_AUDIT_UNRECORDED = Q(
    f"sum(increase({metric.ACTUATOR_AUDIT_UNRECORDED_TOTAL}{{{SCOPE}}}[1h]))", "rows not recorded (last hour)"
)
# the same series now, for the stats of the Now row
ACTUATOR_ACTIVE = ACTUATOR_MODE.now("active")  # 1 active, 0 advisory
ACTUATOR_LEADERS = ACTUATOR_LEADER.now("leaders")
ACTUATOR_FROZEN_NOW = ACTUATOR_FROZEN.now("frozen")
ACTUATOR_FENCED_NOW = ACTUATOR_FENCED.now("fenced")
ACTUATOR_AUDIT_FAILED_NOW = ACTUATOR_AUDIT_FAILED.now("audit failed")
ACTUATOR_AUDIT_UNKNOWN_NOW = ACTUATOR_AUDIT_UNKNOWN.now("unknown")
ACTUATOR_BUDGET_NOW = Q(f"max({metric.ACTUATOR_CHANGE_BUDGET_USED_RATIO}{{{AP}}})", "worst", instant=True)
ACTUATOR_ACTIONS = Q(
    f"sum by (outcome) (increase({metric.ACTUATOR_ACTIONS_TOTAL}{{{AP}}}[$__rate_interval]))", "{{outcome}}"
)  # per scrape-window: bars on a timeline
#: what the actuator did against what it only proposed: `applied` (acting) and `advisory` (proposed, not applied)
ACTUATOR_APPLIED_VS_ADVISORY = Q(
    f"sum by (outcome) (increase({metric.ACTUATOR_ACTIONS_TOTAL}"
    f'{{{AP},outcome=~"applied|advisory"}}[$__rate_interval]))',
    "{{outcome}}",
)
#: actions the guardrails or the backend refused (or that failed), by action and pool, in the last hour
ACTUATOR_REFUSALS = Q(
    f'sum by (action, pool, outcome) (increase({metric.ACTUATOR_ACTIONS_TOTAL}{{{AP},outcome=~"refused|failed"}}[1h]))',
    "{{outcome}}: {{action}} {{pool}}",
)
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
ACTUATOR_FREEZES = Q(f"sum by (reason) (increase({metric.ACTUATOR_FREEZES_TOTAL}{{{SCOPE}}}[1h]))", "{{reason}}")
ACTUATOR_BUDGET = Q(f"{metric.ACTUATOR_CHANGE_BUDGET_USED_RATIO}{{{AP}}}", "{{pool}}")


def _actuator_latency(q: float) -> Q:
    """The `q` quantile of the actuator's decision-to-action latency, per control loop."""
    return Q(
        f"histogram_quantile({q:g}, sum by (le, loop) "
        f"(rate({metric.ACTUATOR_DECISION_LATENCY_SECONDS}_bucket{{{SCOPE}}}[$__rate_interval])))",
        f"p{q * 100:g} {{{{loop}}}}",
    )


ACTUATOR_LATENCY_P99 = _actuator_latency(0.99)
ACTUATOR_LATENCY_P50 = _actuator_latency(0.5)
ACTUATOR_TICKS = Q(
    f"sum by (loop, outcome) (increase({metric.ACTUATOR_TICKS_TOTAL}{{{SCOPE}}}[$__rate_interval]))",
    "{{loop}} {{outcome}}",
)
ACTUATOR_ALERTS = Q(
    f"sum by (outcome) (increase({metric.ACTUATOR_WEBHOOK_ALERTS_TOTAL}{{{SCOPE}}}[$__rate_interval]))",
    "{{outcome}}",
)

# --- vLLM's own families (the latency panels) --------------------------------------------------------------------
# VLLM_TTFT and VLLM_SUCCESS are alertrules/slo.py's: the SLIs read the same families.
#: time per output token (TPOT) of each request: its decode time / (output tokens - 1)
VLLM_TPOT = "vllm:request_time_per_output_token_seconds"
VLLM_ITL = "vllm:inter_token_latency_seconds"
VLLM_E2E = "vllm:e2e_request_latency_seconds"
VLLM_QUEUE = "vllm:request_queue_time_seconds"
VLLM_PREFILL = "vllm:request_prefill_time_seconds"
VLLM_DECODE = "vllm:request_decode_time_seconds"
VLLM_RUNNING = "vllm:num_requests_running"
VLLM_WAITING = "vllm:num_requests_waiting"
VLLM_PREEMPTIONS = "vllm:num_preemptions_total"
VLLM_KV_USAGE = "vllm:kv_cache_usage_perc"
VLLM_PROMPT_TOKENS = "vllm:prompt_tokens_total"
VLLM_GENERATION_TOKENS = "vllm:generation_tokens_total"
#: every vLLM family the dashboards read (the test checks each against vLLM's exposition)
VLLM_FAMILIES = (
    VLLM_TTFT, VLLM_TPOT, VLLM_ITL, VLLM_E2E, VLLM_QUEUE, VLLM_PREFILL, VLLM_DECODE, VLLM_SUCCESS, VLLM_RUNNING,
    VLLM_WAITING, VLLM_PREEMPTIONS, VLLM_KV_USAGE, VLLM_PROMPT_TOKENS, VLLM_GENERATION_TOKENS,
)  # fmt: skip
VLLM = f'{SCOPE},model_name=~"$model_name"'
#: how a legend names a version's vLLM series (its version, then the served model name)
VERSION_LEGEND = "{{version}} ({{model_name}})"


def vllm_series(family: str, selector: str = VLLM) -> str:
    """A vLLM family (or a histogram's `_bucket`, `_sum`, `_count`) of the selected engines."""
    return f"{family}{{{selector}}}"


def vllm_rate(family: str, selector: str = VLLM) -> str:
    """The per-second rate of a vLLM counter (or histogram part) of the selected engines, over Grafana's rate
    interval."""
    return f"rate({vllm_series(family, selector)}[$__rate_interval])"


def versioned(expr: str, versions: Mapping[str, str]) -> str:
    """`expr` with a `version` label added from its `model_name`: `versions` maps version -> served model name (the
    fleet file's `versions.<v>.model.name`).  A model the fleet file does not name keeps no `version` label (its
    legend shows the model name alone)."""
    out = expr
    for version, model in versions.items():
        pattern = re.escape(model).replace("\\", "\\\\")  # a regex, inside a PromQL string
        out = f'label_replace({out}, "version", "{version}", "model_name", "{pattern}")'
    return out


def latency_quantile(family: str, q: float, versions: Mapping[str, str], selector: str = VLLM, what: str = "") -> Q:
    """The `q` quantile of a vLLM latency histogram per version, over every engine of that version; `what` starts
    the legend where two families share a panel (prefill, decode)."""
    rates = versioned(vllm_rate(f"{family}_bucket", selector), versions)
    return Q(
        f"histogram_quantile({q:g}, sum by (le, model_name, version) ({rates}))",
        f"{what + ' ' if what else ''}p{q * 100:g} {VERSION_LEGEND}",
    )


def latency_worst(family: str, q: float, versions: Mapping[str, str]) -> Q:
    """The worst version's `q` quantile now (a stat)."""
    return Q(f"max({latency_quantile(family, q, versions).expr})", f"worst p{q * 100:g}", instant=True)


def latency_mean(family: str, versions: Mapping[str, str]) -> Q:
    """The mean of a vLLM latency histogram per version: rate of its sum / rate of its count."""
    num = versioned(vllm_rate(f"{family}_sum"), versions)
    den = versioned(vllm_rate(f"{family}_count"), versions)
    by = "sum by (model_name, version)"
    return Q(f"{by} ({num}) / {by} ({den})", f"mean {VERSION_LEGEND}")


def vllm_by_version(expr_of: str, versions: Mapping[str, str], legend: str, agg: str = "sum") -> Q:
    """A vLLM gauge or rate summed (or `agg`ed) per version."""
    return Q(f"{agg} by (model_name, version) ({versioned(expr_of, versions)})", legend)


# --- annotations -------------------------------------------------------------------------------------------------
#: infercast's alerts while they fire (Prometheus' ALERTS series): one event per alert and label set
ANNOTATION_ALERTS = f'ALERTS{{{CLUSTER},alertstate="firing",alertname=~"Infercast.*"}}'
#: actions the actuator applied (or rolled back) per scrape window: one event per action and pool
ANNOTATION_ACTIONS = (
    f"sum by (action, pool, outcome) (increase({metric.ACTUATOR_ACTIONS_TOTAL}"
    f'{{{SCOPE},outcome=~"applied|rolled_back"}}[$__interval])) > 0'
)
#: actions an advisory actuator proposed and did not apply
ANNOTATION_PROPOSALS = (
    f'sum by (action, pool) (increase({metric.ACTUATOR_ACTIONS_TOTAL}{{{SCOPE},outcome="advisory"}}[$__interval])) > 0'
)

# --- template variables ------------------------------------------------------------------------------------------
VAR_CLUSTER = "label_values(up, cluster)"
VAR_NAMESPACE = f"label_values(up{{{CLUSTER}}}, namespace)"
VAR_POOL = f"label_values({metric.KV_CACHE_USAGE_RATIO}{{{SCOPE}}}, pool)"
VAR_VERSION = f'label_values({metric.KV_CACHE_USAGE_RATIO}{{{SCOPE},pool=~"$pool"}}, version)'
VAR_NODE = f"label_values({metric.GPU_TEMPERATURE_CELSIUS}{{{SCOPE}}}, node)"
VAR_ACTUATOR_POOL = f"label_values({metric.ACTUATOR_DECISIONS_TOTAL}{{{SCOPE}}}, pool)"
VAR_MODEL_NAME = f"label_values({VLLM_RUNNING}{{{SCOPE}}}, model_name)"
