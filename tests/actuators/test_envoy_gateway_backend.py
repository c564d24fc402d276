"""Breaker thresholds as Envoy Gateway BackendTrafficPolicies (issue 23 item 3), through the official `kubernetes`
client against recorded API answers replayed on loopback (tests/data/k8s/, tests/actuators/kube_replay.py): no API
server and no Envoy run here.  What the client sends is checked request by request, and every policy the actuator
would leave behind (what it creates, or the recorded policy with its merge patch applied) is validated against the
published CRD's schema (an excerpt vendored in tests/data/crds/, every object closed) and the CRD's CEL rules on
`targetRefs`, checked here by hand."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
import yaml

from infercast.actuators.actions import SetBreakerThreshold, SetPoolWeight
from infercast.actuators.admin import ActionRefused, Result, apply_with_retries
from infercast.actuators.backends import build_backend
from infercast.actuators.backends.envoy_gateway import EnvoyGatewayAdmin, duration, policy_name, seconds_of
from infercast.config import ConfigError, EnvoyGatewayBackend, parse_config
from infercast.tools.k8s.validate import crd_schemas
from tests.actuators.conftest import FLASH_SALE
from tests.actuators.kube_replay import HTTPROUTES, Exchange, KubeReplay, merged, recorded
from tests.conftest import REPO

POLICIES = "/apis/gateway.envoyproxy.io/v1alpha1/namespaces/infer/backendtrafficpolicies"
MAIN = f"{POLICIES}/infercast-breaker-v4-main"
BREAKERS = {"pools": {"v4-main": {"route": "chat", "rule": "main"}}}
SCHEMA = crd_schemas(REPO / "tests" / "data" / "crds")[("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy")]
ROUTE_KINDS = ("Gateway", "HTTPRoute", "GRPCRoute", "UDPRoute", "TCPRoute", "TLSRoute")


@pytest.fixture
def kube():
    replay = KubeReplay([])
    yield replay
    replay.close()


def envoy(kube, fleet_cfg, monkeypatch, **over: Any) -> EnvoyGatewayAdmin:
    monkeypatch.setenv("K8S_TOKEN", "sa-token-123")
    cfg = {
        "kind": "envoy-gateway",
        "namespace": "infer",
        "api_url": kube.url,
        "token_env": "K8S_TOKEN",
        "timeout_seconds": 2.0,
        "breakers": BREAKERS,
        **over,
    }
    return EnvoyGatewayAdmin.from_config(EnvoyGatewayBackend.model_validate(cfg), fleet_cfg)


def schema_errors(obj: dict[str, Any]) -> list[str]:
    """The CRD schema's errors for `obj` (status, which the API server keeps apart, left out) and its CEL rules'."""
    obj = {k: v for k, v in obj.items() if k != "status"}
    errors = [
        f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in jsonschema.Draft7Validator(SCHEMA).iter_errors(obj)
    ]
    spec = obj.get("spec") or {}
    refs = spec.get("targetRefs")
    if ("targetRef" in spec) == (refs is not None) and not spec.get("targetSelectors"):
        errors.append("spec: either targetRef or targetRefs must be used")
    for ref in refs or []:
        if ref.get("group") != "gateway.networking.k8s.io":
            errors.append("spec: this policy can only have a targetRefs[*].group of gateway.networking.k8s.io")
        if ref.get("kind") not in ROUTE_KINDS:
            errors.append("spec: this policy can only have a targetRefs[*].kind of Gateway/HTTPRoute/...")
    return errors


# --- the mapping -----------------------------------------------------------------------------------------------
def test_a_threshold_on_a_pool_with_no_policy_creates_one_attached_to_its_route_rule(kube, fleet_cfg, monkeypatch):
    kube.then(
        Exchange("GET", MAIN, 404, "status-404-btp.json"), Exchange("POST", POLICIES, 201, "btp-v4-main-created.json")
    )
    res = envoy(kube, fleet_cfg, monkeypatch).apply(SetBreakerThreshold("v4-main", 0.25))
    assert res == Result(
        "applied", "BackendTrafficPolicy infer/infercast-breaker-v4-main: created, per-try timeout 250ms"
    )
    get, post = kube.requests
    assert get.headers["authorization"] == "Bearer sa-token-123" and post.query == ""
    assert post.body == {
        "apiVersion": "gateway.envoyproxy.io/v1alpha1",
        "kind": "BackendTrafficPolicy",
        "metadata": {
            "name": "infercast-breaker-v4-main",
            "namespace": "infer",
            "labels": {"app.kubernetes.io/managed-by": "infercast"},
        },
        "spec": {
            "targetRefs": [
                {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "chat", "sectionName": "main"}
            ],
            "retry": {"numRetries": 0, "perRetry": {"timeout": "250ms"}},
            "healthCheck": {
                "passive": {
                    "consecutiveGatewayErrors": 5,
                    "interval": "10s",
                    "baseEjectionTime": "30s",
                    "maxEjectionPercent": 10,
                    "splitExternalLocalOriginErrors": False,
                }
            },
        },
    }
    assert schema_errors(post.body) == []
    assert schema_errors(recorded("btp-v4-main-created.json")) == []


def test_a_threshold_change_patches_only_infercasts_fields_with_the_resource_version_read(kube, fleet_cfg, monkeypatch):
    kube.then(Exchange("GET", MAIN, 200, "btp-v4-main.json"), Exchange("PATCH", MAIN, 200, "btp-v4-main-patched.json"))
    res = envoy(kube, fleet_cfg, monkeypatch).apply(SetBreakerThreshold("v4-main", 1.2))
    assert res == Result(
        "applied",
        "BackendTrafficPolicy infer/infercast-breaker-v4-main: per-try timeout 500ms -> 1s200ms",
        SetBreakerThreshold("v4-main", 0.5),  # the rollback puts the threshold read back
    )
    patch = kube.requests[1]
    assert patch.headers["content-type"] == "application/merge-patch+json"
    assert patch.body["metadata"] == {"resourceVersion": "77001"}
    assert patch.body["spec"]["retry"] == {"numRetries": 0, "perRetry": {"timeout": "1s200ms"}}
    after = merged(recorded("btp-v4-main.json"), patch.body)
    assert after["spec"]["healthCheck"]["panicThreshold"] == 30, "the owner's other fields are left as they were"
    assert after["spec"] == recorded("btp-v4-main-patched.json")["spec"]
    assert schema_errors(after) == []


def test_the_threshold_already_in_place_is_not_written_again(kube, fleet_cfg, monkeypatch):
    kube.then(Exchange("GET", MAIN, 200, "btp-v4-main.json"))
    res = envoy(kube, fleet_cfg, monkeypatch).apply(SetBreakerThreshold("v4-main", 0.5))
    assert res.status == "applied" and "already has per-try timeout 500ms" in res.detail
    assert [r.method for r in kube.requests] == ["GET"]


def test_a_policy_of_that_name_that_is_not_infercasts_is_refused_untouched(kube, fleet_cfg, monkeypatch):
    kube.then(Exchange("GET", MAIN, 200, "btp-foreign.json"))
    with pytest.raises(ActionRefused, match=r"exists and is not infercast's \(no label app.kubernetes.io/managed-by"):
        envoy(kube, fleet_cfg, monkeypatch).apply(SetBreakerThreshold("v4-main", 0.5))
    assert [r.method for r in kube.requests] == ["GET"]


def test_server_dry_run_sends_the_write_with_dryrun_all(kube, fleet_cfg, monkeypatch):
    kube.then(Exchange("GET", MAIN, 200, "btp-v4-main.json"), Exchange("PATCH", MAIN, 200, "btp-v4-main-patched.json"))
    res = envoy(kube, fleet_cfg, monkeypatch, server_dry_run=True).apply(SetBreakerThreshold("v4-main", 1.2))
    assert kube.requests[1].query == "dryRun=All"
    assert res.detail.endswith("(server dry run: admitted, not persisted)")


def test_a_conflict_is_retried_from_a_fresh_read(kube, fleet_cfg, monkeypatch):
    """Someone changed the policy between the read and the patch: 409, then read again and patch that version."""
    kube.then(
        Exchange("GET", MAIN, 200, "btp-v4-main.json"),
        Exchange("PATCH", MAIN, 409, "status-409-deployment.json"),
        Exchange("GET", MAIN, 200, "btp-v4-main.json"),
        Exchange("PATCH", MAIN, 200, "btp-v4-main-patched.json"),
    )
    admin = envoy(kube, fleet_cfg, monkeypatch)
    res = apply_with_retries(admin, SetBreakerThreshold("v4-main", 1.2), sleep=lambda s: None)
    assert (res.status, res.attempts) == ("applied", 2)
    assert [r.method for r in kube.requests] == ["GET", "PATCH", "GET", "PATCH"]


def test_observe_reads_the_thresholds_back_beside_the_routes_weights(kube, fleet_cfg, monkeypatch):
    kube.then(
        Exchange("GET", f"{HTTPROUTES}/chat", 200, "httproute-chat.json"),
        Exchange("GET", MAIN, 200, "btp-v4-main.json"),
    )
    route = {"name": "chat", "backends": {"v4-main": "vllm-v4-main", "v4-standby": "vllm-v4-standby"}}
    obs = envoy(kube, fleet_cfg, monkeypatch, httproute=route).observe()
    main = obs.pool("v4-main")
    assert (main.weight, main.breaker_threshold_seconds) == (1.0, 0.5)
    assert obs.pool("v4-standby").breaker_threshold_seconds is None  # no policy mapped: not reported as one


def test_a_pool_with_no_policy_yet_reports_no_threshold(kube, fleet_cfg, monkeypatch):
    kube.then(Exchange("GET", MAIN, 404, "status-404-btp.json"))
    assert envoy(kube, fleet_cfg, monkeypatch).observe().pool("v4-main").breaker_threshold_seconds is None


def test_unmapped_pools_and_unconfigured_parts_are_refused_before_any_request(kube, fleet_cfg, monkeypatch):
    admin = envoy(kube, fleet_cfg, monkeypatch)
    with pytest.raises(ActionRefused, match=r"no BackendTrafficPolicy is mapped to pool 'v4-standby'"):
        admin.apply(SetBreakerThreshold("v4-standby", 0.5))
    with pytest.raises(ActionRefused, match=r"set_pool_weight needs actuator.backend.httproute or autoscalers"):
        admin.apply(SetPoolWeight("v4-main", 0.5))
    assert kube.requests == []


# --- the fleet file ---------------------------------------------------------------------------------------------
def _fleet(backend: dict[str, Any]):
    doc = yaml.safe_load(FLASH_SALE.read_text())
    doc["actuator"] = {"backend": backend}
    return parse_config(doc)


def test_the_fleet_file_chooses_the_envoy_gateway_backend():
    cfg = _fleet({"kind": "envoy-gateway", "api_url": "http://127.0.0.1:1", "breakers": BREAKERS})
    admin = build_backend(cfg)
    assert isinstance(admin, EnvoyGatewayAdmin) and admin.name == "envoy-gateway" and admin.gateway is None


def test_the_fleet_file_names_a_breaker_pool_it_does_not_have():
    with pytest.raises(ConfigError, match=r"actuator.backend.breakers.pools: unknown pool 'v9'"):
        _fleet({"kind": "envoy-gateway", "breakers": {"pools": {"v9": {"route": "chat"}}}})


# --- the schema and the durations ---------------------------------------------------------------------------------
def test_the_vendored_schema_catches_what_it_claims_to():
    bad = recorded("btp-v4-main.json")
    bad["spec"]["retry"]["perRetry"]["timeout"] = "1.5s"
    bad["spec"]["healthCheck"]["passive"]["consecutiveGatewayErrorz"] = 5
    bad["spec"]["targetRefs"][0]["group"] = "networking.istio.io"
    errors = "\n".join(schema_errors(bad))
    assert "spec/retry/perRetry/timeout: '1.5s' does not match" in errors
    assert "'consecutiveGatewayErrorz' was unexpected" in errors
    assert "targetRefs[*].group of gateway.networking.k8s.io" in errors


@pytest.mark.parametrize(
    ("seconds", "text"), [(0.25, "250ms"), (1.0, "1s"), (1.2, "1s200ms"), (600.0, "600s"), (0.0001, "1ms")]
)
def test_thresholds_become_gateway_api_durations_and_read_back(seconds, text):
    assert duration(seconds) == text
    assert seconds_of(text) == pytest.approx(max(seconds, 0.001))


def test_durations_in_units_infercast_does_not_write_read_back_too():
    assert seconds_of("1m30s") == 90.0 and seconds_of("1h") == 3600.0
    with pytest.raises(ValueError, match="not a Gateway API duration"):
        seconds_of("1.5s")


def test_default_policy_names_are_kubernetes_names():
    assert policy_name("v3.5-fallback") == "infercast-breaker-v3.5-fallback"
    assert policy_name("Long_Context") == "infercast-breaker-long-context"


def test_the_actuators_role_may_read_patch_and_create_its_policies_and_nothing_else_of_them():
    from infercast.tools.k8s.fleet import cluster_fleet
    from infercast.tools.k8s.manifests import actuator
    from infercast.tools.k8s.settings import K8sSettings
    from infercast.tools.k8s.validate import validate_objects

    doc = yaml.safe_load(FLASH_SALE.read_text())
    doc["actuator"] = {"backend": {"kind": "envoy-gateway", "namespace": "inference", "breakers": BREAKERS}}
    cfg = parse_config(cluster_fleet(doc, K8sSettings()))
    assert cfg.actuator.backend.in_cluster is True  # in the cluster, through the pod's service account
    objs = [o for o in actuator(K8sSettings(), cfg) if o["kind"] in ("Role", "RoleBinding")]
    (role,) = [o for o in objs if o["kind"] == "Role" and o["metadata"]["name"] == "infercast-actuator-gateway"]
    assert role["metadata"]["namespace"] == "inference"
    assert role["rules"] == [
        {
            "apiGroups": ["gateway.envoyproxy.io"],
            "resources": ["backendtrafficpolicies"],
            "resourceNames": ["infercast-breaker-v4-main"],
            "verbs": ["get", "patch"],
        },
        {"apiGroups": ["gateway.envoyproxy.io"], "resources": ["backendtrafficpolicies"], "verbs": ["create"]},
    ]
    report = validate_objects(objs, "rbac", crds={})
    assert report.errors == [] and len(report.checked) == len(objs)
