"""Predictive scaling by KEDA on infercast's forecasts, with no SaaS: one `ScaledObject` per serving pool whose
Prometheus trigger reads the pool's KV-cache forecast.  Pure.

For users who let KEDA own scaling.  `infercast k8s build` writes them as a Kustomize Component,
deploy/kubernetes/base/keda/ (not in the base itself: a cluster without KEDA has no ScaledObject API); an overlay
takes it with `components: [../../base/keda]`.  Each pool's trigger:

    max(infercast_forecast_kv_cache_usage_ratio{pool="P", aggregate="mean", band="upper"})
      or vector(TARGET)

with `metricType: Value` and `threshold: TARGET` (`thresholds.kv_forecast_trigger`), so the HPA KEDA makes computes
desired = ceil(current replicas x forecast / TARGET): the pool grows *before* the forecast upper band crosses the
trigger, by the ratio it is forecast to cross it by, and shrinks back when the band falls (the HPA's own 10%
tolerance and the scale-down stabilisation window below damp it).  With no forecast (the predictor down, the series
stale) the `or vector(TARGET)` answers the target, so the pool holds its size rather than scaling down to its floor
on a missing series.  The floor is the pool's fleet-file `nodes` (the forecasts only ever add capacity ahead of a
surge), the ceiling `nodes x keda_max_ratio` (K8sSettings).  Cold-standby pools are left out: the actuator pre-warms
them.  The actuator can still raise a ScaledObject's floor ahead of a forecast (`actuator.backend.kind: gateway`,
`autoscalers:`); it never writes the replica count KEDA owns.
"""

from __future__ import annotations

import math
from typing import Any

from infercast.catalog import FORECAST_KV_CACHE_USAGE_RATIO
from infercast.config import FleetConfig, KubernetesBackend

from .fleet import default_deployments
from .settings import K8sSettings

Obj = dict[str, Any]
#: the forecast series the trigger reads: the pool's mean KV usage, upper band, at the horizon
AGGREGATE = "mean"
BAND = "upper"


def forecast_query(pool: str, target: float) -> str:
    """The PromQL of a pool's trigger: its forecast's upper band, or `target` (hold) when there is none."""
    sel = f'pool="{_promql_string(pool)}", aggregate="{AGGREGATE}", band="{BAND}"'
    return f"max({FORECAST_KV_CACHE_USAGE_RATIO}{{{sel}}}) or vector({target:g})"


def scaled_objects(s: K8sSettings, cfg: FleetConfig) -> list[Obj]:
    """One ScaledObject per serving pool of `cfg`, scaling its Deployment in the engines' namespace."""
    backend = cfg.actuator.backend
    names = dict(s.deployments) or (
        dict(backend.deployments) if isinstance(backend, KubernetesBackend) else default_deployments(list(cfg.pools))
    )
    target = cfg.thresholds.kv_forecast_trigger
    out = []
    for pool, pc in cfg.pools.items():
        if pc.standby or pool not in names:
            continue
        out.append(
            {
                "apiVersion": "keda.sh/v1alpha1",
                "kind": "ScaledObject",
                "metadata": {
                    "name": names[pool],
                    "namespace": s.engine_namespace,
                    "labels": {"app.kubernetes.io/part-of": "infercast", "infercast.io/pool": pool},
                },
                "spec": {
                    "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": names[pool]},
                    "minReplicaCount": pc.nodes,
                    "maxReplicaCount": max(pc.nodes, math.ceil(pc.nodes * s.keda_max_ratio)),
                    "pollingInterval": 15,
                    "cooldownPeriod": 300,
                    "advanced": {
                        "horizontalPodAutoscalerConfig": {
                            "behavior": {
                                "scaleUp": {"stabilizationWindowSeconds": 0},
                                "scaleDown": {"stabilizationWindowSeconds": 600},
                            }
                        }
                    },
                    "triggers": [
                        {
                            "type": "prometheus",
                            "name": "infercast-kv-forecast",
                            "metricType": "Value",
                            "metadata": {
                                "serverAddress": s.prometheus_url,
                                "query": forecast_query(pool, target),
                                "threshold": f"{target:g}",
                                "ignoreNullValues": "false",
                            },
                        }
                    ],
                },
            }
        )
    return out


def component(files: list[str]) -> Obj:
    return {"apiVersion": "kustomize.config.k8s.io/v1alpha1", "kind": "Component", "resources": files}


def _promql_string(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"')
