"""What a Kubernetes install varies: names, namespaces, the image, replica counts.  Pure data.

The defaults are the committed tree (deploy/kubernetes/): infercast in namespace `infercast`, the engines it may
scale in `inference`, a kube-prometheus-stack release named `kube-prometheus-stack` in `monitoring`.  Anything
else is `infercast k8s build --out DIR --namespace ... --release ...` (docs/kubernetes.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from infercast.resources import example_fleet

#: the repository root in a checkout: the committed tree `infercast k8s build` rewrites (installed: give --out)
REPO = Path(__file__).resolve().parents[3]

#: the listen ports of the services (the same as docker-compose.yml)
PORTS = {"exporter": 9400, "predictor": 9401, "actuator": 9402, "alert-log": 9095}
#: a storage size as Kubernetes writes it: a number and a binary or decimal suffix (500Mi, 1Gi, 2G)
QUANTITY = re.compile(r"[1-9][0-9]*(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?")
#: the uid the images run as (deploy/Dockerfile.*: USER 10001)
IMAGE_UID = 10001
#: container -> the image it runs: deploy/Dockerfile.<image>, named NAME-<image>:TAG from the `image` setting.  The
#: exporter's image (no torch) serves the fleet exporter and the NVML DaemonSet; the actuator's, the alert log too.
CONTAINER_IMAGES = {"exporter": "exporter", "predictor": "predictor", "actuator": "actuator", "alert-log": "actuator"}


@dataclass(frozen=True)
class K8sSettings:
    #: where infercast runs (every object of the base; the actuator's Lease lives here)
    namespace: str = "infercast"
    #: NAME:TAG the per-component images are named from (NAME-exporter:TAG, ...: `image_for`); overlays retag
    #: each with Kustomize's `images:`
    image: str = "infercast:0.1.0"
    #: the fleet file the ConfigMap is made from (adapted for the cluster: infercast/tools/k8s/fleet.py)
    fleet: Path = field(default_factory=example_fleet)
    #: Prometheus as seen from inside the cluster: the operator's governing Service exists in every install
    prometheus_url: str = "http://prometheus-operated.monitoring.svc:9090"
    #: namespace of the Deployments the actuator's Kubernetes backend scales (when the fleet file names none)
    engine_namespace: str = "inference"
    #: pool -> Deployment the actuator scales (when the fleet file names none); empty: `vllm-<pool>` for each pool
    deployments: dict[str, str] = field(default_factory=dict)
    #: a generated KEDA ScaledObject's ceiling: the pool's fleet-file nodes times this (its floor: the nodes)
    keda_max_ratio: float = 2.0
    predictor_shards: int = 2
    actuator_replicas: int = 2
    #: each actuator replica's audit volume (a PersistentVolumeClaim, ReadWriteOnce): a Kubernetes quantity
    audit_storage: str = "1Gi"
    #: its StorageClass; None: the cluster's default
    audit_storage_class: str | None = None
    #: Grafana's sidecar picks up ConfigMaps with this label (kube-prometheus-stack's default)
    dashboard_label: tuple[str, str] = ("grafana_dashboard", "1")
    #: the kube-prometheus-stack release: its Prometheus selects ServiceMonitors and rules labelled release=<name>
    release: str = "kube-prometheus-stack"

    def __post_init__(self) -> None:
        if self.predictor_shards < 1 or self.actuator_replicas < 1:
            raise ValueError("predictor_shards and actuator_replicas must be >= 1")
        if not QUANTITY.fullmatch(self.audit_storage):
            raise ValueError(
                f"audit_storage must be a Kubernetes quantity such as 1Gi or 500Mi, got {self.audit_storage!r}"
            )
        if not 1.0 <= self.keda_max_ratio <= 100.0:
            raise ValueError(f"keda_max_ratio must be 1-100, got {self.keda_max_ratio}")

    def image_for(self, container: str) -> str:
        """The image a container runs: infercast:0.1.0 and "predictor" -> infercast-predictor:0.1.0."""
        name, _, tag = self.image.rpartition(":")
        if not name or "/" in tag:  # no tag (a registry port is not one): the name alone
            name, tag = self.image, ""
        return f"{name}-{CONTAINER_IMAGES[container]}" + (f":{tag}" if tag else "")

    def actuator_url(self) -> str:
        """The actuator's webhook as Alertmanager (in another namespace) reaches it."""
        return f"http://infercast-actuator.{self.namespace}.svc:{PORTS['actuator']}/api/v1/alerts"

    def alert_log_url(self, path: str) -> str:
        return f"http://infercast-alert-log.{self.namespace}.svc:{PORTS['alert-log']}/{path}"
