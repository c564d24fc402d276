"""What `infercast k8s build` generates for the actuator's objects (issue 23 item 3): the KEDA Component whose
ScaledObjects scale each serving pool on infercast's KV forecast (validated against KEDA's published CRD schema, its
PromQL evaluated by promtool on recorded series: the forecast drives it, and a missing forecast holds the pool), and
the RBAC of the kubernetes and gateway backends (validated against Kubernetes' schemas).  No cluster runs here."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from infercast.catalog import FORECAST_KV_CACHE_USAGE_RATIO
from infercast.config import parse_config
from infercast.tools.k8s.build import BASE, base_files
from infercast.tools.k8s.fleet import cluster_fleet
from infercast.tools.k8s.keda import forecast_query, scaled_objects
from infercast.tools.k8s.manifests import actuator
from infercast.tools.k8s.settings import K8sSettings
from infercast.tools.k8s.validate import NO_KUBECTL, kubectl, render, validate_objects
from tests.conftest import REPO

FLASH_SALE = REPO / "examples" / "flash-sale.yaml"


def _cfg(backend: dict | None = None):
    doc = yaml.safe_load(FLASH_SALE.read_text())
    if backend is not None:
        doc["actuator"] = {"backend": backend}
    return parse_config(cluster_fleet(doc, K8sSettings()))


def test_scaled_objects_one_per_serving_pool_valid_against_the_keda_crd() -> None:
    cfg = _cfg()
    objs = scaled_objects(K8sSettings(), cfg)
    assert [o["metadata"]["name"] for o in objs] == ["vllm-v4-main", "vllm-v3-5-fallback"]  # the standby is pre-warmed
    main = objs[0]["spec"]
    assert (main["minReplicaCount"], main["maxReplicaCount"]) == (12, 24)
    assert main["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "vllm-v4-main"}
    (trigger,) = main["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "Value"
    assert trigger["metadata"]["threshold"] == "0.75" == f"{cfg.thresholds.kv_forecast_trigger:g}"
    assert trigger["metadata"]["serverAddress"] == K8sSettings().prometheus_url
    assert FORECAST_KV_CACHE_USAGE_RATIO in trigger["metadata"]["query"]
    report = validate_objects(objs, "keda", crds={})
    assert report.errors == [] and report.unchecked == []
    assert all("KEDA 2.10.1 CRD schemas" in c for c in report.checked) and len(report.checked) == 2
    # and the committed Component is that
    committed = [d for d in yaml.safe_load_all((BASE / "keda" / "scaledobjects.yaml").read_text()) if d]
    assert committed == objs


def test_the_keda_schema_catches_what_it_claims_to() -> None:
    (obj, _) = scaled_objects(K8sSettings(), _cfg())
    obj["spec"]["minReplicaCount"] = "12"
    del obj["spec"]["triggers"][0]["type"]  # (metricType has no enum in the CRD: KEDA's webhook checks it)
    obj["spec"]["triggers"][0]["metdata"] = {}
    errors = "\n".join(validate_objects([obj], "keda", crds={}).errors)
    assert "spec/minReplicaCount: must be integer" in errors
    assert "spec/triggers/0: must have required property type" in errors
    assert 'spec/triggers/0/metdata: unknown field "metdata"' in errors


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool evaluates the trigger's PromQL")
def test_the_trigger_follows_the_forecast_and_holds_without_one(tmp_path: Path) -> None:
    """promtool's rule unit test, the trigger's query as a recording rule: with a forecast its upper band (the
    fullest version's), with none the target itself (desired = current replicas: the pool holds its size)."""
    rules = {"groups": [{"name": "t", "rules": [{"record": "trigger", "expr": forecast_query("v4-main", 0.75)}]}]}
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rules))
    m = FORECAST_KV_CACHE_USAGE_RATIO
    series = [
        {"series": f'{m}{{pool="v4-main",version="v4",aggregate="mean",band="upper"}}', "values": "0.9x4"},
        {"series": f'{m}{{pool="v4-main",version="v4b",aggregate="mean",band="upper"}}', "values": "0.5x4"},
        {"series": f'{m}{{pool="v4-main",version="v4",aggregate="max",band="upper"}}', "values": "0.99x4"},
        {"series": f'{m}{{pool="v4-main",version="v4",aggregate="mean",band="point"}}', "values": "0.7x4"},
        {"series": f'{m}{{pool="v4-long",version="v4",aggregate="mean",band="upper"}}', "values": "0.2x4"},
    ]
    test = {
        "rule_files": ["rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "1m",
                "input_series": series,
                "promql_expr_test": [
                    {"expr": "trigger", "eval_time": "2m", "exp_samples": [{"labels": "trigger", "value": 0.9}]},
                    # past the last sample and the 5m staleness: no forecast, the target answers
                    {"expr": "trigger", "eval_time": "15m", "exp_samples": [{"labels": "trigger", "value": 0.75}]},
                ],
            }
        ],
    }
    (tmp_path / "test.yaml").write_text(yaml.safe_dump(test))
    p = subprocess.run(["promtool", "test", "rules", "test.yaml"], cwd=tmp_path, capture_output=True, text=True)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.skipif(kubectl() is None, reason=NO_KUBECTL)
def test_an_overlay_with_the_keda_component_renders_and_validates(tmp_path: Path) -> None:
    base = Path(shutil.copytree(BASE, tmp_path / "base"))
    (tmp_path / "overlay").mkdir()
    (tmp_path / "overlay" / "kustomization.yaml").write_text(
        yaml.safe_dump({"resources": ["../base"], "components": ["../base/keda"]})
    )
    objs = render(tmp_path / "overlay")
    assert sum(o["kind"] == "ScaledObject" for o in objs) == 2 and base.exists()
    report = validate_objects(objs, "overlay")
    assert report.errors == [] and report.unchecked == [] and len(report.checked) == len(objs)


def test_the_base_does_not_include_the_component() -> None:
    files = base_files()
    kust = yaml.safe_load(files["kustomization.yaml"])
    assert not any(r.startswith("keda") for r in kust["resources"])
    assert yaml.safe_load(files["keda/kustomization.yaml"])["kind"] == "Component"


def _roles(cfg) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in actuator(K8sSettings(), cfg) if o["kind"] == "Role"}


def test_the_gateway_backends_rbac_names_its_route_and_autoscalers() -> None:
    cfg = _cfg(
        {
            "kind": "gateway",
            "namespace": "inference",
            "httproute": {"name": "chat", "backends": {"v4-main": "vllm-v4-main"}},
            "autoscalers": {
                "v4-main": {"kind": "HorizontalPodAutoscaler", "name": "vllm-v4-main"},
                "v4-standby": {"kind": "ScaledObject", "name": "vllm-v4-standby"},
            },
        }
    )
    assert cfg.actuator.backend.in_cluster is True  # in the cluster, through the pod's service account
    roles = _roles(cfg)
    assert set(roles) == {"infercast-actuator-lease", "infercast-actuator-gateway"}
    role = roles["infercast-actuator-gateway"]
    assert role["metadata"]["namespace"] == "inference"
    assert [(r["resources"], r.get("resourceNames"), r["verbs"]) for r in role["rules"]] == [
        (["httproutes"], ["chat"], ["get", "patch"]),
        (["horizontalpodautoscalers"], ["vllm-v4-main"], ["get", "patch"]),
        (["scaledobjects"], ["vllm-v4-standby"], ["get", "patch"]),
        (["deployments", "statefulsets"], None, ["get"]),
    ]
    objs = [o for o in actuator(K8sSettings(), cfg) if o["kind"] in ("Role", "RoleBinding")]
    report = validate_objects(objs, "rbac", crds={})
    assert report.errors == [] and len(report.checked) == len(objs)
