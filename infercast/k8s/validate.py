"""Check rendered manifests without a cluster: `infercast k8s validate [OVERLAY ...]`.

- Kubernetes' own kinds against the API's schemas (`kubernetes-validate`, strict: an unknown field is an error,
  as `kubectl apply --validate=strict` would make it), for the oldest and the newest Kubernetes we claim.
- The Prometheus Operator's kinds against the `openAPIV3Schema` of its CRDs vendored in deploy/kubernetes/crds/
  (their source and licence beside them), with unknown fields an error too: the API server would prune them
  silently, which is worse than a refusal.  A kind with no vendored CRD is reported, never passed as checked.
- What no schema says: each predictor StatefulSet's replicas equal the N of its `ordinal/N` shard setting
  (otherwise some (pool, version) series are forecast by nobody), and every Service selects some workload's pods.
"""

from __future__ import annotations

import copy
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .settings import REPO

KUBERNETES = REPO / "deploy" / "kubernetes"
CRDS = KUBERNETES / "crds"
OVERLAYS = KUBERNETES / "overlays"
#: the Kubernetes versions the manifests must be valid for (the oldest still supported upstream, and the newest)
K8S_VERSIONS = ("1.31.0", "1.37.0")
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet")


class ValidationError(Exception):
    pass


@dataclass
class Report:
    source: str
    checked: list[str] = field(default_factory=list)  # "Kind/namespace/name: what checked it"
    unchecked: list[str] = field(default_factory=list)  # "Kind/namespace/name: why not"
    errors: list[str] = field(default_factory=list)


def render(overlay: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize OVERLAY` as objects; a clear error when kubectl is missing or the build fails."""
    try:
        p = subprocess.run(["kubectl", "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise ValidationError("kubectl is not installed (it renders the Kustomize tree: kubectl kustomize)") from None
    if p.returncode != 0:
        raise ValidationError(f"kubectl kustomize {overlay} failed: {p.stderr.strip()[:2000]}")
    return [d for d in yaml.load_all(p.stdout, Loader=_Loader) if d]


class _Loader(yaml.SafeLoader):
    """YAML 1.1's `=` "value" tag, which kubectl prints bare (`matchType: =`), is the string "=" to Kubernetes."""


_Loader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def _closed(schema: Any) -> Any:
    """The schema with every object that lists `properties` closed to others (what the API server prunes)."""
    if isinstance(schema, dict):
        out = {k: _closed(v) for k, v in schema.items()}
        if (
            "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_closed(v) for v in schema]
    return schema


def crd_schemas(directory: Path = CRDS) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> the closed openAPIV3Schema of every vendored CRD version."""
    out = {}
    for path in sorted(directory.glob("*.yaml")):
        for crd in yaml.safe_load_all(path.read_text()):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for v in crd["spec"]["versions"]:
                out[(f"{group}/{v['name']}", kind)] = _closed(copy.deepcopy(v["schema"]["openAPIV3Schema"]))
    return out


def _name(o: dict[str, Any]) -> str:
    m = o.get("metadata") or {}
    return f"{o.get('kind')}/{m.get('namespace', '-')}/{m.get('name')}"


def _core(o: dict[str, Any], report: Report) -> None:
    import kubernetes_validate
    from kubernetes_validate.utils import SchemaNotFoundError
    from kubernetes_validate.utils import ValidationError as KVError

    for version in K8S_VERSIONS:
        try:
            kubernetes_validate.validate(o, version, strict=True)
        except KVError as e:
            where = "/".join(str(p) for p in e.path)
            report.errors.append(f"{_name(o)}: Kubernetes {version}: {where}: {e.message}")
            return
        except SchemaNotFoundError:
            report.errors.append(f"{_name(o)}: Kubernetes {version} has no {o.get('apiVersion')} {o.get('kind')}")
            return
    report.checked.append(f"{_name(o)}: Kubernetes {' and '.join(K8S_VERSIONS)} schemas")


def _custom(o: dict[str, Any], schema: dict[str, Any], report: Report) -> None:
    import jsonschema

    errs = sorted(jsonschema.Draft7Validator(schema).iter_errors(o), key=lambda e: list(e.absolute_path))
    for e in errs[:5]:
        where = "/".join(str(p) for p in e.absolute_path)
        report.errors.append(f"{_name(o)}: CRD schema: {where}: {e.message[:300]}")
    if not errs:
        report.checked.append(f"{_name(o)}: vendored CRD schema")


def _shards(objs: list[dict[str, Any]], report: Report) -> None:
    for o in objs:
        if o.get("kind") != "StatefulSet":
            continue
        for c in o["spec"]["template"]["spec"]["containers"]:
            for e in c.get("env", []):
                if e.get("name") != "INFERCAST_PREDICTOR_SHARD":
                    continue
                count = str(e.get("value", "")).rpartition("/")[2]
                replicas = o["spec"].get("replicas", 1)
                if not count.isdigit() or int(count) != replicas:
                    report.errors.append(
                        f"{_name(o)}: {replicas} replicas but INFERCAST_PREDICTOR_SHARD={e.get('value')!r}: set both "
                        "(a shard nobody runs is a pool nobody forecasts)"
                    )


def _selectors(objs: list[dict[str, Any]], report: Report) -> None:
    pods = [
        (o["metadata"].get("namespace"), o["spec"]["template"]["metadata"].get("labels", {}))
        for o in objs
        if o.get("kind") in WORKLOADS
    ]
    for o in objs:
        if o.get("kind") != "Service":
            continue
        sel = o["spec"].get("selector") or {}
        ns = o["metadata"].get("namespace")
        if not any(n == ns and all(labels.get(k) == v for k, v in sel.items()) for n, labels in pods):
            report.errors.append(f"{_name(o)}: its selector {sel} matches no workload's pods")


def validate_objects(objs: list[dict[str, Any]], source: str, crds: dict | None = None) -> Report:
    crds = crd_schemas() if crds is None else crds
    report = Report(source)
    for o in objs:
        if not isinstance(o, dict) or "kind" not in o or "apiVersion" not in o:
            report.errors.append(f"{source}: not a Kubernetes object: {str(o)[:100]}")
            continue
        key = (o["apiVersion"], o["kind"])
        if key in crds:
            _custom(o, crds[key], report)
        elif "." in o["apiVersion"].split("/")[0] and not o["apiVersion"].startswith(_CORE_GROUPS):
            report.unchecked.append(f"{_name(o)}: no CRD for {o['apiVersion']} vendored in {CRDS.relative_to(REPO)}")
        else:
            _core(o, report)
    _shards(objs, report)
    _selectors(objs, report)
    return report


_CORE_GROUPS = ("apps/", "rbac.authorization.k8s.io/", "coordination.k8s.io/", "policy/", "networking.k8s.io/")


def overlays() -> list[Path]:
    return sorted(p for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").exists())
