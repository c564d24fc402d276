"""deploy/kubernetes/ (issue 14): the committed base equals a fresh `infercast k8s build`; every overlay renders with
the real `kubectl kustomize` and passes the Kubernetes schemas, the vendored operator CRD schemas and (ServiceMonitor,
AlertmanagerConfig) the operator's validators run by node; the checks catch what they claim to (an unknown field, a
bad `for:`, a wrong type, a shard count apart from the replica count) and say so when node or the validators are
missing, never passing what they did not check; the
PrometheusRule and AlertmanagerConfig carry alertrules' own rules and routes, and the actuator's RBAC only the
Lease and the scale of its mapped Deployments."""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
import sys

import pytest
import yaml

from infercast.alertrules.rules import rule_files
from infercast.alertrules.settings import AlertSettings
from infercast.tools.k8s.build import BASE, base_files, stale
from infercast.tools.k8s.manifests import matcher
from infercast.tools.k8s.settings import K8sSettings
from infercast.tools.k8s.validate import (
    NO_KUBECTL,
    OPERATOR_PACKAGE,
    VALIDATORS,
    crd_schemas,
    kubectl,
    overlays,
    render,
    validate_objects,
)
from tests.conftest import REPO

needs_kubectl = pytest.mark.skipif(kubectl() is None, reason=NO_KUBECTL)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "k8s", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )


def test_committed_tree_is_the_generated_one() -> None:
    assert stale(BASE, base_files()) == []
    r = _cli("build", "--check")
    assert r.returncode == 0, r.stderr


def test_check_names_a_stale_file(tmp_path) -> None:
    files = base_files()
    (tmp_path / "prometheusrule.yaml").write_text("hand edited\n")
    (tmp_path / "leftover.yaml").write_text("{}\n")
    bad = stale(tmp_path, files)
    assert "prometheusrule.yaml" in bad and "leftover.yaml" in bad and "actuator.yaml" in bad


def test_prometheus_rule_is_alertrules_with_the_namespace_label() -> None:
    docs = list(yaml.safe_load_all((BASE / "prometheusrule.yaml").read_text()))
    spec = docs[0]["spec"]
    want = [g for doc in rule_files(AlertSettings()).values() for g in doc["groups"]]
    assert [g["name"] for g in spec["groups"]] == [g["name"] for g in want]
    for got, exp in zip(spec["groups"], want, strict=True):
        for r, e in zip(got["rules"], exp["rules"], strict=True):
            assert r["expr"] == e["expr"]
            if "alert" in r:
                assert r["labels"] == {**e.get("labels", {}), "namespace": "infercast"}
    assert docs[0]["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_alertmanager_config_routes_alertrules_receivers() -> None:
    doc = yaml.safe_load((BASE / "alertmanagerconfig.yaml").read_text())
    route = doc["spec"]["route"]
    assert route["receiver"] == "chat-platform"  # the default route does not page (issue 43)
    act = next(r for r in route["routes"] if r.get("receiver") == "infercast-actuator")
    assert act["matchers"] == [{"name": "actuator", "matchType": "=", "value": "notify"}] and act["continue"] is True
    hook = next(r for r in doc["spec"]["receivers"] if r["name"] == "infercast-actuator")["webhookConfigs"][0]
    assert hook["url"] == "http://infercast-actuator.infercast.svc:9402/api/v1/alerts"
    assert hook["httpConfig"]["authorization"]["credentials"] == {"name": "infercast-actuator-token", "key": "token"}
    assert doc["spec"]["inhibitRules"][0]["sourceMatch"][1] == {"name": "pool", "matchType": "=~", "value": ".+"}


def test_matcher_refuses_what_it_cannot_parse() -> None:
    assert matcher('kind!="predictive"') == {"name": "kind", "matchType": "!=", "value": "predictive"}
    with pytest.raises(ValueError, match="not an Alertmanager matcher"):
        matcher("severity=critical")


def test_actuator_rbac_is_the_lease_and_the_mapped_scales_only() -> None:
    docs = list(yaml.safe_load_all((BASE / "actuator.yaml").read_text()))
    roles = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Role"}
    assert set(roles) == {"infercast-actuator-lease", "infercast-actuator-scale"}
    lease = roles["infercast-actuator-lease"]["rules"]
    assert lease[1] == {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "resourceNames": ["infercast-actuator"],
        "verbs": ["get", "update"],
    }
    scale = roles["infercast-actuator-scale"]
    assert scale["metadata"]["namespace"] == "inference"
    assert [r["resources"] for r in scale["rules"]] == [
        ["deployments"],
        ["deployments/scale"],
        ["horizontalpodautoscalers"],  # listed before each scale: a Deployment an autoscaler owns is refused
        ["scaledobjects"],
    ]
    assert [r["verbs"] for r in scale["rules"][2:]] == [["list"], ["list"]]
    assert scale["rules"][1]["verbs"] == ["get", "patch"]
    assert scale["rules"][1]["resourceNames"] == ["vllm-v3-5-fallback", "vllm-v4-main", "vllm-v4-standby"]
    assert not any(d["kind"] == "ClusterRole" for d in docs)
    sts = next(d for d in docs if d["kind"] == "StatefulSet")  # a StatefulSet: each replica's audit on its own claim
    assert sts["spec"]["replicas"] == 2


def test_dashboards_are_configmaps_for_grafanas_sidecar() -> None:
    from infercast.dashboards.build import DASHBOARDS
    from infercast.dashboards.build import render as render_dashboard

    docs = list(yaml.safe_load_all((BASE / "dashboards.yaml").read_text()))
    assert len(docs) == len(DASHBOARDS)
    for d, name in zip(docs, DASHBOARDS, strict=True):
        assert d["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert d["data"] == {f"{name}.json": render_dashboard(name)}


@needs_kubectl
@pytest.mark.parametrize("overlay", overlays(), ids=lambda p: p.name)
def test_overlay_renders_and_validates(overlay) -> None:
    objs = render(overlay)
    report = validate_objects(objs, overlay.name)
    assert report.errors == []
    kinds = {o["kind"] for o in objs}
    assert {"DaemonSet", "StatefulSet", "Deployment", "PrometheusRule", "ServiceMonitor", "AlertmanagerConfig"} <= kinds
    assert report.unchecked == []
    assert len(report.checked) == len(objs)
    # the two kinds without a vendored CRD went through the operator's validators (node), not around them
    by_node = sorted(c.split(":")[0] for c in report.checked if f"{OPERATOR_PACKAGE} {_pinned()} validators" in c)
    assert by_node == ["AlertmanagerConfig/infercast/infercast", "ServiceMonitor/infercast/infercast"]


@needs_kubectl
def test_validation_catches_bad_objects() -> None:
    objs = render(REPO / "deploy" / "kubernetes" / "overlays" / "demo")
    bad = copy.deepcopy(objs)
    dep = next(o for o in bad if o["kind"] == "Deployment")
    dep["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy2"] = "Always"
    rule = next(o for o in bad if o["kind"] == "PrometheusRule")
    rule["spec"]["groups"][0]["interval"] = "5 minutes"
    rule["spec"]["groups"][1]["rules"][0]["severity"] = "page"  # not a field: the API server would drop it
    sts = next(o for o in bad if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "infercast-predictor")
    sts["spec"]["replicas"] = 3
    errors = "\n".join(validate_objects(bad, "demo").errors)
    assert "imagePullPolicy2" in errors
    assert "groups/0/interval" in errors
    assert "'severity' was unexpected" in errors
    assert "3 replicas but INFERCAST_PREDICTOR_SHARD='ordinal/2'" in errors


def _pinned() -> str:
    return json.loads((VALIDATORS / "package.json").read_text())["dependencies"][OPERATOR_PACKAGE]


def _operator_objects() -> tuple[dict, dict]:
    """The committed base's ServiceMonitor and AlertmanagerConfig (no kubectl needed)."""
    sm = yaml.safe_load((BASE / "servicemonitor.yaml").read_text())
    amc = yaml.safe_load((BASE / "alertmanagerconfig.yaml").read_text())
    assert (sm["kind"], amc["kind"]) == ("ServiceMonitor", "AlertmanagerConfig")
    return sm, amc


def test_operator_validators_pass_the_base_and_name_what_is_wrong() -> None:
    sm, amc = _operator_objects()
    report = validate_objects([sm, amc], "base")
    assert report.errors == [] and report.unchecked == []
    assert report.checked == [
        f"ServiceMonitor/infercast/infercast: operator 0.90.1 CRD schemas ({OPERATOR_PACKAGE} {_pinned()} validators)",
        f"AlertmanagerConfig/infercast/infercast: operator 0.90.1 CRD schemas ({OPERATOR_PACKAGE} {_pinned()} "
        "validators)",
    ]

    bad_sm, bad_amc = copy.deepcopy(sm), copy.deepcopy(amc)
    bad_sm["spec"]["endpoints"][0]["interval"] = 5  # a number where the CRD wants a duration string
    bad_sm["spec"]["endpoints"][0]["scrapeTimout"] = "10s"  # a typo: the API server would drop it silently
    bad_sm["spec"]["endpoints"][0]["scheme"] = "gopher"
    del bad_sm["spec"]["selector"]
    bad_amc["spec"]["route"]["groupWait"] = 30
    bad_amc["spec"]["route"]["routes"] = {"receiver": "pager-serving"}  # an object where a list belongs
    bad_amc["spec"]["receivers"][0]["webhookConfig"] = []
    report = validate_objects([bad_sm, bad_amc], "base")
    assert report.checked == [] and report.unchecked == []
    # what `infercast k8s validate` prints (after "OVERLAY: "), one line per finding
    assert sorted(report.errors) == [
        "AlertmanagerConfig/infercast/infercast: CRD schema: spec/receivers/0/webhookConfig: unknown field "
        '"webhookConfig" (not in the CRD schema)',
        "AlertmanagerConfig/infercast/infercast: CRD schema: spec/route/groupWait: must be string",
        "AlertmanagerConfig/infercast/infercast: CRD schema: spec/route/routes: must be array",
        "ServiceMonitor/infercast/infercast: CRD schema: spec/endpoints/0/interval: must be string",
        "ServiceMonitor/infercast/infercast: CRD schema: spec/endpoints/0/scheme: must be equal to one of the allowed "
        'values: ["http","https","HTTP","HTTPS"]',
        'ServiceMonitor/infercast/infercast: CRD schema: spec/endpoints/0/scrapeTimout: unknown field "scrapeTimout" '
        "(not in the CRD schema)",
        "ServiceMonitor/infercast/infercast: CRD schema: spec: must have required property selector",
    ]
    bad_sm = copy.deepcopy(sm)
    bad_sm["spec"]["endpoints"][0]["interval"] = "15 seconds"
    (error,) = validate_objects([bad_sm], "base").errors
    assert error.startswith("ServiceMonitor/infercast/infercast: CRD schema: spec/endpoints/0/interval: must match")


def test_operator_objects_fail_when_the_validators_cannot_run(tmp_path, monkeypatch) -> None:
    sm, amc = _operator_objects()
    # the package not installed (a checkout where scripts/install.sh has not run): errors, not passes
    for name in ("package.json", "validate.mjs"):
        shutil.copy(VALIDATORS / name, tmp_path / name)
    report = validate_objects([sm, amc], "base", validators=tmp_path)
    assert report.checked == [] and report.unchecked == []
    assert report.errors == [
        f"{kind}/infercast/infercast: cannot be checked: {OPERATOR_PACKAGE} {_pinned()} is not installed in "
        f"{tmp_path}/node_modules: run scripts/install.sh (npm ci --prefix {tmp_path})"
        for kind in ("ServiceMonitor", "AlertmanagerConfig")
    ]
    # no node at all
    monkeypatch.setenv("PATH", str(tmp_path))
    report = validate_objects([sm, amc], "base")
    assert report.checked == [] and len(report.errors) == 2
    assert all(": cannot be checked: node is not installed" in e for e in report.errors)


@needs_kubectl
def test_validate_cli_exits_non_zero_without_node(tmp_path) -> None:
    (tmp_path / "kubectl").symlink_to(kubectl())
    r = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "k8s", "validate", "deploy/kubernetes/overlays/demo"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
        env={**os.environ, "PATH": str(tmp_path)},
    )
    assert r.returncode == 1
    assert "demo: ServiceMonitor/infercast/infercast: cannot be checked: node is not installed" in r.stderr
    assert "demo: AlertmanagerConfig/infercast/infercast: cannot be checked: node is not installed" in r.stderr
    assert "2 errors" in r.stdout


def test_vendored_crd_has_its_source_and_licence() -> None:
    crds = REPO / "deploy" / "kubernetes" / "crds"
    assert ("monitoring.coreos.com/v1", "PrometheusRule") in crd_schemas(crds)
    assert "Apache License" in (crds / "LICENSE").read_text()
    source = (crds / "SOURCE.md").read_text()
    assert "prometheus-operator/prometheus-operator" in source
    assert f"`{OPERATOR_PACKAGE}` {_pinned()}" in source
    assert "MIT License" in (VALIDATORS / "LICENSE.kubernetes-models").read_text()
    lock = json.loads((VALIDATORS / "package-lock.json").read_text())
    assert lock["packages"][f"node_modules/{OPERATOR_PACKAGE}"]["version"] == _pinned()


def test_cli_errors_are_clear(tmp_path) -> None:
    r = _cli("fleet", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "no such fleet file" in r.stderr
    r = _cli("build", "--namespace", "other")
    assert r.returncode == 2 and "custom settings need --out DIR" in r.stderr
    r = _cli("build", "--out", str(tmp_path / "x"), "--predictor-shards", "0")
    assert r.returncode == 2 and "predictor_shards" in r.stderr


def test_custom_build_changes_names_and_shards(tmp_path) -> None:
    r = _cli("build", "--out", str(tmp_path), "--namespace", "obs", "--predictor-shards", "3", "--release", "kps")
    assert r.returncode == 0, r.stderr
    sts = next(d for d in yaml.safe_load_all((tmp_path / "predictor.yaml").read_text()) if d["kind"] == "StatefulSet")
    assert sts["metadata"]["namespace"] == "obs" and sts["spec"]["replicas"] == 3
    env = {e["name"]: e.get("value") for e in sts["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["INFERCAST_PREDICTOR_SHARD"] == "ordinal/3"
    fleet = yaml.safe_load((tmp_path / "fleet.yaml").read_text())
    assert fleet["actuator"]["leader"] == {"kind": "kubernetes", "in_cluster": True, "namespace": "obs",
                                           "name": "infercast-actuator"}  # fmt: skip
    assert K8sSettings().namespace == "infercast"
