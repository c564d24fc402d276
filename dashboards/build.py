"""The Grafana dashboards, built as code with grafana-foundation-sdk (pure: builders in, JSON text out).

Six dashboards share the template variables `$datasource`, `$cluster` and `$namespace` (regexes: "All" is `.*`,
which also matches series without the label), the `infercast` tag (the links between them) and two annotations
(infercast's firing alerts; the actuator's applied and proposed actions): fleet overview, KV-cache health and
forecasts (with `$pool` and `$version`), serving latency (vLLM's own histograms, with `$model_name`), GPU (with
`$node`), and the actuator (with `$pool`: the pools it acted on, `fleet` for fleet-wide settings).  All PromQL
lives in `dashboards/queries.py`.  Colour bands and threshold lines come from the fleet file's `thresholds`
(`DashboardSettings.from_fleet`), and the version of a vLLM model from its `versions.<v>.model.name`.

Each dashboard is a module of its own (`fleet_overview.py`, `kv_cache_health.py`, `forecasts.py`, `latency.py`,
`gpu.py`, `actuator.py`: one function a row), built from the shared builders and settings in `panels.py`; this module
names them, renders their JSON and writes it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grafana_foundation_sdk.builders.dashboard import Dashboard
from grafana_foundation_sdk.cog.encoder import JSONEncoder

from infercast.alertrules.sources import translate

from . import queries as q
from .actuator import actuator
from .fleet_overview import fleet_overview
from .forecasts import forecasts
from .gpu import gpu
from .kv_cache_health import kv_cache_health
from .latency import latency
from .panels import DEFAULT_FLEET, DashboardSettings

__all__ = ["DASHBOARDS", "DEFAULT_FLEET", "GENERATED", "DashboardSettings", "annotations", "build_all", "render"]


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
