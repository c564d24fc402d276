"""What every dashboard shares: the settings a fleet file gives them, the colour bands, the panel and variable
builders, and `compose`, which lays a dashboard's rows out in order (pure: builders in, builders out)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

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
from grafana_foundation_sdk.cog import builder as cogbuilder
from grafana_foundation_sdk.models import common as cm
from grafana_foundation_sdk.models.dashboard import (
    DashboardCursorSync,
    DashboardLinkType,
    DataSourceRef,
    Panel,
    Threshold,
    ThresholdsMode,
    VariableRefresh,
    VariableSort,
)

from infercast.alertrules.settings import AlertSettings
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


def steps(*steps: tuple[float | None, str]) -> ThresholdsConfig:
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
            kv=steps((None, "green"), (t.kv_forecast_trigger, "orange"), (t.memory_breaker, "red")),
            # the alerts' own thresholds: the pool's mean warns at `fragmentation_warning`, a full instance at
            # `fragmentation_release` (InfercastKVCacheFragmentationHigh / Critical)
            frag=steps((None, "green"), (t.fragmentation_warning, "orange"), (t.fragmentation_release, "red")),
            temp=steps((None, "green"), (t.gpu_temperature_celsius - 5, "orange"), (t.gpu_temperature_celsius, "red")),
            batch=steps((None, "green"), (0.9, "orange"), (s.batch_pinned_ratio, "red")),
            availability=steps((None, "green"), (round(1 - s.slo.availability, 9), "red")),
            latency=steps((None, "green"), (round(1 - s.slo.latency, 9), "red")),
            burn=steps((None, "green"), (1.0, "yellow"), (s.burn_slow, "orange"), (s.burn_fast, "red")),
            ttft=steps((None, "green"), (s.slo.ttft_seconds, "red")),
        )


RISK_BANDS = steps((None, "green"), (50, "orange"), (80, "red"))
HEALTH_BANDS = steps((None, "red"), (50, "orange"), (80, "green"))


def _target(query: q.Q, ref: str) -> Dataquery:
    t = Dataquery().expr(query.expr).ref_id(ref).datasource(DATASOURCE)
    if query.legend:
        t = t.legend_format(query.legend)
    return t.instant() if query.instant else t.range()


#: the two kinds of panel the dashboards draw
PanelKind = TypeVar("PanelKind", Timeseries, Stat)


def _panel(panel: PanelKind, title: str, description: str, unit: str, width: int, height: int) -> PanelKind:
    """What every panel sets alike: its title, its (i) description, the data source, its unit and its size."""
    return panel.title(title).description(description).datasource(DATASOURCE).unit(unit).span(width).height(height)


def ts(
    title: str,
    *queries: q.Q,
    description: str,
    unit: str = "short",
    thresholds: ThresholdsConfig | None = None,
    lo: float | None = 0,
    hi: float | None = None,
    width: int = 12,
) -> Timeseries:
    """A time series panel; `description` (Grafana's (i) tooltip) is required: what it shows and how to read it.
    The axis runs from `lo` (0: nearly every series drawn is a count, a rate, a duration or a share; None: where the
    data starts) to `hi` (None: where the data ends)."""
    p = (
        _panel(Timeseries(), title, description, unit, width, height=8)
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


def share(
    title: str,
    *queries: q.Q,
    description: str,
    thresholds: ThresholdsConfig | None = None,
    width: int = 12,
) -> Timeseries:
    """A time series panel of shares (a ratio, 0 to 1): in percent, its axis from 0 to 1 whatever the data."""
    return ts(
        title, *queries, description=description, unit="percentunit", thresholds=thresholds, lo=0, hi=1, width=width
    )


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
        _panel(Stat(), title, description, unit, width, height=4)
        .color_mode(cm.BigValueColorMode.BACKGROUND)
        .graph_mode(cm.BigValueGraphMode.NONE)
        .reduce_options(cb.ReduceDataOptions().calcs(["lastNotNull"]).values(False))
        .with_target(_target(query, "A"))
    )
    if thresholds is not None:
        p = p.thresholds(thresholds)
    return p


def base(uid: str, title: str, description: str, *variables: QueryVariable) -> Dashboard:
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
            variable("cluster", "Cluster", q.VAR_CLUSTER, multi=False).description(
                "The `cluster` label (an external label of a multi-cluster Prometheus, Thanos or Mimir); "
                "All matches series without it too."
            )
        )
        .with_variable(
            variable("namespace", "Namespace", q.VAR_NAMESPACE).description(
                "The namespace a raw series was scraped in (the engines', or infercast's for its own series); "
                "panels on recorded series cover every namespace. All matches series without it too."
            )
        )
    )
    for v in variables:
        d = d.with_variable(v)
    return d


def variable(name: str, label: str, query: str, *, multi: bool = True) -> QueryVariable:
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


def pool_version() -> tuple[QueryVariable, QueryVariable]:
    return variable("pool", "Pool", q.VAR_POOL), variable("version", "Version", q.VAR_VERSION)


#: a row of a dashboard: its `Row` header, then its panels, in the order they are laid out
Section = list[Row | cogbuilder.Builder[Panel]]


def compose(dashboard: Dashboard, *sections: Section) -> Dashboard:
    """`dashboard` with each section's row and panels added in order (Grafana numbers and places them so)."""
    for section in sections:
        for item in section:
            dashboard = dashboard.with_row(item) if isinstance(item, Row) else dashboard.with_panel(item)
    return dashboard
