"""The objects of the Kustomize base (deploy/kubernetes/base/), built from the same sources as the docker-compose
stack: the fleet file (adapted for the cluster: fleet.py), `alertrules` (rules and the Alertmanager route) and
`dashboards` (the Grafana JSON).  Pure: settings in, plain dicts out; build.py writes them.

Every object names its namespace itself (the base has no `namespace:` transformer), because the actuator's scaling
Role lives in the engines' namespace, not infercast's.
"""

from __future__ import annotations

import json
import re
from typing import Any

from infercast.alertrules.alertmanager import Receivers, alertmanager_config
from infercast.alertrules.engines import engine_rule_file
from infercast.alertrules.rules import JOBS, rule_files
from infercast.alertrules.settings import AlertSettings
from infercast.config import FleetConfig, GatewayBackend, KubernetesBackend

from .fleet import AUDIT_DIR, LEASE_NAME
from .settings import IMAGE_UID, PORTS, K8sSettings

Obj = dict[str, Any]

PART_OF = {"app.kubernetes.io/part-of": "infercast"}
#: the Service label whose value the ServiceMonitor makes the `job` (infercast.alertrules.rules.JOBS, as
#: docker-compose's)
JOB_LABEL = "infercast.io/job"
FLEET_CONFIGMAP = "infercast-fleet"
FLEET_PATH = "/etc/infercast/fleet.yaml"
#: the Secret (created at install, never committed) holding the actuator webhook's bearer token
WEBHOOK_SECRET = "infercast-actuator-token"
#: the labels GPU nodes carry (NVIDIA GPU feature discovery / the GPU operator) and the taint they often have
GPU_NODE_LABEL = ("nvidia.com/gpu.present", "true")
GPU_TAINT = "nvidia.com/gpu"
#: the actuator's audit volume: a PersistentVolumeClaim per replica, mounted at fleet.AUDIT_DIR
AUDIT_VOLUME = "audit"


def _meta(name: str, ns: str | None, component: str, **extra: dict[str, str]) -> Obj:
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/component": component, **PART_OF}
    labels.update(extra.get("labels", {}))
    meta: Obj = {"name": name, "labels": labels}
    if ns is not None:
        meta["namespace"] = ns
    if extra.get("annotations"):
        meta["annotations"] = extra["annotations"]
    return meta


def _selector(name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": name}


def service_account(name: str, ns: str, component: str, token: bool = False) -> Obj:
    """`token`: mount the API token (only the actuator talks to the API)."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _meta(name, ns, component),
        "automountServiceAccountToken": token,
    }


def _container(s: K8sSettings, name: str, args: list[str], port: int, env: list[Obj] | None = None) -> Obj:
    c: Obj = {
        "name": name,
        "image": s.image_for(name),
        "args": args,
        "ports": [{"name": "metrics", "containerPort": port, "protocol": "TCP"}],
        "env": [{"name": "HOME", "value": "/tmp"}, {"name": "MPLCONFIGDIR", "value": "/tmp"}, *(env or [])],
        "readinessProbe": {"httpGet": {"path": "/metrics", "port": "metrics"}, "periodSeconds": 10},
        "livenessProbe": {
            "httpGet": {"path": "/metrics", "port": "metrics"},
            "periodSeconds": 20,
            "failureThreshold": 6,
        },
        "resources": {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "volumeMounts": [
            {"name": "fleet", "mountPath": "/etc/infercast", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
    }
    return c


def _pod(s: K8sSettings, sa: str, containers: list[Obj], volumes: list[Obj] | None = None, **extra: Any) -> Obj:
    spec: Obj = {
        "serviceAccountName": sa,
        "automountServiceAccountToken": sa == "infercast-actuator",
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": IMAGE_UID,
            "runAsGroup": IMAGE_UID,
            "fsGroup": IMAGE_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": containers,
        "volumes": [
            {"name": "fleet", "configMap": {"name": FLEET_CONFIGMAP}},
            {"name": "tmp", "emptyDir": {}},
            *(volumes or []),
        ],
    }
    spec.update(extra)
    return spec


def _template(name: str, component: str, pod: Obj) -> Obj:
    return {"metadata": {"labels": _meta(name, None, component)["labels"]}, "spec": pod}


def service(name: str, ns: str, component: str, port: int, job: str | None, headless: bool = False) -> Obj:
    """`job`: scraped under this job name (None: not scraped)."""
    labels = {JOB_LABEL: job} if job else {}
    spec: Obj = {
        "selector": _selector(name),
        "ports": [{"name": "metrics", "port": port, "targetPort": "metrics", "protocol": "TCP"}],
    }
    if headless:
        spec["clusterIP"] = "None"
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(name, ns, component, labels=labels), "spec": spec}


# --- the workloads ---------------------------------------------------------------------------------------------
def exporter_node(s: K8sSettings) -> list[Obj]:
    """The per-node exporter: a DaemonSet on GPU nodes reading their GPUs through NVML (`--gpus-only`)."""
    name, ns, port = "infercast-exporter-node", s.namespace, PORTS["exporter"]
    env = [
        {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
        # the NVIDIA container runtime exposes the driver's NVML to a pod that asks for it, without taking a GPU
        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
        {"name": "NVIDIA_DRIVER_CAPABILITIES", "value": "utility"},
    ]
    args = ["infercast", "exporter", f"--config={FLEET_PATH}", "--gpus-only", "--node=$(NODE_NAME)"]
    args.append(f"--listen=0.0.0.0:{port}")
    pod = _pod(
        s,
        name,
        [_container(s, "exporter", args, port, env)],
        nodeSelector={GPU_NODE_LABEL[0]: GPU_NODE_LABEL[1]},
        tolerations=[{"key": GPU_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
    )
    ds = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(name, ns, "exporter"),
        "spec": {
            "selector": {"matchLabels": _selector(name)},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": _template(name, "exporter", pod),
        },
    }
    return [
        service_account(name, ns, "exporter"),
        ds,
        service(name, ns, "exporter", port, "infercast-exporter", headless=True),
    ]


def exporter_fleet(s: K8sSettings) -> list[Obj]:
    """The fleet exporter: the fleet file's targets (engines, dcgm-exporter, router), router ingest, derived scores."""
    name, ns, port = "infercast-exporter", s.namespace, PORTS["exporter"]
    args = ["infercast", "exporter", f"--config={FLEET_PATH}", "--no-nvml", f"--listen=0.0.0.0:{port}"]
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, ns, "exporter"),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _selector(name)},
            "template": _template(name, "exporter", _pod(s, name, [_container(s, "exporter", args, port)])),
        },
    }
    return [service_account(name, ns, "exporter"), dep, service(name, ns, "exporter", port, "infercast-exporter")]


def predictor(s: K8sSettings) -> list[Obj]:
    """N replicas, each forecasting its hashmod shard of (pool, version): a StatefulSet, so that pod `-i` is shard i."""
    name, ns, port = "infercast-predictor", s.namespace, PORTS["predictor"]
    args = ["infercast", "predictor", f"--config={FLEET_PATH}", f"--listen=0.0.0.0:{port}"]
    env = [{"name": "INFERCAST_PREDICTOR_SHARD", "value": f"ordinal/{s.predictor_shards}"}]
    c = _container(s, "predictor", args, port, env)
    c["resources"] = {"requests": {"cpu": "500m", "memory": "1Gi"}, "limits": {"memory": "4Gi"}}
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(name, ns, "predictor"),
        "spec": {
            "serviceName": name,
            "replicas": s.predictor_shards,
            "podManagementPolicy": "Parallel",  # shards are independent: start and replace them together
            "selector": {"matchLabels": _selector(name)},
            "template": _template(name, "predictor", _pod(s, name, [c])),
        },
    }
    return [
        service_account(name, ns, "predictor"),
        sts,
        service(name, ns, "predictor", port, "infercast-predictor", headless=True),
    ]


def actuator(s: K8sSettings, cfg: FleetConfig) -> list[Obj]:
    """Replicas electing one leader through a Lease; the follower stays advisory; each keeps its audit trail on a
    PersistentVolumeClaim of its own.  RBAC: the Lease, and what its backend may change (the `scale` of exactly the
    Deployments a Kubernetes backend maps pools to; a gateway backend's HTTPRoute and autoscalers)."""
    name, ns, port = "infercast-actuator", s.namespace, PORTS["actuator"]
    rbac = _actuator_roles(name, ns, cfg)
    sts = _actuator_set(s, cfg, name, port)
    return [
        service_account(name, ns, "actuator", token=True),
        *rbac,
        sts,
        service(name, ns, "actuator", port, "infercast-actuator"),
    ]


def _actuator_set(s: K8sSettings, cfg: FleetConfig, name: str, port: int) -> Obj:
    """The actuator's StatefulSet: its replicas spread over nodes, each with its audit volume."""
    ns = s.namespace
    env = [
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {
            "name": cfg.actuator.webhook.token_env,
            "valueFrom": {"secretKeyRef": {"name": WEBHOOK_SECRET, "key": "token"}},
        },
    ]
    c = _container(s, "actuator", ["infercast", "actuator", f"--config={FLEET_PATH}"], port, env)
    c["volumeMounts"].append({"name": AUDIT_VOLUME, "mountPath": AUDIT_DIR})
    anti = {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 100,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": _selector(name)},
                },
            }
        ]
    }
    pod = _pod(s, name, [c], affinity={"podAntiAffinity": anti})
    pod["terminationGracePeriodSeconds"] = 30  # SIGTERM: finish the tick, release the Lease
    # A StatefulSet, for its volumeClaimTemplates: each replica keeps its audit trail (SQLite) on a volume of its
    # own that outlives the pod.  One claim shared by the replicas could not be: ReadWriteOnce attaches to one node,
    # and the replicas are spread over nodes so that a node's loss does not take the leader and its follower.
    sts = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": _meta(name, ns, "actuator"),
        "spec": {
            "serviceName": name,
            "replicas": s.actuator_replicas,
            "podManagementPolicy": "Parallel",  # the follower need not wait for the leader's pod to be ready
            "selector": {"matchLabels": _selector(name)},
            "template": _template(name, "actuator", pod),
            "volumeClaimTemplates": [audit_claim(s)],
            # a scaled-down or deleted set keeps its audit trails (the claims are deleted by hand)
            "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Retain", "whenScaled": "Retain"},
        },
    }
    return sts


def _actuator_roles(name: str, ns: str, cfg: FleetConfig) -> list[Obj]:
    """The actuator's Roles and their bindings: the Lease, and what its backend may change."""
    backend = cfg.actuator.backend
    lease_role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(f"{name}-lease", ns, "actuator"),
        "rules": [
            # `create` cannot be limited to a name (the object does not exist yet); the rest can
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
            {
                "apiGroups": ["coordination.k8s.io"],
                "resources": ["leases"],
                "resourceNames": [LEASE_NAME],
                "verbs": ["get", "update"],
            },
        ],
    }
    objs = [lease_role, _binding(lease_role, name, ns)]
    if isinstance(backend, KubernetesBackend):
        names = sorted(set(backend.deployments.values()))
        scale_role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": _meta(f"{name}-scale", backend.namespace, "actuator"),
            "rules": [
                {"apiGroups": ["apps"], "resources": ["deployments"], "resourceNames": names, "verbs": ["get"]},
                {
                    "apiGroups": ["apps"],
                    "resources": ["deployments/scale"],
                    "resourceNames": names,
                    "verbs": ["get", "patch"],
                },
                # before each scale: is an autoscaler scaling it? (`list` cannot be limited to names)
                {"apiGroups": ["autoscaling"], "resources": ["horizontalpodautoscalers"], "verbs": ["list"]},
                {"apiGroups": ["keda.sh"], "resources": ["scaledobjects"], "verbs": ["list"]},
            ],
        }
        objs += [scale_role, _binding(scale_role, name, ns)]
    if isinstance(backend, GatewayBackend):
        objs += _gateway_roles(backend, name, ns)
    return objs


def audit_claim(s: K8sSettings) -> Obj:
    """The claim template of an actuator replica's audit volume: ReadWriteOnce (one replica, one node writes it),
    `K8sSettings.audit_storage` big, on the cluster's default StorageClass unless `audit_storage_class` names one."""
    spec: Obj = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": s.audit_storage}}}
    if s.audit_storage_class is not None:
        spec["storageClassName"] = s.audit_storage_class
    return {"metadata": {"name": AUDIT_VOLUME, "labels": _meta(AUDIT_VOLUME, None, "actuator")["labels"]}, "spec": spec}


def _gateway_roles(backend: GatewayBackend, sa: str, sa_ns: str) -> list[Obj]:
    """The gateway backend's: get and patch its HTTPRoute and autoscalers by name; get the Deployments and
    StatefulSets (the autoscalers' targets, for readiness: their names are the autoscalers', not known here)."""
    rules: list[Obj] = []
    if backend.httproute is not None:
        rules.append(
            {
                "apiGroups": ["gateway.networking.k8s.io"],
                "resources": ["httproutes"],
                "resourceNames": [backend.httproute.name],
                "verbs": ["get", "patch"],
            }
        )
    for kind, group, resource in (
        ("HorizontalPodAutoscaler", "autoscaling", "horizontalpodautoscalers"),
        ("ScaledObject", "keda.sh", "scaledobjects"),
    ):
        names = sorted({t.name for t in backend.autoscalers.values() if t.kind == kind})
        if names:
            rules.append(
                {"apiGroups": [group], "resources": [resource], "resourceNames": names, "verbs": ["get", "patch"]}
            )
    if backend.autoscalers:
        rules.append({"apiGroups": ["apps"], "resources": ["deployments", "statefulsets"], "verbs": ["get"]})
    breakers = getattr(backend, "breakers", None)  # the envoy-gateway backend's BackendTrafficPolicies
    if breakers is not None:
        from infercast.actuators.backends.envoy_gateway import POLICIES, policy_name

        names = sorted(t.policy or policy_name(p) for p, t in breakers.pools.items())
        group, _, resource = POLICIES
        rules.append({"apiGroups": [group], "resources": [resource], "resourceNames": names, "verbs": ["get", "patch"]})
        rules.append({"apiGroups": [group], "resources": [resource], "verbs": ["create"]})  # (create takes no names)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _meta(f"{sa}-gateway", backend.namespace, "actuator"),
        "rules": rules,
    }
    return [role, _binding(role, sa, sa_ns)]


def _binding(role: Obj, sa: str, sa_ns: str) -> Obj:
    meta = role["metadata"]
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _meta(meta["name"], meta["namespace"], "actuator"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": meta["name"]},
        "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": sa_ns}],
    }


def alert_log(s: K8sSettings) -> list[Obj]:
    """The stand-in pager of docker-compose: prints each notification as a JSON line (`kubectl logs`)."""
    name, ns, port = "infercast-alert-log", s.namespace, PORTS["alert-log"]
    c = _container(
        s, "alert-log", ["python", "-m", "infercast.alertrules.webhook", "--listen", f"0.0.0.0:{port}"], port
    )
    c["readinessProbe"] = c["livenessProbe"] = {"tcpSocket": {"port": "metrics"}, "periodSeconds": 20}
    c["volumeMounts"] = [m for m in c["volumeMounts"] if m["name"] == "tmp"]
    pod = _pod(s, name, [c])
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] == "tmp"]
    dep = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _meta(name, ns, "alert-log"),
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": _selector(name)},
            "template": _template(name, "alert-log", pod),
        },
    }
    return [service_account(name, ns, "alert-log"), dep, service(name, ns, "alert-log", port, None)]


# --- the Prometheus Operator's objects --------------------------------------------------------------------------
def service_monitor(s: K8sSettings) -> Obj:
    """One ServiceMonitor for every infercast Service with a job label; `honorLabels`: the exporter's own
    `instance` (an engine server) wins over the scrape target's, as in deploy/prometheus.yml."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": _meta("infercast", s.namespace, "monitoring", labels={"release": s.release}),
        "spec": {
            "jobLabel": JOB_LABEL,
            "namespaceSelector": {"matchNames": [s.namespace]},
            "selector": {
                "matchLabels": PART_OF,
                "matchExpressions": [{"key": JOB_LABEL, "operator": "In", "values": list(JOBS)}],
            },
            "endpoints": [{"port": "metrics", "path": "/metrics", "interval": "15s", "honorLabels": True}],
        },
    }


def prometheus_rule(s: K8sSettings, alerts: AlertSettings | None = None) -> Obj:
    """alertrules' recording and alerting groups, as Prometheus loads them from alertrules/rules/*.yml.

    Each alert gets `namespace: <infercast's>`: an AlertmanagerConfig only sees alerts carrying its own namespace
    (the operator's default OnNamespace matcher), and the recording rules aggregate that label away."""
    groups = []
    for doc in rule_files(alerts or AlertSettings()).values():
        for g in doc["groups"]:
            rules = []
            for r in g["rules"]:
                r = dict(r)
                if "alert" in r:
                    r["labels"] = {**r.get("labels", {}), "namespace": s.namespace}
                rules.append(r)
            groups.append({**g, "rules": rules})
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _meta("infercast", s.namespace, "monitoring", labels={"release": s.release}),
        "spec": {"groups": groups},
    }


def engine_rule(s: K8sSettings, cfg: FleetConfig) -> Obj:
    """alertrules/engines.py's recording rules on the engines' own metrics, for the `engines` Component (beside
    its PodMonitors: without them the rules find no series with a `pool` label and record nothing)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": _meta("infercast-engines", s.namespace, "monitoring", labels={"release": s.release}),
        "spec": engine_rule_file(cfg),
    }


_MATCHER = re.compile(r'^([A-Za-z_][A-Za-z0-9_]*)(=~|!~|!=|=)"(.*)"$')


def matcher(text: str) -> dict[str, str]:
    """Alertmanager's `name="value"` (or `=~`, `!=`, `!~`) as the operator's matcher object."""
    m = _MATCHER.match(text)
    if not m:
        raise ValueError(f"not an Alertmanager matcher: {text!r}")
    return {"name": m[1], "matchType": m[2], "value": m[3]}


def _route(r: Obj) -> Obj:
    keys = {"receiver": "receiver", "group_by": "groupBy", "group_wait": "groupWait"}
    keys |= {"group_interval": "groupInterval", "repeat_interval": "repeatInterval", "continue": "continue"}
    out: Obj = {new: r[old] for old, new in keys.items() if old in r}
    if "matchers" in r:
        out["matchers"] = [matcher(m) for m in r["matchers"]]
    if "routes" in r:
        out["routes"] = [_route(x) for x in r["routes"]]
    return out


def _receiver(r: Obj) -> Obj:
    out: Obj = {"name": r["name"]}
    hooks = []
    for h in r.get("webhook_configs", []):
        hook: Obj = {"url": h["url"], "sendResolved": h.get("send_resolved", True)}
        if "max_alerts" in h:
            hook["maxAlerts"] = h["max_alerts"]
        if "http_config" in h:  # the actuator's bearer token, from the Secret the install creates
            cred = {"name": WEBHOOK_SECRET, "key": "token"}
            hook["httpConfig"] = {"authorization": {"type": "Bearer", "credentials": cred}}
        hooks.append(hook)
    if hooks:
        out["webhookConfigs"] = hooks
    unsupported = set(r) - {"name", "webhook_configs"}
    if unsupported:
        raise ValueError(f"receiver {r['name']}: {sorted(unsupported)} not translated to an AlertmanagerConfig")
    return out


def alertmanager_config_object(s: K8sSettings) -> Obj:
    """alertrules' Alertmanager route, receivers and inhibitions as an `AlertmanagerConfig` (webhook receivers:
    the actuator, and the stand-in pager and chat that docs/kubernetes.md shows how to replace)."""
    receivers = Receivers(
        actuator_url=s.actuator_url(),
        actuator_token_file="(the Secret)",  # any value: the receiver then carries the Secret's token
        pager_url=s.alert_log_url("pager"),
        chat_url=s.alert_log_url("chat"),
        ticket_url=s.alert_log_url("ticket"),
        watchdog_url=s.alert_log_url("watchdog"),
    )
    am = alertmanager_config(receivers)
    inhibit = [
        {
            "sourceMatch": [matcher(m) for m in r["source_matchers"]],
            "targetMatch": [matcher(m) for m in r["target_matchers"]],
            "equal": r["equal"],
        }
        for r in am["inhibit_rules"]
    ]
    return {
        "apiVersion": "monitoring.coreos.com/v1alpha1",
        "kind": "AlertmanagerConfig",
        "metadata": _meta("infercast", s.namespace, "monitoring", labels={"release": s.release}),
        "spec": {
            "route": _route(am["route"]),
            "receivers": [_receiver(r) for r in am["receivers"]],
            "inhibitRules": inhibit,
        },
    }


def dashboard_configmaps(s: K8sSettings, dashboards: dict[str, str]) -> list[Obj]:
    """One ConfigMap per dashboard, labelled for Grafana's sidecar and filed in its `infercast` folder."""
    key, value = s.dashboard_label
    out = []
    for name, text in dashboards.items():
        json.loads(text)  # a broken dashboard fails the build, not Grafana
        meta = _meta(
            f"infercast-dashboard-{name}",
            s.namespace,
            "dashboards",
            labels={key: value},
            annotations={"grafana_folder": "infercast"},
        )
        out.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {f"{name}.json": text}})
    return out


def namespace(s: K8sSettings) -> Obj:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": _meta(s.namespace, None, "namespace")}
