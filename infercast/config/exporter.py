"""`exporter` and `metrics`: the exporter's service settings and where the per-engine serving figures are read
from (the exporter's series or the engines' own recording rules)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import PosFloat, PosInt, Strict

#: `metrics.source`: where the per-engine serving figures are read from (MetricsConfig)
MetricsSource = Literal["exporter", "engines"]


class MetricsConfig(Strict):
    """Where the per-engine serving figures (KV-cache usage, batch saturation, requests per second) are read from."""

    source: MetricsSource = Field(
        "exporter",
        description="exporter: the alerts, dashboards and predictor read the series the infercast exporter "
        "re-emits from the engines (the default); engines: they "
        "read the recording rules on the engines' own metrics (pool_version:engine_kv_cache_usage:max, ...: "
        "alertrules/engines.py, Prometheus scraping the engines itself), and the exporter emits only what the "
        "engines do not give (docs/exporters.md)",
    )
    rate_window: str = Field(
        "5m",
        pattern=r"^\d+[smhd]$",
        description="the engine rules' rate() window (the `rate5m` in their names); what reads them uses the same",
    )


class ExporterConfig(Strict):
    listen: str = "127.0.0.1:9400"
    scrape_timeout_seconds: PosFloat = 2.0
    staleness_seconds: PosFloat = 60.0
    max_body_bytes: PosInt = 16 * 1024 * 1024
    max_series_per_target: PosInt = Field(
        2000, description="series of the families it reads one target may send per scrape (label cardinality)"
    )
    hit_ratio_window_seconds: PosFloat = 300.0
