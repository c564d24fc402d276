"""The Grafana dashboards, built as code with grafana-foundation-sdk (pure: builders in, JSON text out).

Six dashboards share the template variables `$datasource`, `$cluster` and `$namespace` (regexes: "All" is `.*`,
which also matches series without the label), the `infercast` tag (the links between them) and two annotations
(infercast's firing alerts; the actuator's applied and proposed actions): fleet overview, KV-cache health and
forecasts (with `$pool` and `$version`), serving latency (vLLM's own histograms, with `$model_name`), GPU (with
`$node`), and the actuator (with `$pool`: the pools it acted on, `fleet` for fleet-wide settings).  All PromQL
lives in `dashboards/queries.py`.  Colour bands and threshold lines come from the fleet file's `thresholds`
(`DashboardSettings.from_fleet`), and the version of a vLLM model from its `versions.<v>.model.name`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders import common as cb
from grafana_foundation_sdk.builders.dashboard import (
    Dashboard,
    DashboardLink,
    DatasourceVariable,
    QueryVariable,
    Row,
    ThresholdsConfig,
)
from grafana_foundation_sdk.builders.prometheus import Dataquery
from grafana_foundation_sdk.builders.stat import Panel as Stat
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DataSourceRef,
    Threshold,
    ThresholdsMode,
    VariableRefresh,
    VariableSort,
)

from infercast.alertrules.settings import AlertSettings
from infercast.alertrules.sources import translate
from infercast.config import FleetConfig, MetricsConfig, SloConfig, Thresholds, load_config
from infercast.resources import example_fleet

from . import queries as q

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
TAG = "infercast"
#: the fleet file the committed dashboards are built from (the same one `infercast k8s build` reads)
DEFAULT_FLEET = example_fleet()


@dataclass(frozen=True)
class DashboardSettings:
    """What the dashboards take from a fleet file: the thresholds (colour bands, threshold lines) and the served
    model name of each version (the latency panels' `version`)."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    #: version -> served model name (vLLM's `model_name`)
    versions: Mapping[str, str] = field(default_factory=dict)
    #: batch saturation that counts as pinned (the alert rules' `batch_pinned_ratio`)
    batch_pinned_ratio: float = AlertSettings().batch_pinned_ratio
    #: the fleet file's `metrics.source` and `metrics.rate_window`: the panels read the serving figures from the
    #: exporter's series or from the engine recording rules (alertrules/sources.py; `render` swaps the names)
    metrics_source: str = MetricsConfig().source
    rate_window: str = MetricsConfig().rate_window
    #: the fleet file's objectives (the SLO panels' lines: the fleet's, a pool's own are in its burn rate)
    slo: SloConfig = field(default_factory=SloConfig)
    #: the burn rates of the pages (the burn-rate panels' lines)
    burn_fast: float = AlertSettings().burn_fast
    burn_slow: float = AlertSettings().burn_slow

    @classmethod
    def from_fleet(cls, cfg: FleetConfig) -> DashboardSettings:
        return cls(
            slo=cfg.slo,
            thresholds=cfg.thresholds,
            versions={v: c.model.name for v, c in cfg.versions.items()},
            metrics_source=cfg.metrics.source,
            rate_window=cfg.metrics.rate_window,
        )

    @classmethod
    def default(cls) -> DashboardSettings:
        """From `DEFAULT_FLEET`, the shipped example (installed or not: pass your own with `--fleet`)."""
        return cls.from_fleet(load_config(DEFAULT_FLEET))


def _steps(*steps: tuple[float | None, str]) -> ThresholdsConfig:
    return ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([Threshold(v, c) for v, c in steps])


@dataclass(frozen=True)
class Bands:
    """The colour bands of the panels, from the fleet file's thresholds."""

    kv: ThresholdsConfig
    frag: ThresholdsConfig
    temp: ThresholdsConfig
    batch: ThresholdsConfig
    #: the SLO panels: each SLI's budget (1 - objective), the pages' burn rates, the TTFT target
    availability: ThresholdsConfig
    latency: ThresholdsConfig
    burn: ThresholdsConfig
    ttft: ThresholdsConfig

    @classmethod
    def of(cls, s: DashboardSettings) -> Bands:
        t = s.thresholds
        return cls(
            kv=_steps((None, "green"), (t.kv_forecast_trigger, "orange"), (t.memory_breaker, "red")),
            # the alerts' own thresholds: the pool's mean warns at `fragmentation_warning`, a full instance at
            # `fragmentation_release` (InfercastKVCacheFragmentationHigh / Critical)
            frag=_steps((None, "green"), (t.fragmentation_warning, "orange"), (t.fragmentation_release, "red")),
            temp=_steps((None, "green"), (t.gpu_temperature_celsius - 5, "orange"), (t.gpu_temperature_celsius, "red")),
            batch=_steps((None, "green"), (0.9, "orange"), (s.batch_pinned_ratio, "red")),
            availability=_steps((None, "green"), (round(1 - s.slo.availability, 9), "red")),
            latency=_steps((None, "green"), (round(1 - s.slo.latency, 9), "red")),
            burn=_steps((None, "green"), (1.0, "yellow"), (s.burn_slow, "orange"), (s.burn_fast, "red")),
            ttft=_steps((None, "green"), (s.slo.ttft_seconds, "red")),
        )


RISK_BANDS = _steps((None, "green"), (50, "orange"), (80, "red"))
HEALTH_BANDS = _steps((None, "red"), (50, "orange"), (80, "green"))


def _target(query: q.Q, ref: str) -> Dataquery:
    t = Dataquery().expr(query.expr).ref_id(ref).datasource(DATASOURCE)
    if query.legend:
        t = t.legend_format(query.legend)
    return t.instant() if query.instant else t.range()


def ts(
    title: str,
    *queries: q.Q,
    description: str,
    unit: str = "short",
    thresholds: ThresholdsConfig | None = None,
    lo: float | None = None,
    hi: float | None = None,
    width: int = 12,
) -> Timeseries:
    """A time series panel; `description` (Grafana's (i) tooltip) is required: what it shows and how to read it."""
    p = (
        Timeseries()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(8)
        .legend(
            cb.VizLegendOptions()
            .show_legend(True)
            .display_mode(cm.LegendDisplayMode.LIST)
            .placement(cm.LegendPlacement.BOTTOM)
        )
        .tooltip(cb.VizTooltipOptions().mode(cm.TooltipDisplayMode.MULTI).sort(cm.SortOrder.DESCENDING))
    )
    if lo is not None:
        p = p.min(lo)
    if hi is not None:
        p = p.max(hi)
    if thresholds is not None:
        p = p.thresholds(thresholds).thresholds_style(
            cb.GraphThresholdsStyleConfig().mode(cm.GraphTresholdsStyleMode.LINE_AND_AREA)
        )
    for i, query in enumerate(queries):
        p = p.with_target(_target(query, chr(ord("A") + i)))
    return p


def stat(
    title: str,
    query: q.Q,
    unit: str = "short",
    thresholds: ThresholdsConfig | None = None,
    *,
    description: str,
    width: int = 6,
) -> Stat:
    """A single-value panel (the last value); `description` is required."""
    p = (
        Stat()
        .title(title)
        .description(description)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(4)
        .color_mode(cm.BigValueColorMode.BACKGROUND)
        .graph_mode(cm.BigValueGraphMode.NONE)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .with_target(_target(query, "A"))
    )
    if thresholds is not None:
        p = p.thresholds(thresholds)
    return p


def _base(uid: str, title: str, description: str, *variables: QueryVariable) -> Dashboard:
    d = (
        Dashboard(title)
        .uid(uid)
        .description(description)
        .tags([TAG])
        .refresh("30s")
        .time("now-1h", "now")
        .timezone("browser")
        .tooltip(DashboardCursorSync.CROSSHAIR)
        .link(
            DashboardLink("infercast")
            .type(DashboardLinkType.DASHBOARDS)
            .tags([TAG])
            .as_dropdown(True)
            .include_vars(True)
            .keep_time(True)
        )
        .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(
            _var("cluster", "Cluster", q.VAR_CLUSTER, multi=False).description(
                "The `cluster` label (an external label of a multi-cluster Prometheus, Thanos or Mimir); "
                "All matches series without it too."
            )
        )
        .with_variable(
            _var("namespace", "Namespace", q.VAR_NAMESPACE).description(
                "The namespace a raw series was scraped in (the engines', or infercast's for its own series); "
                "panels on recorded series cover every namespace. All matches series without it too."
            )
        )
    )
    for v in variables:
        d = d.with_variable(v)
    return d


def _var(name: str, label: str, query: str, *, multi: bool = True) -> QueryVariable:
    return (
        QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .multi(multi)
        .include_all(True)
        .all_value(".*")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
    )


def _pool_version() -> tuple[QueryVariable, QueryVariable]:
    return _var("pool", "Pool", q.VAR_POOL), _var("version", "Version", q.VAR_VERSION)


def fleet_overview(s: DashboardSettings) -> Dashboard:
    b = Bands.of(s)
    t = s.thresholds
    return (
        _base(
            "infercast-fleet",
            "infercast / Fleet overview",
            "Where traffic goes, how full the KV caches are, how fast requests are served, and how close the fleet "
            "is to an avalanche.",
            *_pool_version(),
        )
        .with_row(Row("Now"))
        .with_panel(
            stat(
                "Fleet KV-cache usage (fullest instance)",
                q.FLEET_KV,
                "percentunit",
                b.kv,
                description=f"KV-cache usage of the fullest instance of the selected pools: what the memory breaker "
                f"and InfercastKVCacheUsageHigh act on (a fleet mean stays green while one pool refuses). Orange "
                f"from {t.kv_forecast_trigger:g} (the predictive trigger), red from {t.memory_breaker:g} (the memory "
                "breaker): the fleet file's thresholds.",
            )
        )
        .with_panel(
            stat(
                "Worst avalanche risk",
                q.AVALANCHE_RISK_NOW,
                "none",
                RISK_BANDS,
                description="0-100: the highest risk, over the selected pools, that a failure cascades "
                "(its failover targets' headroom included).",
            )
        )
        .with_panel(
            stat(
                "Worst health score",
                q.HEALTH_WORST,
                "none",
                HEALTH_BANDS,
                description="0-100: the lowest health score of the selected pools and versions "
                "(the weakest dimensions are below).",
            )
        )
        .with_panel(
            stat(
                "Soonest forecast breach",
                q.BREACH_ETA_NOW,
                "s",
                description="Seconds until the soonest forecast upper band crosses its threshold; "
                "+Inf: no breach within the horizon.",
            )
        )
        .with_row(Row("What users get (SLOs)"))
        .with_panel(
            ts(
                "Failed requests per second by outcome",
                q.ERRORS_BY_OUTCOME,
                unit="reqps",
                lo=0,
                description="Requests that did not end ok, per second, by outcome (error, timeout, rejected: the "
                "memory breaker or a full queue, shed: no pool could take it; retried: a failed attempt the client "
                "tries again).",
            )
        )
        .with_panel(
            ts(
                "Availability: requests failed (5m and 1h)",
                *q.slo_errors("availability"),
                unit="percentunit",
                thresholds=b.availability,
                lo=0,
                description=f"Share of requests that ended in error, timeout, rejected or shed (the availability "
                f"SLI). Red line: the error budget of the {s.slo.availability:g} objective (the fleet file's slo:, "
                "a pool's own in its burn rate).",
            )
        )
        .with_panel(
            ts(
                "Availability burn rate",
                *q.slo_burn("availability"),
                unit="none",
                thresholds=b.burn,
                lo=0,
                description=f"The failed share over the pool's error budget, over the pages' windows: the fast page "
                f"fires when 1h and 5m are both above {s.burn_fast:g} (red), the slow page when 6h and 30m are above "
                f"{s.burn_slow:g} (orange), the ticket above 1 (yellow).",
            )
        )
        .with_panel(
            ts(
                "Latency: first tokens over target (5m and 1h)",
                *q.slo_errors("latency"),
                unit="percentunit",
                thresholds=b.latency,
                lo=0,
                description=f"Share of requests whose first token came after {s.slo.ttft_seconds:g} s (the latency "
                f"SLI, from the engines' TTFT buckets). Red line: the error budget of the {s.slo.latency:g} "
                "objective.",
            )
        )
        .with_panel(
            ts(
                "Latency burn rate",
                *q.slo_burn("latency"),
                unit="none",
                thresholds=b.burn,
                lo=0,
                description=f"The late share over the pool's latency budget: fast page above {s.burn_fast:g} on 1h "
                f"and 5m (red), slow page above {s.burn_slow:g} on 6h and 30m (orange), ticket above 1 (yellow).",
            )
        )
        .with_panel(
            ts(
                "Engines up and down by pool",
                q.ENGINES_UP,
                q.ENGINES_DOWN,
                unit="short",
                lo=0,
                description="Engines answering their scrape per pool (Prometheus' own scrape of the engines, or the "
                "exporter's engine targets); InfercastEnginesDown pages at half of a pool down.",
            )
        )
        .with_row(Row("Traffic"))
        .with_panel(
            ts(
                "Request share per version",
                q.REQUEST_SHARE,
                unit="percentunit",
                lo=0,
                hi=1,
                description="Each version's share of the router's requests (5-minute rate): where traffic goes, "
                "and how much has failed over.",
            )
        )
        .with_panel(
            ts(
                "Requests per second by pool and version",
                q.REQUEST_RATE,
                unit="reqps",
                lo=0,
                description="Requests the router handled per second (5-minute rate), every outcome.",
            )
        )
        .with_row(Row("Latency (vLLM)"))
        .with_panel(
            ts(
                "Time to first token p99 by version",
                q.latency_quantile(q.VLLM_TTFT, 0.99, s.versions, q.SCOPE),
                unit="s",
                thresholds=b.ttft,
                lo=0,
                description="99th percentile of vLLM's time to first token, per version (the fleet file maps "
                "model names to versions), over every engine in the cluster and namespace; red line: the latency "
                f"SLO's target ({s.slo.ttft_seconds:g} s). The Serving latency dashboard has the rest.",
            )
        )
        .with_panel(
            ts(
                "End-to-end latency p99 by version",
                q.latency_quantile(q.VLLM_E2E, 0.99, s.versions, q.SCOPE),
                unit="s",
                lo=0,
                description="99th percentile of vLLM's end-to-end request latency (queue, prefill and decode), "
                "per version.",
            )
        )
        .with_row(Row("KV cache and risk"))
        .with_panel(
            ts(
                "KV-cache usage by pool and version",
                q.KV_BY_POOL,
                q.KV_MAX_BY_POOL,
                q.FLEET_KV_MEAN,
                unit="percentunit",
                thresholds=b.kv,
                lo=0,
                hi=1,
                description=f"Mean and fullest instance per pool and version, and the fleet's mean over every "
                f"instance. Orange line: the predictive trigger "
                f"({t.kv_forecast_trigger:g}); red: the memory breaker ({t.memory_breaker:g}), from the fleet file.",
            )
        )
        .with_panel(
            ts(
                "Avalanche risk by pool",
                q.AVALANCHE_RISK,
                unit="none",
                thresholds=RISK_BANDS,
                lo=0,
                hi=100,
                description="0-100 risk that a failure in the pool cascades (headroom of its failover targets "
                "included).",
            )
        )
        .with_panel(
            ts(
                "Health score",
                q.HEALTH_SCORE,
                unit="none",
                thresholds=HEALTH_BANDS,
                lo=0,
                hi=100,
                description="0-100 health per pool and version, composed of the dimensions beside.",
            )
        )
        .with_panel(
            stat(
                "Weakest health dimensions",
                q.HEALTH_DIMENSIONS,
                "none",
                HEALTH_BANDS,
                width=12,
                description="The five lowest-scoring health dimensions now (0-100), over the selected pools.",
            )
        )
        .with_row(Row("Degradations"))
        .with_panel(
            ts(
                "Degradations by reason",
                q.DEGRADATIONS_BY_REASON,
                unit="ops",
                lo=0,
                description="Requests the router degraded to another version per second (5-minute rate), by why.",
            )
        )
        .with_panel(
            ts(
                "Degradation paths",
                q.DEGRADATIONS_BY_PATH,
                unit="ops",
                lo=0,
                description="Degradations per second from one version to another (5-minute rate).",
            )
        )
    )


def kv_cache_health(s: DashboardSettings) -> Dashboard:
    b = Bands.of(s)
    t = s.thresholds
    return (
        _base(
            "infercast-kv-cache",
            "infercast / KV-cache health",
            "Fragmentation, block-allocation failures, batch saturation and memory efficiency per model version.",
            *_pool_version(),
        )
        .with_row(Row("Fragmentation"))
        .with_panel(
            stat(
                "Worst fragmentation",
                q.FRAGMENTATION_NOW,
                "percentunit",
                b.frag,
                description=f"The highest pool mean of the share of allocated KV capacity that holds no token: what "
                f"InfercastKVCacheFragmentationHigh reads (orange from {t.fragmentation_warning:g}).",
            )
        )
        .with_panel(
            ts(
                "Fragmentation by pool and version",
                q.FRAGMENTATION,
                unit="percentunit",
                thresholds=b.frag,
                lo=0,
                description=f"The pool's mean, what InfercastKVCacheFragmentationHigh reads (orange from "
                f"{t.fragmentation_warning:g}; red from {t.fragmentation_release:g}, the full-instance alert's "
                "threshold): the fleet file's thresholds.",
                width=18,
            )
        )
        .with_panel(
            ts(
                "Fragmentation of full instances",
                q.FRAGMENTATION_FULL,
                unit="percentunit",
                thresholds=b.frag,
                lo=0,
                description=f"The worst instance among those at KV usage {t.kv_forecast_trigger:g} or more, what "
                f"InfercastKVCacheFragmentationCritical reads (red from {t.fragmentation_release:g}); empty while "
                "no instance is that full.",
            )
        )
        .with_panel(
            ts(
                "Fragmentation by instance",
                q.FRAGMENTATION_BY_INSTANCE,
                unit="percentunit",
                thresholds=b.frag,
                description="Allocated KV capacity that holds no token / allocated KV capacity, per instance.",
            )
        )
        .with_panel(
            ts(
                "KV-cache usage by instance",
                q.KV_USAGE_BY_INSTANCE,
                unit="percentunit",
                thresholds=b.kv,
                lo=0,
                description=f"KV-cache usage per instance; lines at the predictive trigger "
                f"({t.kv_forecast_trigger:g}) and the memory breaker ({t.memory_breaker:g}).",
            )
        )
        .with_row(Row("Allocation"))
        .with_panel(
            ts(
                "Block-allocation failures (5m rate)",
                q.ALLOCATION_FAILURES,
                unit="ops",
                lo=0,
                description="KV blocks that could not be allocated per second (vLLM: preemptions), per pool and "
                "version.",
            )
        )
        .with_panel(
            ts(
                "Block-allocation failures by instance",
                q.ALLOCATION_FAILURES_BY_INSTANCE,
                unit="ops",
                lo=0,
                description="The same per instance: one instance failing alone is a node problem, all of them a "
                "load problem.",
            )
        )
        .with_row(Row("Batching and memory"))
        .with_panel(
            ts(
                "Batch saturation (running / maximum batch size)",
                q.BATCH_SATURATION,
                unit="percentunit",
                thresholds=b.batch,
                lo=0,
                hi=1,
                description="Requests running / the maximum batch size, averaged over a pool's instances: how full "
                f"the batches are, not how efficient. Red at {s.batch_pinned_ratio:g} (pinned: requests queue "
                "behind full batches; InfercastBatchSaturated).",
            )
        )
        .with_panel(
            ts(
                "Requests running and waiting",
                q.REQUESTS_RUNNING,
                q.REQUESTS_WAITING,
                unit="short",
                lo=0,
                description="Requests in the engines' batches and waiting to be scheduled, per pool and version.",
            )
        )
        .with_panel(
            ts(
                "Memory efficiency",
                q.MEMORY_EFFICIENCY,
                unit="percentunit",
                lo=0,
                hi=1,
                description="Memory holding live tokens and weights / memory allocated, mean per pool and version.",
            )
        )
        .with_panel(
            ts(
                "Prefix-cache hit ratio",
                q.PREFIX_HIT,
                unit="percentunit",
                lo=0,
                hi=1,
                description="Prefix-cache hits / queries over the last window, mean per pool and version.",
            )
        )
    )


def forecasts(s: DashboardSettings) -> Dashboard:
    b = Bands.of(s)
    t = s.thresholds
    return (
        _base(
            "infercast-forecasts",
            "infercast / Forecasts",
            "What the predictors expect 5 minutes ahead, with their bands, breach ETAs, freshness and error.",
            *_pool_version(),
        )
        .with_row(Row("KV-cache usage"))
        .with_panel(
            ts(
                "KV-cache usage: actual and forecast 5 minutes ahead (band)",
                q.ACTUAL_KV,
                q.FORECAST_KV,
                q.FORECAST_KV_LOWER,
                q.FORECAST_KV_UPPER,
                unit="percentunit",
                thresholds=b.kv,
                lo=0,
                hi=1,
                width=24,
                description="The fullest instance now, and the forecast for now + horizon with its band; the "
                f"predictive alert fires on the upper band over {t.kv_forecast_trigger:g} (orange line).",
            )
        )
        .with_panel(
            stat(
                "Soonest breach",
                q.BREACH_ETA_NOW,
                "s",
                width=6,
                description="Seconds until the soonest forecast upper band crosses its threshold; +Inf: none within "
                "the horizon.",
            )
        )
        .with_panel(
            ts(
                "Breach ETA by pool and version",
                q.BREACH_ETA,
                unit="s",
                lo=0,
                width=18,
                description="Seconds until each forecast upper band crosses the threshold it names "
                "(no line: not within the horizon).",
            )
        )
        .with_row(Row("Traffic"))
        .with_panel(
            ts(
                "Requests per second: actual and forecast",
                q.ACTUAL_RPS,
                q.FORECAST_RPS,
                q.FORECAST_RPS_UPPER,
                unit="reqps",
                description="The router's request rate now and the forecast for now + horizon with its upper band.",
            )
        )
        .with_row(Row("Forecast quality"))
        .with_panel(
            ts(
                "Forecast age by forecaster",
                q.FORECAST_AGE,
                unit="s",
                lo=0,
                width=8,
                description="Seconds since each forecaster's last successful round; InfercastForecastsStale pages "
                "when it grows past the predictor's staleness limit.",
            )
        )
        .with_panel(
            stat(
                "Skipped forecasts by reason",
                q.FORECAST_SKIPS,
                "none",
                width=4,
                description="Series with no forecast published now, by why (too little history, gaps, a source "
                "down...).",
            )
        )
        .with_panel(
            ts(
                "Live backtest: mean absolute error by forecaster",
                q.BACKTEST_MAE,
                unit="percentunit",
                lo=0,
                description="Each forecaster's point forecast from one horizon ago against the KV usage that followed.",
            )
        )
    )


def latency(s: DashboardSettings) -> Dashboard:
    v = s.versions
    b = Bands.of(s)
    by_version = "per version (the fleet file maps vLLM's model_name to versions)"
    return (
        _base(
            "infercast-latency",
            "infercast / Serving latency (vLLM)",
            "Time to first token, time per output token and end-to-end latency from vLLM's own histograms, per "
            "version, with the load behind them.",
            _var("model_name", "Model", q.VAR_MODEL_NAME),
        )
        .with_row(Row("Now"))
        .with_panel(
            stat(
                "Time to first token p99 (worst version)",
                q.latency_worst(q.VLLM_TTFT, 0.99, v),
                "s",
                b.ttft,
                description="The highest 99th percentile of time to first token over the selected models' versions; "
                f"red above the latency SLO's target ({s.slo.ttft_seconds:g} s).",
            )
        )
        .with_panel(
            stat(
                "Time per output token p99 (worst version)",
                q.latency_worst(q.VLLM_TPOT, 0.99, v),
                "s",
                description="The highest 99th percentile of time per output token (a request's decode time / its "
                "output tokens after the first).",
            )
        )
        .with_panel(
            stat(
                "End-to-end latency p99 (worst version)",
                q.latency_worst(q.VLLM_E2E, 0.99, v),
                "s",
                description="The highest 99th percentile of end-to-end request latency (queue, prefill, decode).",
            )
        )
        .with_panel(
            stat(
                "Requests finished per second",
                q.Q(f"sum(rate({q.VLLM_SUCCESS}{{{q.VLLM}}}[$__rate_interval]))", "finished", instant=True),
                "reqps",
                description="Requests the selected engines finished per second, every finish reason.",
            )
        )
        .with_row(Row("Time to first token (TTFT)"))
        .with_panel(
            ts(
                "Time to first token by version",
                q.latency_quantile(q.VLLM_TTFT, 0.5, v),
                q.latency_quantile(q.VLLM_TTFT, 0.9, v),
                q.latency_quantile(q.VLLM_TTFT, 0.99, v),
                unit="s",
                thresholds=b.ttft,
                lo=0,
                description=f"p50, p90 and p99 of vLLM's time to first token {by_version}: queueing plus prefill. "
                f"Red line: the latency SLO's target ({s.slo.ttft_seconds:g} s; objective: {s.slo.latency:g} of "
                "requests within it).",
            )
        )
        .with_panel(
            ts(
                "Queue time by version",
                q.latency_quantile(q.VLLM_QUEUE, 0.5, v),
                q.latency_quantile(q.VLLM_QUEUE, 0.99, v),
                unit="s",
                lo=0,
                description="p50 and p99 of the time requests waited to be scheduled (the queueing part of TTFT).",
            )
        )
        .with_row(Row("Time per output token (TPOT)"))
        .with_panel(
            ts(
                "Time per output token by version",
                q.latency_quantile(q.VLLM_TPOT, 0.5, v),
                q.latency_quantile(q.VLLM_TPOT, 0.99, v),
                q.latency_mean(q.VLLM_TPOT, v),
                unit="s",
                lo=0,
                description=f"p50, p99 and mean of each request's time per output token {by_version}.",
            )
        )
        .with_panel(
            ts(
                "Inter-token latency by version",
                q.latency_quantile(q.VLLM_ITL, 0.5, v),
                q.latency_quantile(q.VLLM_ITL, 0.99, v),
                unit="s",
                lo=0,
                description="p50 and p99 of the gap between consecutive output tokens (every token, not per "
                "request): the stutter a streaming user sees.",
            )
        )
        .with_row(Row("End to end"))
        .with_panel(
            ts(
                "End-to-end latency by version",
                q.latency_quantile(q.VLLM_E2E, 0.5, v),
                q.latency_quantile(q.VLLM_E2E, 0.9, v),
                q.latency_quantile(q.VLLM_E2E, 0.99, v),
                unit="s",
                lo=0,
                description=f"p50, p90 and p99 of vLLM's end-to-end request latency {by_version}.",
            )
        )
        .with_panel(
            ts(
                "Prefill and decode time p99 by version",
                q.latency_quantile(q.VLLM_PREFILL, 0.99, v, what="prefill"),
                q.latency_quantile(q.VLLM_DECODE, 0.99, v, what="decode"),
                unit="s",
                lo=0,
                description="p99 of the time requests spent in prefill and in decode: which phase the "
                "end-to-end latency comes from.",
            )
        )
        .with_row(Row("Load"))
        .with_panel(
            ts(
                "Prompt and generation tokens per second by version",
                q.vllm_by_version(
                    f"rate({q.VLLM_PROMPT_TOKENS}{{{q.VLLM}}}[$__rate_interval])",
                    v,
                    "prompt {{version}} ({{model_name}})",
                ),
                q.vllm_by_version(
                    f"rate({q.VLLM_GENERATION_TOKENS}{{{q.VLLM}}}[$__rate_interval])",
                    v,
                    "generation {{version}} ({{model_name}})",
                ),
                unit="short",
                lo=0,
                description="Tokens the engines prefilled (prompt) and generated per second, summed per version: the "
                "throughput behind the latencies.",
            )
        )
        .with_panel(
            ts(
                "Requests running and waiting by version",
                q.vllm_by_version(f"{q.VLLM_RUNNING}{{{q.VLLM}}}", v, "running {{version}} ({{model_name}})"),
                q.vllm_by_version(f"{q.VLLM_WAITING}{{{q.VLLM}}}", v, "waiting {{version}} ({{model_name}})"),
                unit="short",
                lo=0,
                description="Requests in the engines' batches and waiting to be scheduled, summed per version.",
            )
        )
        .with_panel(
            ts(
                "KV-cache usage by version (fullest engine)",
                q.vllm_by_version(f"{q.VLLM_KV_USAGE}{{{q.VLLM}}}", v, "{{version}} ({{model_name}})", agg="max"),
                unit="percentunit",
                thresholds=b.kv,
                lo=0,
                hi=1,
                description=f"vLLM's kv_cache_usage_perc of the fullest engine per version; lines at the predictive "
                f"trigger ({s.thresholds.kv_forecast_trigger:g}) and the memory breaker "
                f"({s.thresholds.memory_breaker:g}) from the fleet file.",
            )
        )
        .with_panel(
            ts(
                "Preemptions per second by version",
                q.vllm_by_version(
                    f"rate({q.VLLM_PREEMPTIONS}{{{q.VLLM}}}[$__rate_interval])", v, "{{version}} ({{model_name}})"
                ),
                unit="ops",
                lo=0,
                description="Requests vLLM preempted because a KV block could not be allocated: latency spikes follow.",
            )
        )
        .with_panel(
            ts(
                "Requests finished per second by version and reason",
                q.Q(
                    f"sum by (model_name, version, finished_reason) "
                    f"({q.versioned(f'rate({q.VLLM_SUCCESS}{{{q.VLLM}}}[$__rate_interval])', v)})",
                    "{{version}} ({{model_name}}) {{finished_reason}}",
                ),
                unit="reqps",
                lo=0,
                description="Finished requests per second by why they finished (stop, length, abort, error).",
            )
        )
    )


def gpu(s: DashboardSettings) -> Dashboard:
    b = Bands.of(s)
    return (
        _base(
            "infercast-gpu",
            "infercast / GPU",
            "GPU memory, compute, bandwidth, power and errors.",
            _var("node", "Node", q.VAR_NODE),
        )
        .with_row(Row("Memory and compute"))
        .with_panel(
            ts(
                "GPU memory used",
                q.GPU_MEMORY,
                unit="percentunit",
                lo=0,
                hi=1,
                description="Framebuffer memory in use / total per GPU (engines pre-allocate their KV pool, so this "
                "stays flat near their memory utilisation).",
            )
        )
        .with_panel(
            ts(
                "GPU memory used (bytes)",
                q.GPU_MEMORY_BYTES,
                unit="bytes",
                lo=0,
                description="Framebuffer memory in use per GPU.",
            )
        )
        .with_panel(
            ts(
                "GPU utilization",
                q.GPU_UTILIZATION,
                unit="percentunit",
                lo=0,
                hi=1,
                description="Fraction of time a kernel was running on the GPU (busy, not how much of it).",
            )
        )
        .with_panel(
            ts(
                "SM occupancy",
                q.GPU_SM_OCCUPANCY,
                unit="percentunit",
                lo=0,
                hi=1,
                description="Warps resident on the SMs / the maximum.",
            )
        )
        .with_row(Row("Bandwidth"))
        .with_panel(
            ts(
                "HBM bandwidth (DRAM active)",
                q.GPU_HBM,
                unit="percentunit",
                lo=0,
                hi=1,
                description="Fraction of cycles the HBM interface was busy: decode is usually bound here.",
            )
        )
        .with_panel(
            ts("PCIe traffic", q.GPU_PCIE_RATE, unit="Bps", lo=0, description="PCIe bytes per second, per direction.")
        )
        .with_row(Row("Thermals and errors"))
        .with_panel(
            ts(
                "Temperature",
                q.GPU_TEMPERATURE,
                unit="celsius",
                thresholds=b.temp,
                description=f"GPU core temperature; red at {s.thresholds.gpu_temperature_celsius:g} C (the fleet "
                "file's gpu_temperature_celsius, InfercastGPUTemperatureHigh).",
            )
        )
        .with_panel(ts("Power", q.GPU_POWER_DRAW, unit="watt", lo=0, description="GPU power draw."))
        .with_panel(
            ts(
                "ECC errors (last hour)",
                q.GPU_ECC_ERRORS,
                unit="short",
                lo=0,
                description="ECC memory errors in the last hour, by type; any uncorrectable one pages.",
            )
        )
        .with_panel(
            ts(
                "XID errors (last hour)",
                q.GPU_XID_ERRORS,
                unit="short",
                lo=0,
                description="Driver XID errors in the last hour, by code (79: fallen off the bus).",
            )
        )
        .with_row(Row("Sources"))
        .with_panel(
            stat(
                "Exporter sources up",
                q.TARGETS_UP,
                "none",
                _steps((None, "red"), (1, "green")),
                width=12,
                description="1 when the exporter's last scrape of the source succeeded, 0 when it failed.",
            )
        )
        .with_panel(
            ts(
                "Scrape duration by source",
                q.SCRAPE_DURATION,
                unit="s",
                lo=0,
                description="How long the exporter's last scrape of each source took.",
            )
        )
        .with_panel(
            ts(
                "Expected metrics missing by source",
                q.TARGET_METRIC_MISSING,
                unit="none",
                lo=0,
                hi=1,
                description="1 while a family the exporter expects is absent from a source's page (a renamed or "
                "removed engine metric: its panels and forecasts go blank); 0 when present.",
            )
        )
        .with_panel(
            ts(
                "Families dropped for malformed lines (last hour)",
                q.TARGET_PARSE_ERRORS,
                unit="short",
                lo=0,
                description="Families dropped from a source's page for a malformed line in the last hour; the rest "
                "of the source is kept (one warning in the exporter's log names the line).",
            )
        )
    )


ON_OFF = _steps((None, "green"), (1, "red"))
LEADERS = _steps((None, "red"), (1, "green"), (2, "red"))  # none or two leaders: both wrong
BUDGET_BANDS = _steps((None, "green"), (0.8, "orange"), (1, "red"))


def actuator(s: DashboardSettings) -> Dashboard:
    return (
        _base(
            "infercast-actuator",
            "infercast / Actuator",
            "What the actuator decided and why, what it applied or only proposed, what was refused, how it was "
            "judged, and when it froze or was fenced.",
            _var("pool", "Pool", q.VAR_ACTUATOR_POOL),
        )
        .with_row(Row("Now"))
        .with_panel(
            stat(
                "Mode",
                q.ACTUATOR_ACTIVE,
                "none",
                _steps((None, "blue"), (1, "green")),
                width=4,
                description="1: acting (applies its actions to the fleet); 0: advisory (decides, logs and proposes, "
                "touches nothing).",
            )
        )
        .with_panel(
            stat(
                "Replicas leading",
                q.ACTUATOR_LEADERS,
                "none",
                LEADERS,
                width=4,
                description="Replicas holding the leadership: exactly one when healthy.",
            )
        )
        .with_panel(
            stat(
                "Frozen",
                q.ACTUATOR_FROZEN_NOW,
                "none",
                ON_OFF,
                width=4,
                description="1: frozen, deciding nothing (its inputs are stale or a source is down).",
            )
        )
        .with_panel(
            stat(
                "Fenced",
                q.ACTUATOR_FENCED_NOW,
                "none",
                ON_OFF,
                width=4,
                description="1: the leader's fencing token is behind its backend's and it could not re-acquire "
                "above it: it leads but cannot act.",
            )
        )
        .with_panel(
            stat(
                "Audit trail",
                q.ACTUATOR_AUDIT_FAILED_NOW,
                "none",
                ON_OFF,
                width=4,
                description="1: the audit trail (actuator.audit_db) was deleted, replaced or corrupted under the "
                "daemon: it does not act until the file is restored and the daemon restarted (pages).",
            )
        )
        .with_panel(
            stat(
                "Change budget used (worst)",
                q.ACTUATOR_BUDGET_NOW,
                "percentunit",
                BUDGET_BANDS,
                width=4,
                description="The highest share of a pool's (or the fleet's) hourly change budget used; at 1 the "
                "actuator refuses further changes there.",
            )
        )
        .with_row(Row("Decisions"))
        .with_panel(
            ts(
                "Decisions and their reasons",
                q.ACTUATOR_DECISIONS,
                unit="short",
                lo=0,
                width=24,
                description="Each decision on the timeline, by action, target and reason (advisory ones too); "
                "the words are in the audit trail: infercast actuator log.",
            )
        )
        .with_panel(
            ts(
                "Applied vs proposed (advisory)",
                q.ACTUATOR_APPLIED_VS_ADVISORY,
                unit="short",
                lo=0,
                description="Actions applied to the fleet (acting) against actions only proposed (advisory mode, or "
                "a replica not leading), per scrape window.",
            )
        )
        .with_panel(
            ts(
                "Refused and failed actions (last hour)",
                q.ACTUATOR_REFUSALS,
                unit="short",
                lo=0,
                description="Actions the guardrails or the backend refused, and actions that failed, per action and "
                "pool in the last hour.",
            )
        )
        .with_panel(
            ts(
                "Actions by outcome",
                q.ACTUATOR_ACTIONS,
                unit="short",
                lo=0,
                description="Every action per scrape window by outcome: applied, advisory, refused, rolled back, "
                "failed.",
            )
        )
        .with_panel(
            ts(
                "Mode, leadership and fencing",
                q.ACTUATOR_MODE,
                q.ACTUATOR_LEADER,
                q.ACTUATOR_FENCED,
                unit="none",
                lo=0,
                description="Acting (1) or advisory (0), how many replicas lead (1 when healthy), and whether the "
                "leader is fenced (1: it cannot act).",
            )
        )
        .with_panel(
            ts(
                "Pool weights set",
                q.ACTUATOR_WEIGHTS,
                unit="none",
                lo=0,
                description="The router pool weights the actuator last set.",
            )
        )
        .with_panel(
            ts(
                "Breaker thresholds and admission limits set",
                q.ACTUATOR_BREAKERS,
                unit="none",
                lo=0,
                description="latency: seconds; memory: ratio; context_tokens: tokens; *_queue: seconds.",
            )
        )
        .with_row(Row("Verification"))
        .with_panel(
            ts(
                "Verdicts",
                q.ACTUATOR_VERDICTS,
                unit="short",
                lo=0,
                description="Verdicts on applied actions after their verification window: verified, no effect, "
                "rolled back.",
            )
        )
        .with_panel(
            ts(
                "Rollbacks (last hour)",
                q.ACTUATOR_ROLLBACKS,
                unit="short",
                lo=0,
                description="Applied actions undone because the fleet got worse, per action and pool.",
            )
        )
        .with_row(Row("Freezes and budget"))
        .with_panel(
            ts(
                "Frozen",
                q.ACTUATOR_FROZEN,
                unit="none",
                lo=0,
                hi=1,
                width=8,
                description="1 while the actuator is frozen.",
            )
        )
        .with_panel(
            ts(
                "Freezes by reason (last hour)",
                q.ACTUATOR_FREEZES,
                unit="short",
                lo=0,
                width=8,
                description="Times the actuator froze in the last hour, by why (stale inputs, bad values, a source "
                "down).",
            )
        )
        .with_panel(
            ts(
                "Change budget used",
                q.ACTUATOR_BUDGET,
                unit="percentunit",
                thresholds=BUDGET_BANDS,
                lo=0,
                width=8,
                description="Share of each pool's (and the fleet's) hourly change budget used.",
            )
        )
        .with_row(Row("Audit trail"))
        .with_panel(
            ts(
                "Audit trail health",
                q.ACTUATOR_AUDIT_FAILED,
                q.ACTUATOR_AUDIT_UNRECORDED,
                unit="short",
                lo=0,
                description="1 while the audit trail cannot be written (the actuator runs advisory), and the rows "
                "it could not write in the last hour (each logged whole at ERROR: audit: NOT RECORDED).",
            )
        )
        .with_panel(
            ts(
                "Decisions of unknown outcome",
                q.ACTUATOR_AUDIT_UNKNOWN,
                unit="short",
                lo=0,
                description="Actions whose answer was lost and whose effect the target could not confirm yet; "
                "each tick reads them back (infercast actuator log shows them as unknown until settled).",
            )
        )
        .with_row(Row("The daemon"))
        .with_panel(
            ts(
                "Decision-to-action latency",
                q.ACTUATOR_LATENCY_P50,
                q.ACTUATOR_LATENCY_P99,
                unit="s",
                lo=0,
                width=8,
                description="From a decision to the backend's answer, retries included (goal: 1 s).",
            )
        )
        .with_panel(
            ts(
                "Loop runs by outcome",
                q.ACTUATOR_TICKS,
                unit="short",
                lo=0,
                width=8,
                description="Runs of the control loop, on its schedule or on an alert: ok, error or missed.",
            )
        )
        .with_panel(
            ts(
                "Alerts from Alertmanager",
                q.ACTUATOR_ALERTS,
                unit="short",
                lo=0,
                width=8,
                description="Alerts received on the actuator's webhook: accepted, duplicate or dropped.",
            )
        )
    )


DASHBOARDS: dict[str, Callable[[DashboardSettings], Dashboard]] = {
    "fleet-overview": fleet_overview,
    "kv-cache-health": kv_cache_health,
    "forecasts": forecasts,
    "latency": latency,
    "gpu": gpu,
    "actuator": actuator,
}
GENERATED = Path(__file__).resolve().parent / "generated"


def annotations() -> list[dict[str, Any]]:
    """The annotations of every dashboard (Grafana's Prometheus annotation queries; the SDK's model has no
    titleFormat/textFormat/tagKeys, so they are written here)."""

    def prom(name: str, expr: str, color: str, title: str, text: str, tags: str, enable: bool = True) -> dict:
        return {
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "enable": enable,
            "expr": expr,
            "hide": False,
            "iconColor": color,
            "name": name,
            "step": "60s",
            "tagKeys": tags,
            "textFormat": text,
            "titleFormat": title,
            "useValueForTime": False,
        }

    return [
        prom(
            "Firing alerts",
            q.ANNOTATION_ALERTS,
            "red",
            "{{alertname}}",
            "{{severity}}: {{pool}} {{version}} {{node}}",
            "alertname,severity,pool",
        ),
        prom(
            "Actuator actions",
            q.ANNOTATION_ACTIONS,
            "blue",
            "{{outcome}}: {{action}}",
            "pool {{pool}}",
            "action,pool,outcome",
        ),
        prom(
            "Actuator proposals (advisory)",
            q.ANNOTATION_PROPOSALS,
            "purple",
            "proposed: {{action}}",
            "pool {{pool}} (advisory: not applied)",
            "action,pool",
        ),
    ]


def render(name: str, settings: DashboardSettings | None = None) -> str:
    """The dashboard's JSON text, stable byte for byte (sorted keys, panel ids numbered in order); `settings`:
    `DashboardSettings.default()` (the repository's fleet file) when None."""
    settings = settings or DashboardSettings.default()
    model = DASHBOARDS[name](settings).build()
    for pid, panel in enumerate(model.panels or [], start=1):
        panel.id_val = pid
    doc = json.loads(JSONEncoder(sort_keys=True).encode(model))
    doc["annotations"] = {"list": annotations()}
    doc = _for_source(doc, settings)
    return json.dumps(doc, sort_keys=True, indent=2) + "\n"


def _for_source(node: object, s: DashboardSettings) -> object:
    """Every query of the dashboard (panel targets, variables, annotations) reading the serving figures where
    `s.metrics_source` says: the queries are written once, on the exporter's names, and swapped here."""
    if s.metrics_source == "exporter":
        return node
    if isinstance(node, dict):
        return {k: _for_source(v, s) for k, v in node.items()}
    if isinstance(node, list):
        return [_for_source(v, s) for v in node]
    if isinstance(node, str):
        return translate(node, s.metrics_source, s.rate_window)
    return node


def build_all(out_dir: Path = GENERATED, settings: DashboardSettings | None = None) -> list[Path]:
    settings = settings or DashboardSettings.default()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in DASHBOARDS:
        path = out_dir / f"{name}.json"
        path.write_text(render(name, settings))
        written.append(path)
    return written
