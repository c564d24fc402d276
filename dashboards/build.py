"""The Grafana dashboards, built as code with grafana-foundation-sdk (pure: builders in, JSON text out).

Five dashboards share the template variable `$datasource` and the `infercast` tag (the links between them):
fleet overview, KV-cache health and forecasts (with `$pool` and `$version`), GPU (with `$node`), and the actuator
(with `$pool`: the pools it acted on, `fleet` for fleet-wide settings).  All PromQL lives in
`dashboards/queries.py`; colour bands come from `infercast.config.Thresholds`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

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

from infercast.config import Thresholds

from . import queries as q

DATASOURCE = DataSourceRef(type_val="prometheus", uid="${datasource}")
TAG = "infercast"
T = Thresholds()


def _steps(*steps: tuple[float | None, str]) -> ThresholdsConfig:
    return ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([Threshold(v, c) for v, c in steps])


KV_BANDS = _steps((None, "green"), (T.kv_forecast_trigger, "orange"), (T.memory_breaker, "red"))
FRAG_BANDS = _steps((None, "green"), (T.fragmentation_green, "yellow"), (T.fragmentation_release, "red"))
RISK_BANDS = _steps((None, "green"), (50, "orange"), (80, "red"))
HEALTH_BANDS = _steps((None, "red"), (50, "orange"), (80, "green"))
TEMP_BANDS = _steps((None, "green"), (T.gpu_temperature_celsius - 5, "orange"), (T.gpu_temperature_celsius, "red"))
BATCH_BANDS = _steps((None, "green"), (0.9, "orange"), (0.99, "red"))


def _target(query: q.Q, ref: str) -> Dataquery:
    t = Dataquery().expr(query.expr).ref_id(ref).datasource(DATASOURCE)
    if query.legend:
        t = t.legend_format(query.legend)
    return t.instant() if query.instant else t.range()


def ts(
    title: str,
    *queries: q.Q,
    unit: str = "short",
    thresholds: ThresholdsConfig | None = None,
    lo: float | None = None,
    hi: float | None = None,
    description: str = "",
    width: int = 12,
) -> Timeseries:
    p = (
        Timeseries()
        .title(title)
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
    if description:
        p = p.description(description)
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
    description: str = "",
    width: int = 6,
) -> Stat:
    p = (
        Stat()
        .title(title)
        .datasource(DATASOURCE)
        .unit(unit)
        .span(width)
        .height(4)
        .color_mode(cm.BigValueColorMode.BACKGROUND)
        .graph_mode(cm.BigValueGraphMode.NONE)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .with_target(_target(query, "A"))
    )
    if description:
        p = p.description(description)
    if thresholds is not None:
        p = p.thresholds(thresholds)
    return p


def _base(uid: str, title: str, description: str, *, gpu: bool = False, actuator: bool = False) -> Dashboard:
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
    )
    if gpu:
        return d.with_variable(_var("node", "Node", q.VAR_NODE))
    if actuator:
        return d.with_variable(_var("pool", "Pool", q.VAR_ACTUATOR_POOL))
    return d.with_variable(_var("pool", "Pool", q.VAR_POOL)).with_variable(_var("version", "Version", q.VAR_VERSION))


def _var(name: str, label: str, query: str) -> QueryVariable:
    return (
        QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query(query)
        .multi(True)
        .include_all(True)
        .all_value(".*")
        .refresh(VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(VariableSort.ALPHABETICAL_ASC)
    )


def fleet_overview() -> Dashboard:
    return (
        _base(
            "infercast-fleet",
            "infercast / Fleet overview",
            "Where traffic goes, how full the KV caches are, and how close the fleet is to an avalanche.",
        )
        .with_row(Row("Now"))
        .with_panel(stat("Fleet KV-cache usage", q.FLEET_KV, "percentunit", KV_BANDS))
        .with_panel(stat("Worst avalanche risk", q.AVALANCHE_RISK_NOW, "none", RISK_BANDS))
        .with_panel(stat("Worst health score", q.HEALTH_WORST, "none", HEALTH_BANDS))
        .with_panel(
            stat("Soonest forecast breach", q.BREACH_ETA_NOW, "s", description="+Inf: no breach within the horizon")
        )
        .with_row(Row("Traffic"))
        .with_panel(ts("Request share per version", q.REQUEST_SHARE, unit="percentunit", lo=0, hi=1))
        .with_panel(ts("Requests per second by pool and version", q.REQUEST_RATE, unit="reqps", lo=0))
        .with_row(Row("KV cache and risk"))
        .with_panel(
            ts(
                "KV-cache usage by pool and version",
                q.KV_BY_POOL,
                q.KV_MAX_BY_POOL,
                unit="percentunit",
                thresholds=KV_BANDS,
                lo=0,
                hi=1,
                description="Orange: the predictive trigger; red: the memory breaker.",
            )
        )
        .with_panel(ts("Avalanche risk by pool", q.AVALANCHE_RISK, unit="none", thresholds=RISK_BANDS, lo=0, hi=100))
        .with_panel(ts("Health score", q.HEALTH_SCORE, unit="none", thresholds=HEALTH_BANDS, lo=0, hi=100))
        .with_panel(stat("Weakest health dimensions", q.HEALTH_DIMENSIONS, "none", HEALTH_BANDS, width=12))
        .with_row(Row("Degradations"))
        .with_panel(ts("Degradations by reason", q.DEGRADATIONS_BY_REASON, unit="ops", lo=0))
        .with_panel(ts("Degradation paths", q.DEGRADATIONS_BY_PATH, unit="ops", lo=0))
    )


def kv_cache_health() -> Dashboard:
    return (
        _base(
            "infercast-kv-cache",
            "infercast / KV-cache health",
            "Fragmentation, block-allocation failures, batch and memory efficiency per model version.",
        )
        .with_row(Row("Fragmentation"))
        .with_panel(stat("Worst fragmentation", q.FRAGMENTATION_NOW, "percentunit", FRAG_BANDS))
        .with_panel(
            ts(
                "Fragmentation by pool and version",
                q.FRAGMENTATION,
                unit="percentunit",
                thresholds=FRAG_BANDS,
                lo=0,
                description="Green below 0.15, yellow below 0.25, red above (DESIGN.md policy facts).",
                width=18,
            )
        )
        .with_panel(
            ts("Fragmentation by instance", q.FRAGMENTATION_BY_INSTANCE, unit="percentunit", thresholds=FRAG_BANDS)
        )
        .with_panel(
            ts("KV-cache usage by instance", q.KV_USAGE_BY_INSTANCE, unit="percentunit", thresholds=KV_BANDS, lo=0)
        )
        .with_row(Row("Allocation"))
        .with_panel(ts("Block-allocation failures (5m rate)", q.ALLOCATION_FAILURES, unit="ops", lo=0))
        .with_panel(ts("Block-allocation failures by instance", q.ALLOCATION_FAILURES_BY_INSTANCE, unit="ops", lo=0))
        .with_row(Row("Efficiency"))
        .with_panel(
            ts(
                "Batch efficiency (actual / ideal batch size)",
                q.BATCH_EFFICIENCY,
                unit="percentunit",
                thresholds=BATCH_BANDS,
                lo=0,
                hi=1,
            )
        )
        .with_panel(ts("Requests running and waiting", q.REQUESTS_RUNNING, q.REQUESTS_WAITING, unit="short", lo=0))
        .with_panel(ts("Memory efficiency", q.MEMORY_EFFICIENCY, unit="percentunit", lo=0, hi=1))
        .with_panel(ts("Prefix-cache hit ratio", q.PREFIX_HIT, unit="percentunit", lo=0, hi=1))
    )


def forecasts() -> Dashboard:
    return (
        _base(
            "infercast-forecasts",
            "infercast / Forecasts",
            "What the predictors expect 5 minutes ahead, with their bands, breach ETAs, freshness and error.",
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
                thresholds=KV_BANDS,
                lo=0,
                hi=1,
                width=24,
                description="The forecast lines are for now + horizon; the predictive alert fires on the upper band.",
            )
        )
        .with_panel(stat("Soonest breach", q.BREACH_ETA_NOW, "s", width=6))
        .with_panel(ts("Breach ETA by pool and version", q.BREACH_ETA, unit="s", lo=0, width=18))
        .with_row(Row("Traffic"))
        .with_panel(
            ts(
                "Requests per second: actual and forecast",
                q.ACTUAL_RPS,
                q.FORECAST_RPS,
                q.FORECAST_RPS_UPPER,
                unit="reqps",
            )
        )
        .with_row(Row("Forecast quality"))
        .with_panel(ts("Forecast age by model", q.FORECAST_AGE, unit="s", lo=0, width=8))
        .with_panel(stat("Skipped forecasts by reason", q.FORECAST_SKIPS, "none", width=4))
        .with_panel(
            ts(
                "Live backtest: mean absolute error by model",
                q.BACKTEST_MAE,
                unit="percentunit",
                lo=0,
                description="Each model's forecast from one horizon ago against the KV usage that followed.",
            )
        )
    )


def gpu() -> Dashboard:
    return (
        _base("infercast-gpu", "infercast / GPU", "GPU memory, compute, bandwidth, power and errors.", gpu=True)
        .with_row(Row("Memory and compute"))
        .with_panel(ts("GPU memory used", q.GPU_MEMORY, unit="percentunit", lo=0, hi=1))
        .with_panel(ts("GPU memory used (bytes)", q.GPU_MEMORY_BYTES, unit="bytes", lo=0))
        .with_panel(ts("GPU utilization", q.GPU_UTILIZATION, unit="percentunit", lo=0, hi=1))
        .with_panel(ts("SM occupancy", q.GPU_SM_OCCUPANCY, unit="percentunit", lo=0, hi=1))
        .with_row(Row("Bandwidth"))
        .with_panel(ts("HBM bandwidth (DRAM active)", q.GPU_HBM, unit="percentunit", lo=0, hi=1))
        .with_panel(ts("PCIe traffic", q.GPU_PCIE_RATE, unit="Bps", lo=0))
        .with_row(Row("Thermals and errors"))
        .with_panel(ts("Temperature", q.GPU_TEMPERATURE, unit="celsius", thresholds=TEMP_BANDS))
        .with_panel(ts("Power", q.GPU_POWER_DRAW, unit="watt", lo=0))
        .with_panel(ts("ECC errors (last hour)", q.GPU_ECC_ERRORS, unit="short", lo=0))
        .with_panel(ts("XID errors (last hour)", q.GPU_XID_ERRORS, unit="short", lo=0))
        .with_row(Row("Sources"))
        .with_panel(stat("Exporter sources up", q.TARGETS_UP, "none", _steps((None, "red"), (1, "green")), width=12))
        .with_panel(ts("Scrape duration by source", q.SCRAPE_DURATION, unit="s", lo=0))
    )


ON_OFF = _steps((None, "green"), (1, "red"))
LEADERS = _steps((None, "red"), (1, "green"), (2, "red"))  # none or two leaders: both wrong
BUDGET_BANDS = _steps((None, "green"), (0.8, "orange"), (1, "red"))


def actuator() -> Dashboard:
    return (
        _base(
            "infercast-actuator",
            "infercast / Actuator",
            "What the actuator decided and why, what it applied, how it was judged, and when it froze.",
            actuator=True,
        )
        .with_row(Row("Now"))
        .with_panel(
            stat(
                "Mode",
                q.ACTUATOR_ACTIVE,
                "none",
                _steps((None, "blue"), (1, "green")),
                description="1: active (acts on the fleet); 0: advisory (decides and logs, touches nothing).",
            )
        )
        .with_panel(
            stat("Replicas leading", q.ACTUATOR_LEADERS, "none", LEADERS, description="Exactly one when healthy.")
        )
        .with_panel(stat("Frozen", q.ACTUATOR_FROZEN_NOW, "none", ON_OFF, description="1: frozen, deciding nothing."))
        .with_panel(stat("Change budget used (worst)", q.ACTUATOR_BUDGET_NOW, "percentunit", BUDGET_BANDS))
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
        .with_panel(ts("Actions by outcome", q.ACTUATOR_ACTIONS, unit="short", lo=0))
        .with_panel(ts("Mode and leadership", q.ACTUATOR_MODE, q.ACTUATOR_LEADER, unit="none", lo=0))
        .with_panel(ts("Pool weights set", q.ACTUATOR_WEIGHTS, unit="none", lo=0))
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
        .with_panel(ts("Verdicts", q.ACTUATOR_VERDICTS, unit="short", lo=0))
        .with_panel(ts("Rollbacks (last hour)", q.ACTUATOR_ROLLBACKS, unit="short", lo=0))
        .with_row(Row("Freezes and budget"))
        .with_panel(ts("Frozen", q.ACTUATOR_FROZEN, unit="none", lo=0, hi=1, width=8))
        .with_panel(ts("Freezes by reason (last hour)", q.ACTUATOR_FREEZES, unit="short", lo=0, width=8))
        .with_panel(
            ts("Change budget used", q.ACTUATOR_BUDGET, unit="percentunit", thresholds=BUDGET_BANDS, lo=0, width=8)
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
        .with_panel(ts("Loop runs by outcome", q.ACTUATOR_TICKS, unit="short", lo=0, width=8))
        .with_panel(ts("Alerts from Alertmanager", q.ACTUATOR_ALERTS, unit="short", lo=0, width=8))
    )


DASHBOARDS: dict[str, Callable[[], Dashboard]] = {
    "fleet-overview": fleet_overview,
    "kv-cache-health": kv_cache_health,
    "forecasts": forecasts,
    "gpu": gpu,
    "actuator": actuator,
}
GENERATED = Path(__file__).resolve().parent / "generated"


def render(name: str) -> str:
    """The dashboard's JSON text, stable byte for byte (sorted keys, panel ids numbered in order)."""
    model = DASHBOARDS[name]().build()
    for pid, panel in enumerate(model.panels or [], start=1):
        panel.id_val = pid
    return JSONEncoder(sort_keys=True, indent=2).encode(model) + "\n"


def build_all(out_dir: Path = GENERATED) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name in DASHBOARDS:
        path = out_dir / f"{name}.json"
        path.write_text(render(name))
        written.append(path)
    return written
