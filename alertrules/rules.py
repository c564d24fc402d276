"""Prometheus recording and alerting rules, built from `AlertSettings` (pure: settings in, rule groups out).

Recording rules are named `level:metric:operations` (Prometheus' recording-rule convention) and every metric name
is a symbol of the catalog, so a renamed metric breaks here at import time, not silently in Prometheus.  Alerts
read the recorded series where one exists, so dashboards and alerts agree on what "KV usage of a pool" means.
One function per alert group (`GROUPS`), rules built with keyword arguments, runbook links added in one place
(`with_runbooks`).
"""

from __future__ import annotations

from typing import Any

from infercast.catalog import (
    ACTUATOR_ACTIONS_TOTAL,
    ACTUATOR_AUDIT_FAILED,
    ACTUATOR_AUDIT_UNKNOWN,
    ACTUATOR_AUDIT_UNRECORDED_TOTAL,
    ACTUATOR_FENCED,
    ACTUATOR_LEADER,
    BATCH_SATURATION_RATIO,
    DEGRADATIONS_TOTAL,
    FORECAST_KV_CACHE_USAGE_RATIO,
    FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS,
    FORECAST_SKIPPED,
    GPU_ECC_ERRORS_TOTAL,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USED_BYTES,
    GPU_TEMPERATURE_CELSIUS,
    GPU_XID_ERRORS_TOTAL,
    KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    KV_CACHE_FRAGMENTATION_RATIO,
    KV_CACHE_USAGE_RATIO,
    REC_ENGINE_KV_USAGE,
    REC_FLEET_ENGINE_KV_USAGE,
    ROUTER_REQUESTS_TOTAL,
    TARGET_METRIC_MISSING,
    TARGET_PARSE_ERRORS_TOTAL,
    TARGET_UP,
)
from infercast.durations import duration

from .recorded import (
    BATCH_SAT_AVG,
    DEGRADATION_RATE,
    FAILURE_RATE,
    FORECAST_UPPER,
    FRAG_AVG,
    FRAG_FULL,
    GPU_MEM_RATIO,
    KV_USAGE_AVG,
    KV_USAGE_FLEET,
    KV_USAGE_MAX,
    REQ_RATE,
    REQ_SHARE,
)
from .settings import AlertSettings
from .shape import alert_rule as _alert
from .slo import error_ratio, slo_alerts, slo_recording_rules
from .sources import engine_series, translate

#: the jobs Prometheus scrapes infercast's own services under (deploy/prometheus*.yml use these names)
JOBS = ("infercast-exporter", "infercast-predictor", "infercast-actuator")


def recording_rules(s: AlertSettings) -> list[dict[str, Any]]:
    """The recording group, then the SLO group (alertrules/slo.py); with `metrics_source` engines, the aggregates the
    engine rules record (alertrules/sources.py) are left out and what reads them reads the engine rules
    (`for_source`)."""
    return [*_serving_recording_rules(s), *slo_recording_rules(s)]


def _serving_recording_rules(s: AlertSettings) -> list[dict[str, Any]]:
    groups = _recording_rules(s)
    if s.metrics_source != "engines":
        return groups
    engine_path = engine_series(s.rate_window)
    rules = []
    for rule in groups[0]["rules"]:
        if rule["record"] in engine_path:
            continue
        if rule["record"] == FRAG_FULL:
            # the exporter's fragmentation joined to the engine's own KV usage on the engine's address: scraped
            # without honor_labels, the exporter's `instance` (the engine's address) is `exported_instance`
            frag = f'label_replace({KV_CACHE_FRAGMENTATION_RATIO}, "instance", "$1", "exported_instance", "(.+)")'
            rule = {"record": FRAG_FULL, "expr": _fragmentation_when_full(frag, REC_ENGINE_KV_USAGE, s)}
        rules.append(rule)
    rules.append({"record": REC_FLEET_ENGINE_KV_USAGE, "expr": f"avg({REC_ENGINE_KV_USAGE})"})
    return [{"name": groups[0]["name"], "rules": rules}]


def _recording_rules(s: AlertSettings) -> list[dict[str, Any]]:
    return [
        {
            "name": "infercast.recording",
            "rules": [
                {"record": REQ_RATE, "expr": f"sum by (pool, version) (rate({ROUTER_REQUESTS_TOTAL}[5m]))"},
                {
                    "record": REQ_SHARE,
                    "expr": f"sum by (version) ({REQ_RATE}) / on () group_left () sum({REQ_RATE})",
                },
                {"record": KV_USAGE_AVG, "expr": f"avg by (pool, version) ({KV_CACHE_USAGE_RATIO})"},
                {"record": KV_USAGE_MAX, "expr": f"max by (pool, version) ({KV_CACHE_USAGE_RATIO})"},
                {"record": KV_USAGE_FLEET, "expr": f"avg({KV_CACHE_USAGE_RATIO})"},
                {"record": FRAG_AVG, "expr": f"avg by (pool, version) ({KV_CACHE_FRAGMENTATION_RATIO})"},
                {
                    # fragmentation only hurts a node that is nearly full (seed 000's failing node)
                    "record": FRAG_FULL,
                    "expr": _fragmentation_when_full(KV_CACHE_FRAGMENTATION_RATIO, KV_CACHE_USAGE_RATIO, s),
                },
                {
                    "record": FAILURE_RATE,
                    "expr": f"sum by (pool, version) (rate({KV_BLOCK_ALLOCATION_FAILURES_TOTAL}[5m]))",
                },
                {
                    "record": DEGRADATION_RATE,
                    "expr": f"sum by (from_version, to_version, reason) (rate({DEGRADATIONS_TOTAL}[5m]))",
                },
                {"record": BATCH_SAT_AVG, "expr": f"avg by (pool, version) ({BATCH_SATURATION_RATIO})"},
                {
                    # the most pessimistic forecaster's upper band, per pool, version and horizon
                    "record": FORECAST_UPPER,
                    "expr": f'max by (pool, version, horizon) ({FORECAST_KV_CACHE_USAGE_RATIO}{{band="upper"}})',
                },
                {
                    "record": GPU_MEM_RATIO,
                    "expr": f"max by (node, gpu, uuid) ({GPU_MEMORY_USED_BYTES}) "
                    f"/ max by (node, gpu, uuid) ({GPU_MEMORY_TOTAL_BYTES})",
                },
            ],
        }
    ]


def _fragmentation_when_full(fragmentation: str, kv_usage: str, s: AlertSettings) -> str:
    """The worst `fragmentation` per pool and version among the instances whose `kv_usage` is at or over the
    forecast trigger (`FRAG_FULL`, from the exporter's series or the engine rules')."""
    return (
        f"max by (pool, version) ({fragmentation} and on (pool, version, instance) "
        f"({kv_usage} >= {s.thresholds.kv_forecast_trigger}))"
    )


def _pct(x: float) -> str:
    return f"{x * 100:g}%"


def with_runbooks(groups: list[dict[str, Any]], base_url: str) -> list[dict[str, Any]]:
    """Every alert's `runbook_url` annotation, in one place: `{base_url}/{alert}.md` (alertrules/runbooks/)."""
    for group in groups:
        for rule in group["rules"]:
            rule["annotations"]["runbook_url"] = f"{base_url}/{rule['alert']}.md"
    return groups


def alert_names(s: AlertSettings | None = None) -> list[str]:
    """Every alert name, in the order of the rules file."""
    return [r["alert"] for g in alerting_rules(s or AlertSettings()) for r in g["rules"]]


#: how descriptions name a pool's version
PV = "{{ $labels.version }} in pool {{ $labels.pool }}"
#: the KV usage of the alert's pool and version now, rendered in a description
NOW_USAGE = (
    f"{{{{ with printf \"{KV_USAGE_MAX}{{pool='%s',version='%s'}}\" $labels.pool $labels.version | query }}}}"
    "{{ . | first | value | humanizePercentage }}{{ else }}unknown{{ end }}"
)
#: pools the actuator applied an action to in the last 10 minutes
ACTIONS_APPLIED = f'sum by (pool) (increase({ACTUATOR_ACTIONS_TOTAL}{{outcome="applied"}}[10m])) > 0'


def _forecast_upper(s: AlertSettings) -> str:
    """The recorded upper band of the KV forecast at the alerts' horizon."""
    return f'{FORECAST_UPPER}{{horizon="{s.forecast_horizon_seconds}s"}}'


def forecast_age(selector: str = "") -> str:
    """Seconds since each forecaster's last successful round, of the series `selector` (`{...}`) picks: what
    InfercastForecastsStale compares with the staleness limit, and the forecasts dashboard draws."""
    return f"time() - max by (forecaster) ({FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS}{selector})"


def predictive_alerts(s: AlertSettings) -> list[dict[str, Any]]:
    """The forecast alerts: a breach coming within the horizon, and one the actuator has already acted on."""
    t = s.thresholds
    horizon = duration(s.forecast_horizon_seconds)
    trig = t.kv_forecast_trigger
    upper = _forecast_upper(s)
    # Hysteresis: once firing, the alert holds while the band stays over the trigger minus the hysteresis (its own
    # ALERTS series says it is firing); persistence is its `for:`.  predictors/alarm.py scores the same logic.
    hold = round(trig - t.kv_forecast_hysteresis, 6)
    firing = 'ALERTS{alertname="InfercastKVCacheForecastBreach",alertstate="firing"}'
    breach_expr = f"{upper} > {trig}"
    if t.kv_forecast_hysteresis > 0:
        breach_expr = f"{upper} > {trig} or ({upper} > {hold} and on (pool, version, horizon) {firing})"
    return [
        _alert(
            name="InfercastKVCacheForecastBreach",
            expr=breach_expr,
            for_s=s.for_forecast_breach,
            severity="warning",
            team="serving",
            summary=f"KV-cache usage is forecast to cross {_pct(trig)} within {horizon}.",
            description=f"The upper band of the {horizon} KV-cache usage forecast for {PV} is "
            f"{{{{ $value | humanizePercentage }}}} (trigger {_pct(trig)}); usage now is {NOW_USAGE}.",
            kind="predictive",
            actuator="notify",
        ),
        _alert(
            name="InfercastKVCacheForecastBreachMitigated",
            # Verified working, never merely applied: an action in the pool, the fullest instance's KV usage
            # falling, and not one request refused or failed in the pool over the short SLO window.  Only then does
            # it hide InfercastKVCacheUsageHigh (alertmanager.py); a busy actuator whose actions do not help hides
            # nothing, and no inhibition ever touches the SLO pages.
            expr=f"({upper} > {trig}) and on (pool) ({ACTIONS_APPLIED}) "
            f"and on (pool, version) (deriv({KV_USAGE_MAX}[{duration(s.for_symptom_falling)}]) < 0) "
            f'unless on (pool, version) ({error_ratio("fast_short")}{{slo="availability"}} > 0)',
            for_s=s.for_mitigated,
            severity="info",
            team="serving",
            summary="The actuator's action on a forecast KV-cache breach is working; the threshold alert is inhibited.",
            description=f"The {horizon} forecast for {PV} is {{{{ $value | humanizePercentage }}}}, the actuator "
            "applied an action to the pool in the last 10 minutes, the fullest instance's KV usage has been falling "
            f"for {duration(s.for_symptom_falling)} and no request was refused or failed there in the last "
            "5 minutes, so InfercastKVCacheUsageHigh does not page while this holds.",
            kind="predictive",
        ),
    ]


def kv_alerts(s: AlertSettings) -> list[dict[str, Any]]:
    """KV-cache usage, fragmentation, allocation failures and batch saturation now."""
    t = s.thresholds
    return [
        _alert(
            name="InfercastKVCacheUsageHigh",
            # Not `for:`: while a pool melts down, instances OOM, restart and dip below the breaker, which resets a
            # `for:` timer every few seconds (the end-to-end test saw it never fire).  The median over the window
            # asks "above the breaker for most of the last minute" instead.
            expr=f"quantile_over_time(0.5, {KV_USAGE_MAX}[{duration(s.for_kv_usage)}]) > {t.memory_breaker}",
            for_s=0,
            severity="critical",
            team="serving",
            summary=f"KV-cache usage is above the {_pct(t.memory_breaker)} memory breaker.",
            description=f"The fullest instance of {PV} spent most of the last {duration(s.for_kv_usage)} above the "
            f"{_pct(t.memory_breaker)} memory breaker (median {{{{ $value | humanizePercentage }}}}); "
            "new requests are being refused there.",
            actuator="notify",
        ),
        _alert(
            name="InfercastKVCacheFragmentationHigh",
            # The pool's mean, not its worst instance: on a calm twin the worst of 12 lightly loaded instances
            # spends minutes above 0.20 (a node holding few requests has a high ratio of empty blocks) while the
            # mean stays near the seed's 0.13; the worst instance paged the serving team 2.5 minutes into a calm run.
            expr=f"{FRAG_AVG} > {t.fragmentation_warning}",
            for_s=s.for_fragmentation_warning,
            severity="warning",
            team="serving",
            summary=f"KV-cache fragmentation is above {_pct(t.fragmentation_warning)}.",
            description=f"On average {{{{ $value | humanizePercentage }}}} of the allocated KV capacity of {PV} holds "
            "no token "
            f"(warning {_pct(t.fragmentation_warning)}, critical {_pct(t.fragmentation_release)} on a full instance).",
        ),
        _alert(
            name="InfercastKVCacheFragmentationCritical",
            # An instance that is both full (KV usage at the forecast trigger or over) and fragmented: seed 000's
            # failing node.  The worst instance alone is above 0.25 for minutes on a calm, lightly loaded fleet.
            expr=f"{FRAG_FULL} > {t.fragmentation_release}",
            for_s=s.for_fragmentation_critical,
            severity="warning",  # a cause: the actuator already releases batches; the SLO pages say if users feel it
            team="serving",
            summary=f"KV-cache fragmentation is above {_pct(t.fragmentation_release)} on a full instance.",
            description=f"{{{{ $value | humanizePercentage }}}} of the allocated KV capacity of an instance of {PV} "
            "with KV usage "
            f"at {_pct(t.kv_forecast_trigger)} or more holds no token (critical {_pct(t.fragmentation_release)}): "
            "batches are being released to reclaim it.",
            actuator="notify",
        ),
        _alert(
            name="InfercastKVBlockAllocationFailures",
            expr=f"{FAILURE_RATE} > {s.block_failure_rate}",
            for_s=s.for_block_failures,
            severity="warning",
            team="serving",
            summary="KV blocks cannot be allocated (preemptions or rejections are climbing).",
            description=f'{PV} fails {{{{ $value | printf "%.2f" }}}} KV block allocations per second '
            f"(5-minute rate, threshold {s.block_failure_rate:g}/s).",
        ),
        _alert(
            name="InfercastBatchSaturated",
            expr=f"{BATCH_SAT_AVG} >= {s.batch_pinned_ratio}",
            for_s=s.for_batch_pinned,
            severity="warning",
            team="serving",
            summary="Batches are pinned at their maximum size.",
            description=f"Batch saturation of {PV} averages {{{{ $value | humanizePercentage }}}} of the maximum batch "
            "size; "
            "requests queue behind full batches.",
        ),
    ]


def router_alerts(s: AlertSettings) -> list[dict[str, Any]]:
    """The router: errors, degradation storms and failover onto versions without headroom."""
    t = s.thresholds
    horizon = duration(s.forecast_horizon_seconds)
    trig = t.kv_forecast_trigger
    upper = _forecast_upper(s)
    degradation_total = f"sum by (from_version) ({DEGRADATION_RATE})"
    to_upper = f'label_replace(max by (version) ({upper}), "to_version", "$1", "version", "(.*)")'
    return [
        _alert(
            name="InfercastDegradationStorm",
            expr=f'label_replace({degradation_total}, "version", "$1", "from_version", "(.*)") '
            f"> {s.degradation_storm_rate}",
            for_s=s.for_degradation_storm,
            severity="critical",
            team="serving",
            summary="The router is degrading requests away from a model version at a storm rate.",
            description=f'{{{{ $value | printf "%.2f" }}}} degradations per second away from '
            "{{ $labels.from_version }} "
            f"(5-minute rate, storm threshold {s.degradation_storm_rate:g}/s).",
        ),
        _alert(
            name="InfercastFailoverWithoutHeadroom",
            expr=f'label_replace(sum by (from_version, to_version) ({DEGRADATION_RATE}) > 0, "version", "$1", '
            f'"to_version", "(.*)") and on (to_version) ({to_upper} > {trig})',
            for_s=s.for_failover_headroom,
            severity="warning",  # a forecast about the failover target: the SLO pages say when users feel it
            team="serving",
            summary="Traffic is failing over to a model version without forecast headroom.",
            description=f'The router degrades {{{{ $value | printf "%.2f" }}}} requests per second from '
            f"{{{{ $labels.from_version }}}} to {{{{ $labels.to_version }}}}, whose {horizon} KV-cache forecast "
            f"upper band is above {_pct(trig)}: "
            "the failover target is about to collapse too (seed 000's v3.5 cascade).",
            actuator="notify",
        ),
    ]


def gpu_alerts(s: AlertSettings) -> list[dict[str, Any]]:
    """GPU memory, temperature, ECC and XID errors."""
    t = s.thresholds
    gpu_id = "GPU {{ $labels.gpu }} on {{ $labels.node }}"
    ecc_any = f"sum by (node, gpu, uuid) (increase({GPU_ECC_ERRORS_TOTAL}[10m])) > {s.ecc_spike_errors}"
    ecc_unc = f'sum by (node, gpu, uuid) (increase({GPU_ECC_ERRORS_TOTAL}{{type="uncorrectable"}}[10m])) > 0'
    hardware = "|".join(str(x) for x in s.hardware_xids)

    def xid_errors(match: str) -> str:
        """XID errors per GPU and code in 10 minutes, of the codes that `match` (=~ or !~) the hardware list."""
        return f'sum by (node, gpu, uuid, xid) (increase({GPU_XID_ERRORS_TOTAL}{{xid{match}"{hardware}"}}[10m])) > 0'

    xids_seen = f"{gpu_id} reported XID {{{{ $labels.xid }}}} {{{{ $value | humanize }}}} times in 10 minutes"
    return [
        _alert(
            name="InfercastGPUTemperatureHigh",
            expr=f"max by (node, gpu, uuid) ({GPU_TEMPERATURE_CELSIUS}) > {t.gpu_temperature_celsius:g}",
            for_s=s.for_gpu_temperature,
            severity="critical",
            team="hardware",
            summary=f"A GPU is hotter than {t.gpu_temperature_celsius:g} C.",
            description=f"{gpu_id} is at {{{{ $value }}}} C (hardware breaker {t.gpu_temperature_celsius:g} C).",
            actuator="notify",
        ),
        _alert(
            name="InfercastGPUECCErrorSpike",
            expr=f"({ecc_any}) or ({ecc_unc})",
            for_s=0,
            severity="critical",
            team="hardware",
            summary="A GPU reports a spike of ECC memory errors.",
            description=f"{gpu_id} reported {{{{ $value | humanize }}}} ECC errors in 10 minutes "
            f"(spike: more than {s.ecc_spike_errors}, or any uncorrectable one).",
        ),
        _alert(
            name="InfercastGPUXIDErrors",
            expr=xid_errors("=~"),
            for_s=0,
            severity="critical",
            team="hardware",
            summary="The GPU driver reports a hardware XID error.",
            description=f"{xids_seen}: one of the XIDs that mean the GPU needs a reset, a drain or a replacement.",
        ),
        _alert(
            name="InfercastGPUXIDErrorsNonHardware",
            expr=xid_errors("!~"),
            for_s=0,
            severity="warning",
            team="hardware",
            summary="The GPU driver reports an XID error that is not a hardware fault.",
            description=f"{xids_seen} (an application or driver event, not on the hardware list: look at the process "
            "that caused it).",
        ),
    ]


def pipeline_alerts(s: AlertSettings) -> list[dict[str, Any]]:
    """infercast's own parts: the alerting pipeline, the scrapes, the predictor's forecasts, the actuator and what
    the exporter reads from its sources (one function each, in the order of the rules file)."""
    return [*_watchdog_alerts(s), *_scrape_alerts(s), *_forecast_alerts(s), *_actuator_alerts(s), *_source_alerts(s)]


def _watchdog_alerts(s: AlertSettings) -> list[dict[str, Any]]:
    """The alerting pipeline itself: the dead man's switch, and the series the pages read."""
    return [
        _alert(
            name="InfercastWatchdog",
            # always firing: a dead man's switch.  Alertmanager sends it to the `watchdog` receiver every minute;
            # whatever watches that receiver pages when it stops (Prometheus, its rules or Alertmanager are down)
            expr="vector(1)",
            for_s=0,
            severity="none",
            team="platform",
            summary="Always firing: the alerting pipeline works (a dead man's switch).",
            description="Prometheus evaluates infercast's rules and Alertmanager delivers them; if this stops "
            "arriving at the watchdog receiver, no page can arrive either.",
        ),
        _alert(
            name="InfercastPageInputAbsent",
            expr=" or ".join(f'label_replace({gone}, "input", "{what}", "", "")' for gone, what in _page_inputs(s)),
            for_s=s.for_page_input_absent,
            severity="critical",
            team="platform",
            summary="A series the pages read is absent: those pages are blind.",
            description="Prometheus has no {{ $labels.input }}: the pages that read it cannot fire "
            "(docs/alerting.md lists what each page reads).",
        ),
    ]


def _scrape_alerts(s: AlertSettings) -> list[dict[str, Any]]:
    """Scrapes that fail: a pool's engines, the exporter's sources, infercast's own services."""
    jobs = "|".join(JOBS)
    return [
        _alert(
            name="InfercastEnginesDown",
            expr=f"(count by (pool) ({_engines_up(s)} == 0) / count by (pool) ({_engines_up(s)})) >= 0.5",
            for_s=s.for_engines_down,
            severity="critical",
            team="serving",
            summary="Half or more of a pool's engines are down.",
            description="{{ $value | humanizePercentage }} of the engines of pool {{ $labels.pool }} do not answer "
            "their scrape: the pool serves at half its capacity or less.",
        ),
        _alert(
            name="InfercastTargetDown",
            expr=f"{TARGET_UP} == 0",
            for_s=s.for_target_down,
            severity="warning",
            team="platform",
            summary="The infercast exporter cannot scrape one of its sources.",
            description="The exporter's last scrape of {{ $labels.target }} ({{ $labels.kind }}) failed; its metrics "
            "are absent, "
            "so dashboards and forecasts for it go blank.",
        ),
        _alert(
            name="InfercastExporterDown",
            expr=f'up{{job=~"{jobs}"}} == 0',
            for_s=s.for_exporter_down,
            severity="critical",
            team="platform",
            summary="Prometheus cannot scrape an infercast service.",
            description="Prometheus's scrape of {{ $labels.job }} at {{ $labels.instance }} fails; "
            "every alert that reads its series is blind.",
        ),
    ]


def _forecast_alerts(s: AlertSettings) -> list[dict[str, Any]]:
    """The predictor's forecasts: stale, or missing for a pool it should cover."""
    return [
        _alert(
            name="InfercastForecastsStale",
            expr=f"({forecast_age()} > {s.forecast_stale_seconds:g}) or "
            # never published: only when the predictor is up and not still collecting its first history
            f'(absent({FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS}) and on () (max(up{{job="infercast-predictor"}}) == 1) '
            f'unless on () (count({FORECAST_SKIPPED}{{reason="too_short"}}) > 0))',
            for_s=s.for_forecast_stale,
            severity="warning",
            team="platform",
            summary="Forecasts are stale: the predictive alert and the actuator are blind.",
            description="{{ with $labels.forecaster }}The last successful forecast of forecaster {{ . }} is "
            "{{ $value | humanizeDuration }} "
            f"old (stale after {duration(s.forecast_stale_seconds)}){{{{ else }}}}The predictor is up but no "
            "forecaster has published a successful forecast{{ end }}.",
        ),
        _alert(
            name="InfercastForecastMissing",
            # Per (pool, version), so it sees what a per-forecaster staleness cannot: with sharded predictors
            # (predictors/shard.py) one dead replica leaves the others' timestamps fresh, and its pools' forecasts
            # simply vanish.  A pool counts as owned while some replica publishes a forecast or a skip reason for it.
            expr=f"({KV_USAGE_AVG} unless on (pool, version) {FORECAST_KV_CACHE_USAGE_RATIO}) "
            f'unless on (pool, version) {FORECAST_SKIPPED}{{series="kv"}}',
            for_s=s.for_forecast_missing,
            severity="warning",
            team="platform",
            summary="A pool's KV usage is observed but no predictor forecasts it.",
            description=f"No predictor replica publishes a KV-cache forecast (or a reason to skip one) for {PV}: the "
            "replica whose "
            "shard holds it is down or was never started, so the predictive alert and the actuator are blind there.",
        ),
    ]


def _actuator_alerts(s: AlertSettings) -> list[dict[str, Any]]:
    """The actuator: flapping, frozen while a breach is forecast, its audit trail, its fencing."""
    trig = s.thresholds.kv_forecast_trigger
    upper = _forecast_upper(s)
    return [
        _alert(
            name="InfercastActuatorFlapping",
            expr=f'sum by (pool) (increase({ACTUATOR_ACTIONS_TOTAL}{{outcome=~"applied|rolled_back"}}[15m])) '
            f"> {s.flapping_actions}",
            for_s=s.for_actuator_flapping,
            severity="warning",
            team="platform",
            summary="The actuator keeps changing a pool back and forth.",
            description="The actuator applied or rolled back {{ $value | humanize }} actions on pool {{ $labels.pool "
            "}} "
            f"in 15 minutes (flapping above {s.flapping_actions}).",
        ),
        _alert(
            name="InfercastActuatorFrozen",
            expr=f"((max by (pool) ({upper}) > {trig}) unless on (pool) "
            f"(sum by (pool) (increase({ACTUATOR_ACTIONS_TOTAL}[{duration(s.frozen_quiet_seconds)}])) > 0) "
            f"and on () (count({ACTUATOR_LEADER}) > 0)) or (sum({ACTUATOR_LEADER}) == 0)",
            for_s=s.for_actuator_frozen,
            severity="warning",
            team="platform",
            summary="The actuator is not acting while a breach is forecast (or no replica leads).",
            description="{{ with $labels.pool }}Pool {{ . }} has a forecast breach and the actuator decided nothing "
            "about it in "
            f"{duration(s.frozen_quiet_seconds)}{{{{ else }}}}No actuator replica holds the leadership{{{{ end }}}}.",
        ),
        _alert(
            name="InfercastActuatorAuditFailed",
            # the trail unusable (latched until a restart), or rows it could not write (logged whole instead)
            expr=f"({ACTUATOR_AUDIT_FAILED} == 1) or (increase({ACTUATOR_AUDIT_UNRECORDED_TOTAL}[15m]) > 0)",
            for_s=s.for_actuator_audit_failed,
            severity="warning",  # the fleet keeps serving; automation is advisory until someone restores the file
            team="platform",
            summary="The actuator's audit trail cannot be written: it does not act.",
            description="The audit trail of the actuator at {{ $labels.instance }} was deleted, replaced or "
            "corrupted, or rows could not be written (value {{ $value | humanize }}: 1 for the trail, else rows "
            "in 15 minutes, each logged whole: audit: NOT RECORDED). It runs advisory until the file is restored "
            "and the daemon restarted.",
        ),
        _alert(
            name="InfercastActuatorFenced",
            expr=f"{ACTUATOR_FENCED} == 1",
            for_s=s.for_actuator_fenced,
            severity="warning",  # the fleet keeps serving; the actuator acts on nothing until re-acquired
            team="platform",
            summary="The actuator leads but is fenced: its fencing token is behind its backend's.",
            description="The leader at {{ $labels.instance }} holds a fencing token behind the one its backend "
            "has seen (the lease store lost or restored state) and could not re-acquire above it: it leads and "
            "acts on nothing.",
        ),
        _alert(
            name="InfercastActuatorAuditUnknown",
            expr=f"{ACTUATOR_AUDIT_UNKNOWN} > 0",
            for_s=s.for_actuator_audit_unknown,
            severity="warning",
            team="platform",
            summary="Actions of unknown outcome stay unsettled: the audit trail cannot say what the fleet runs.",
            description="{{ $value | humanize }} decisions of the actuator at {{ $labels.instance }} lost their "
            f"answer and have not been read back from the target for {duration(s.for_actuator_audit_unknown)} "
            "(infercast actuator log shows them as unknown).",
        ),
    ]


def _source_alerts(s: AlertSettings) -> list[dict[str, Any]]:
    """What the exporter reads from its sources' pages: a metric gone, malformed lines."""
    return [
        _alert(
            name="InfercastTargetMetricMissing",
            expr=f"{TARGET_METRIC_MISSING} == 1",
            for_s=s.for_target_metric_missing,
            severity="warning",
            team="platform",
            summary="A metric the exporter expects is missing from a source's page.",
            description="{{ $labels.target }} no longer serves {{ $labels.metric }} (renamed or removed by an "
            "engine upgrade?): the panels and forecasts that read it go blank while the source stays up.",
        ),
        _alert(
            name="InfercastTargetParseErrors",
            expr=f"increase({TARGET_PARSE_ERRORS_TOTAL}[15m]) > 0",
            for_s=0,
            severity="warning",
            team="platform",
            summary="A source's page has malformed lines: the exporter drops those families.",
            description="The exporter dropped {{ $labels.family }} from {{ $labels.target }} "
            "{{ $value | humanize }} times in 15 minutes for a malformed line (its log names the line); the rest "
            "of the source is kept.",
        ),
    ]


#: the engines' kinds among the exporter's targets (catalog.TARGET_KINDS less GPUs, the router and the twin)
ENGINE_KINDS = "vllm|sglang|tgi|trtllm"


def _engines_up(s: AlertSettings) -> str:
    """One series per engine, 1 up and 0 down, with its pool: Prometheus' own scrape of the engines in engines mode,
    else the exporter's view of its engine targets (those with a pool)."""
    if s.metrics_source == "engines":
        return 'up{pool!=""}'
    return f'{TARGET_UP}{{kind=~"{ENGINE_KINDS}",pool!=""}}'


def _page_inputs(s: AlertSettings) -> list[tuple[str, str]]:
    """(an expression that is 1 when the series is gone, what it is) for every scrape the pages rely on: each fires
    InfercastPageInputAbsent.  The router's counter exists only where a router reports to the exporter (no series
    are invented without one, issue 38): its absence pages only once it has been seen in the last 6 hours, so a
    fleet without a router is not paged forever for a counter it never had."""
    from .slo import SCRAPED, VLLM_SUCCESS, VLLM_TTFT

    if s.metrics_source == "engines":
        vllm = [
            (f"absent({VLLM_SUCCESS}{{{SCRAPED}}})", "engines' finished requests (the availability SLO)"),
            (f"absent({VLLM_TTFT}_count{{{SCRAPED}}})", "engines' time to first token (the latency SLO)"),
        ]
        return [
            (f"absent(up{{{SCRAPED}}})", "scrape of any engine"),
            *(vllm if s.vllm_engines else []),  # no other engine gives them: their absence is no one's fault
            (f"absent({KV_CACHE_USAGE_RATIO})", "KV-cache usage (InfercastKVCacheUsageHigh)"),
        ]
    router_gone = (
        f"(absent({ROUTER_REQUESTS_TOTAL}) and on () (count(last_over_time({ROUTER_REQUESTS_TOTAL}[6h])) > 0))"
    )
    return [
        ('absent(up{job="infercast-exporter"})', "scrape of infercast-exporter"),
        (router_gone, "router's request counter (the availability SLO)"),
        (f"absent({KV_CACHE_USAGE_RATIO})", "KV-cache usage (InfercastKVCacheUsageHigh)"),
    ]


#: alert group -> its rules, in the order of the rules file (one function per group above)
GROUPS = {
    "infercast.slo": slo_alerts,
    "infercast.predictive": predictive_alerts,
    "infercast.kv-cache": kv_alerts,
    "infercast.router": router_alerts,
    "infercast.gpu": gpu_alerts,
    "infercast.pipeline": pipeline_alerts,
}


def alerting_rules(s: AlertSettings) -> list[dict[str, Any]]:
    """Every alert group, with its runbook links, reading the serving figures from `s.metrics_source`."""
    groups = with_runbooks([{"name": name, "rules": build(s)} for name, build in GROUPS.items()], s.runbook_base_url)
    return for_source(groups, s)


def for_source(groups: list[dict[str, Any]], s: AlertSettings) -> list[dict[str, Any]]:
    """The alert groups with every serving figure read where `s.metrics_source` says (alertrules/sources.py): the
    expressions and the annotations' queries.  The forecast rules read the predictor's series either way."""
    for group in groups:
        for rule in group["rules"]:
            rule["expr"] = translate(rule["expr"], s.metrics_source, s.rate_window)
            rule["annotations"] = {
                k: translate(v, s.metrics_source, s.rate_window) for k, v in rule["annotations"].items()
            }
    return groups


def rule_files(s: AlertSettings) -> dict[str, dict[str, Any]]:
    """File name -> rules document, as Prometheus loads them."""
    return {
        "recording.yml": {"groups": recording_rules(s)},
        "alerts.yml": {"groups": alerting_rules(s)},
    }
