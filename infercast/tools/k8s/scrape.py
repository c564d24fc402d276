"""How Prometheus scrapes the engines themselves, generated from the fleet file: PodMonitors for the Prometheus
Operator, and plain `scrape_configs` for a Prometheus without it (Debian, docker-compose).  Pure: config in,
plain dicts out.

Both give every engine series two target labels, `pool` and `version` (the fleet file's names), and keep the
engine's own labels as they are (no `honor_labels`): the recording rules of alertrules/engines.py aggregate on
those two labels.

- PodMonitors: one per pool, in the engines' namespace, selecting the pool's pods by `pools.<pool>.engines.
  pod_labels` (default `infercast.io/pool: <pool>`), on the engine's metrics port (`engines.port`, default the
  engine's own: `ENGINE_PORTS`).  Relabelings set `pool` to the pool and `version` to the pool's version, or to the
  pod's `infercast.io/version` label where a pod has one (a canary of another version in the pool).  One for
  dcgm-exporter, which keeps its own `pod`/`namespace`/`container` labels (`honorLabels`: they name the pod using
  the GPU, not dcgm-exporter's own pod; NVIDIA's documented setting).
- Plain scrape configs: one job per pool from the fleet file's `targets` (their URLs, `pool`, `version`), and one
  for its dcgm targets.

Triton (TensorRT-LLM) serves several models from one server, each with its own `model` label and a `version` label
of its own (Triton's model version, kept as `exported_version`): a metric relabeling sets `version` from `model`
to the fleet version whose `model.name` it is.
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import urlsplit

from infercast.alertrules.engines import model_names
from infercast.config import ConfigError, FleetConfig

Obj = dict[str, Any]

#: engine kind -> (metrics port, what serves it): the engines' defaults (their docs and images)
ENGINE_PORTS: dict[str, int] = {
    "vllm": 8000,  # `vllm serve --port` default; /metrics on the API server
    "sglang": 30000,  # `python -m sglang.launch_server --port` default; /metrics with --enable-metrics
    "tgi": 80,  # the TGI image's PORT (the launcher's own default is 3000); /metrics on the router
    "trtllm": 8002,  # Triton's --metrics-port default
}
ENGINE_KINDS = tuple(ENGINE_PORTS)
#: the pod labels a pool's engines carry by default, and the one that overrides a pod's version
POOL_LABEL = "infercast.io/pool"
VERSION_LABEL = "infercast.io/version"
#: where the GPU operator runs dcgm-exporter, and its pods' label and port
DCGM_NAMESPACE = "gpu-operator"
DCGM_POD_LABELS = {"app": "nvidia-dcgm-exporter"}
DCGM_PORT = 9400
#: the engines' own label that names the served model, where one label does (Triton: several per server)
TRITON_MODEL_LABEL = "model"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


def meta_label(key: str) -> str:
    """The service-discovery label of a pod label: `__meta_kubernetes_pod_label_infercast_io_version` for
    `infercast.io/version`."""
    return "__meta_kubernetes_pod_label_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)


def pod_labels(cfg: FleetConfig, pool: str) -> dict[str, str]:
    labels = cfg.pools[pool].engines.pod_labels or {POOL_LABEL: pool}
    for k, v in labels.items():
        if len(v) > 63 or not _LABEL_VALUE.match(v):
            raise ConfigError(f"pools.{pool}.engines.pod_labels: {k}={v!r} is not a Kubernetes label value")
    return dict(labels)


def _model_relabelings(cfg: FleetConfig, camel: bool) -> list[Obj]:
    """Triton: `version` from the served `model` (the fleet file's model names)."""
    keys = ("sourceLabels", "targetLabel") if camel else ("source_labels", "target_label")
    return [
        {keys[0]: [TRITON_MODEL_LABEL], "regex": re.escape(model), keys[1]: "version", "replacement": version}
        for model, version in sorted(model_names(cfg).items())
    ]


def pod_monitor(cfg: FleetConfig, pool: str, namespace: str, release: str, interval: str = "15s") -> Obj:
    p = cfg.pools[pool]
    e = p.engines
    port = e.port if e.port is not None else ENGINE_PORTS[e.kind]
    endpoint: Obj = {"portNumber": port} if isinstance(port, int) else {"port": port}
    endpoint |= {
        "path": e.path,
        "interval": interval,
        "relabelings": [
            {"targetLabel": "pool", "replacement": pool},
            {"targetLabel": "version", "replacement": p.version},
            {"sourceLabels": [meta_label(VERSION_LABEL)], "regex": "(.+)", "targetLabel": "version"},
        ],
    }
    if e.kind == "trtllm":
        endpoint["metricRelabelings"] = _model_relabelings(cfg, camel=True)
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {
            "name": f"infercast-engines-{_dns(pool)}",
            "namespace": namespace,
            "labels": _labels(release, e.kind),
        },
        "spec": {"selector": {"matchLabels": pod_labels(cfg, pool)}, "podMetricsEndpoints": [endpoint]},
    }


def dcgm_pod_monitor(release: str, namespace: str = DCGM_NAMESPACE, interval: str = "15s") -> Obj:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "infercast-dcgm-exporter", "namespace": namespace, "labels": _labels(release, "dcgm")},
        "spec": {
            "selector": {"matchLabels": dict(DCGM_POD_LABELS)},
            "podMetricsEndpoints": [
                {"portNumber": DCGM_PORT, "path": "/metrics", "interval": interval, "honorLabels": True}
            ],
        },
    }


def pod_monitors(cfg: FleetConfig, namespace: str, release: str) -> list[Obj]:
    """One PodMonitor per pool (standby pools too: their pods exist once pre-warmed), and dcgm-exporter's."""
    return [*(pod_monitor(cfg, pool, namespace, release) for pool in cfg.pools), dcgm_pod_monitor(release)]


def _labels(release: str, kind: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "infercast-engines",
        "app.kubernetes.io/component": "monitoring",
        "app.kubernetes.io/part-of": "infercast",
        "infercast.io/engine": kind,
        "release": release,
    }


def _dns(name: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")


# --- plain Prometheus ---------------------------------------------------------------------------------------------
def scrape_configs(cfg: FleetConfig, interval: str | None = None) -> list[Obj]:
    """The fleet file's engine and dcgm targets as `scrape_configs` jobs: one per pool (and version, kind, URL
    scheme and path), target labels `pool` and `version`; a target's `version` defaults to its pool's, its pool to
    the first pool serving its version.  ConfigError for an engine target that names neither."""
    jobs: dict[tuple[str, str, str, str, str], Obj] = {}
    dcgm: dict[tuple[str, str], list[str]] = {}
    for i, t in enumerate(cfg.targets):
        if t.kind == "twin" or t.url is None:
            continue
        u = urlsplit(t.url)
        path = u.path or "/metrics"
        if t.kind == "dcgm":
            dcgm.setdefault((u.scheme, path), []).append(u.netloc)
            continue
        pool = t.pool or next((n for n, p in cfg.pools.items() if t.version and p.version == t.version), None)
        if pool is None:
            raise ConfigError(f"targets.{i} ({t.name}): an engine target needs a pool or a version for its labels")
        version = t.version or cfg.pools[pool].version
        key = (pool, version, t.kind, u.scheme, path)  # a job per kind too: Triton's has its model mapping
        job = jobs.get(key)
        if job is None:
            name = (
                f"{t.kind}-{_dns(pool)}"
                if not any(k[0] == pool for k in jobs)
                else f"{t.kind}-{_dns(pool)}-{len(jobs)}"
            )
            job = {"job_name": name, "scheme": u.scheme, "metrics_path": path}
            if interval:
                job["scrape_interval"] = interval
            job["static_configs"] = [{"targets": [], "labels": {"pool": pool, "version": version}}]
            if t.kind == "trtllm":
                job["metric_relabel_configs"] = _model_relabelings(cfg, camel=False)
            jobs[key] = job
        job["static_configs"][0]["targets"].append(u.netloc)
    out = list(jobs.values())
    for n, ((scheme, path), targets) in enumerate(sorted(dcgm.items())):
        job = {"job_name": "dcgm-exporter" if n == 0 else f"dcgm-exporter-{n}", "scheme": scheme, "metrics_path": path}
        if interval:
            job["scrape_interval"] = interval
        job["honor_labels"] = True  # dcgm-exporter's pod/namespace name the GPU's user: keep them
        job["static_configs"] = [{"targets": targets}]
        out.append(job)
    return out


def prometheus_config(
    cfg: FleetConfig, *, interval: str = "15s", rule_files: tuple[str, ...] = ("engines.yml",)
) -> Obj:
    """A whole prometheus.yml: the engines' jobs and the engine recording rules (copy the `scrape_configs` into
    your own config instead if you have one)."""
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": list(rule_files),
        "scrape_configs": scrape_configs(cfg),
    }
