"""The backends for the objects real clusters use (issue 23 item 3), through the official `kubernetes` client against
recorded API answers replayed on loopback (tests/data/k8s/, tests/actuators/kube_replay.py): no API server runs
here.  What the client sends is checked request by request, and every object the actuator would leave behind --
the recorded object with the client's merge patch applied -- is validated against its published schema
(`infercast.tools.k8s.validate`): HTTPRoute against the Gateway API's CRD (v1.0.0), ScaledObject against KEDA's
(2.10.1), HorizontalPodAutoscaler against Kubernetes' own (1.31 and 1.37)."""

from __future__ import annotations

from typing import Any

import pytest

from infercast.actuators.actions import PrewarmPool, ScalePool, SetBreakerThreshold, SetPoolBounds, SetPoolWeight
from infercast.actuators.admin import ActionRefused, Result, apply_with_retries
from infercast.actuators.backends import build_backend
from infercast.actuators.backends.gateway import GatewayAdmin
from infercast.actuators.backends.k8s import KubernetesAdmin
from infercast.config import ConfigError, GatewayBackend, KubernetesBackend, parse_config
from infercast.tools.k8s.validate import validate_objects
from tests.actuators.conftest import FLASH_SALE
from tests.actuators.kube_replay import (
    DEPLOYMENTS,
    HPAS,
    HTTPROUTES,
    SCALEDOBJECTS,
    Exchange,
    KubeReplay,
    merged,
    recorded,
)

BACKENDS = {"v4-main": "vllm-v4-main", "v4-standby": "vllm-v4-standby", "v3.5-fallback": "vllm-v3-5-fallback"}
AUTOSCALERS = {
    "v4-main": {"kind": "HorizontalPodAutoscaler", "name": "chat-v4"},
    "v4-standby": {"kind": "ScaledObject", "name": "chat-v4-standby"},
}


@pytest.fixture
def kube():
    replay = KubeReplay([])
    yield replay
    replay.close()


def gateway(kube, fleet_cfg, monkeypatch, **over: Any) -> GatewayAdmin:
    monkeypatch.setenv("K8S_TOKEN", "sa-token-123")
    cfg = {
        "kind": "gateway",
        "namespace": "infer",
        "api_url": kube.url,
        "token_env": "K8S_TOKEN",
        "timeout_seconds": 2.0,
        "httproute": {"name": "chat", "backends": BACKENDS},
        "autoscalers": AUTOSCALERS,
        **over,
    }
    return GatewayAdmin.from_config(GatewayBackend.model_validate(cfg), fleet_cfg)


def valid(obj: dict[str, Any]) -> str:
    """What checked `obj` against its schema; fails the test on any error or when nothing could check it."""
    report = validate_objects([obj], "test", crds={})
    assert report.errors == [] and report.unchecked == [], report.errors + report.unchecked
    (checked,) = report.checked
    return checked.split(": ", 1)[1]


# --- HTTPRoute weights ------------------------------------------------------------------------------------------
def test_a_weight_shift_patches_the_httproute_backendrefs_carrying_its_resource_version(kube, fleet_cfg, monkeypatch):
    kube.then(
        Exchange("GET", f"{HTTPROUTES}/chat", 200, "httproute-chat.json"),
        Exchange("PATCH", f"{HTTPROUTES}/chat", 200, "httproute-chat-patched.json"),
    )
    res = gateway(kube, fleet_cfg, monkeypatch).apply(SetPoolWeight("v4-main", 0.5))
    assert res == Result(
        "applied",
        "HTTPRoute infer/chat: Service/vllm-v4-main weight 1000 -> 500 (rules 0, 1)",
        SetPoolWeight("v4-main", 1.0),
    )
    get, patch = kube.requests
    assert get.headers["authorization"] == "Bearer sa-token-123"
    assert patch.headers["content-type"] == "application/merge-patch+json" and patch.query == ""
    assert patch.body["metadata"] == {"resourceVersion": "8201"}
    assert [[r["weight"] for r in rule["backendRefs"]] for rule in patch.body["spec"]["rules"]] == [
        [500, 0, 0],
        [500, 0],
    ]
    # everything else of the rules is sent back as it was read (the patch replaces the list)
    route = recorded("httproute-chat.json")
    assert patch.body["spec"]["rules"][0]["matches"] == route["spec"]["rules"][0]["matches"]
    after = merged(route, patch.body)
    assert after == recorded("httproute-chat-patched.json") | {"metadata": after["metadata"]}
    assert valid(after) == "Gateway API 1.0.0 CRD schemas (@kubernetes-models/gateway-api 0.5.1 validators)"


def test_inferencepool_backendrefs_where_the_inference_extension_is_installed(kube, fleet_cfg, monkeypatch):
    kube.then(
        Exchange("GET", f"{HTTPROUTES}/chat", 200, "httproute-chat-inferencepool.json"),
        Exchange("PATCH", f"{HTTPROUTES}/chat", 200, "httproute-chat-inferencepool-patched.json"),
    )
    route = {"name": "chat", "backends": BACKENDS, "backend_kind": "InferencePool"}
    res = gateway(kube, fleet_cfg, monkeypatch, httproute=route).apply(SetPoolWeight("v4-standby", 0.25))
    assert res.detail == "HTTPRoute infer/chat: InferencePool/vllm-v4-standby weight 0 -> 250 (rules 0)"
    assert res.previous == SetPoolWeight("v4-standby", 0.0)
    (ref,) = [r for r in kube.requests[1].body["spec"]["rules"][0]["backendRefs"] if r["name"] == "vllm-v4-standby"]
    assert ref == {
        "group": "inference.networking.k8s.io",
        "kind": "InferencePool",
        "name": "vllm-v4-standby",
        "weight": 250,
    }
    valid(merged(recorded("httproute-chat-inferencepool.json"), kube.requests[1].body))


def test_a_route_whose_backendrefs_are_another_kind_is_refused_naming_what_is_missing(kube, fleet_cfg, monkeypatch):
    """The route names InferencePools; the fleet file says Services: no backendRef matches, nothing is written."""
    kube.then(Exchange("GET", f"{HTTPROUTES}/chat", 200, "httproute-chat-inferencepool.json"))
    with pytest.raises(ActionRefused, match=r"has no backendRef Service/vllm-v4-main for pool 'v4-main'; .*never a"):
        gateway(kube, fleet_cfg, monkeypatch).apply(SetPoolWeight("v4-main", 0.5))
    assert [r.method for r in kube.requests] == ["GET"]


def test_a_weight_that_would_leave_a_rule_with_no_backend_is_refused(kube, fleet_cfg, monkeypatch):
    kube.then(Exchange("GET", f"{HTTPROUTES}/chat", 200, "httproute-chat.json"))
    with pytest.raises(ActionRefused, match=r"leaves rule 0 with every backend at weight 0 .*500"):
        gateway(kube, fleet_cfg, monkeypatch).apply(SetPoolWeight("v4-main", 0.0))
    assert [r.method for r in kube.requests] == ["GET"]


def test_a_weight_above_the_httproute_maximum_is_refused_before_any_request(kube, fleet_cfg, monkeypatch):
    route = {"name": "chat", "backends": BACKENDS, "weight_scale": 1_000_000}
    with pytest.raises(ActionRefused, match=r"= 2000000 is above an HTTPRoute backendRef's 1,000,000"):
        gateway(kube, fleet_cfg, monkeypatch, httproute=route).apply(SetPoolWeight("v4-main", 2.0))
    assert kube.requests == []


def test_server_dry_run_sends_dryrun_all_and_says_nothing_was_persisted(kube, fleet_cfg, monkeypatch):
    kube.then(
        Exchange("GET", f"{HTTPROUTES}/chat", 200, "httproute-chat.json"),
        Exchange("PATCH", f"{HTTPROUTES}/chat", 200, "httproute-chat-patched.json"),
        Exchange("GET", f"{HPAS}/chat-v4", 200, "hpa-chat-v4.json"),
        Exchange("PATCH", f"{HPAS}/chat-v4", 200, "hpa-chat-v4-patched.json"),
    )
    admin = gateway(kube, fleet_cfg, monkeypatch, server_dry_run=True)
    assert admin.apply(SetPoolWeight("v4-main", 0.5)).detail.endswith("(server dry run: admitted, not persisted)")
    assert admin.apply(ScalePool("v4-main", 12)).detail.endswith("(server dry run: admitted, not persisted)")
    assert [r.query for r in kube.requests if r.method == "PATCH"] == ["dryRun=All", "dryRun=All"]


# --- autoscaler floors ------------------------------------------------------------------------------------------
def test_scale_raises_the_hpa_floor_and_the_undo_releases_it(kube, fleet_cfg, monkeypatch):
    kube.then(
        Exchange("GET", f"{HPAS}/chat-v4", 200, "hpa-chat-v4.json"),
        Exchange("PATCH", f"{HPAS}/chat-v4", 200, "hpa-chat-v4-patched.json"),
        Exchange("GET", f"{HPAS}/chat-v4", 200, "hpa-chat-v4-patched.json"),
        Exchange("PATCH", f"{HPAS}/chat-v4", 200, "hpa-chat-v4.json"),
    )
    admin = gateway(kube, fleet_cfg, monkeypatch)
    res = admin.apply(ScalePool("v4-main", 12))
    assert res == Result(
        "applied", "HorizontalPodAutoscaler infer/chat-v4 minReplicas 4 -> 12", ScalePool("v4-main", 4)
    )
    patch = kube.requests[1]
    assert patch.body == {"metadata": {"resourceVersion": "7001"}, "spec": {"minReplicas": 12}}
    assert patch.headers["content-type"] == "application/strategic-merge-patch+json"
    assert "replicas" not in str(patch.body).replace("minReplicas", "")  # never the count the HPA owns
    after = merged(recorded("hpa-chat-v4.json"), patch.body)
    assert valid(after) == "Kubernetes 1.31.0 and 1.37.0 schemas"
    # release: the undo puts the floor back; the HPA scales down as its own metrics allow
    assert admin.apply(res.previous).detail == "HorizontalPodAutoscaler infer/chat-v4 minReplicas 12 -> 4"
    assert kube.requests[3].body == {"metadata": {"resourceVersion": "7002"}, "spec": {"minReplicas": 4}}


def test_a_floor_above_the_ceiling_or_below_one_is_refused(kube, fleet_cfg, monkeypatch):
    kube.then(*[Exchange("GET", f"{HPAS}/chat-v4", 200, "hpa-chat-v4.json")] * 2)
    admin = gateway(kube, fleet_cfg, monkeypatch)
    with pytest.raises(
        ActionRefused, match=r"floor of 20 is above its ceiling \(16, spec.maxReplicas\); .*never raises"
    ):
        admin.apply(ScalePool("v4-main", 20))
    with pytest.raises(ActionRefused, match=r"minReplicas is at least 1 \(scale to zero needs a ScaledObject\)"):
        admin.apply(ScalePool("v4-main", 0))
    assert [r.method for r in kube.requests] == ["GET", "GET"]


def test_the_reserve_plan_sets_floor_and_ceiling_in_one_patch_keeping_the_owners_ceiling(kube, fleet_cfg, monkeypatch):
    """`set_pool_bounds` (the controller's reserve plan, actuators/reserve.py): the HPA's minReplicas and maxReplicas
    in one patch, the owner's ceiling kept in an annotation; no ceiling above the owner's is ever written."""
    kube.then(
        Exchange("GET", f"{HPAS}/chat-v4", 200, "hpa-chat-v4.json"),
        Exchange("PATCH", f"{HPAS}/chat-v4", 200, "hpa-chat-v4-patched.json"),
        Exchange("GET", f"{HPAS}/chat-v4", 200, "hpa-chat-v4.json"),
    )
    admin = gateway(kube, fleet_cfg, monkeypatch)
    res = admin.apply(SetPoolBounds("v4-main", 8, 8))
    assert res.detail == "HorizontalPodAutoscaler infer/chat-v4 minReplicas 4 -> 8, maxReplicas 16 -> 8"
    assert res.previous == SetPoolBounds("v4-main", 4, 16)
    patch = kube.requests[1]
    assert patch.body == {
        "metadata": {"resourceVersion": "7001", "annotations": {"infercast.io/owner-max-replicas": "16"}},
        "spec": {"minReplicas": 8, "maxReplicas": 8},
    }
    assert valid(merged(recorded("hpa-chat-v4.json"), patch.body)) == "Kubernetes 1.31.0 and 1.37.0 schemas"
    with pytest.raises(ActionRefused, match=r"ceiling of 17 is above the one its owner set \(16\)"):
        admin.apply(SetPoolBounds("v4-main", 4, 17))
    assert [r.method for r in kube.requests] == ["GET", "PATCH", "GET"]


def test_prewarm_raises_a_scaledobject_floor_to_the_pools_nodes(kube, fleet_cfg, monkeypatch):
    kube.then(
        Exchange("GET", f"{SCALEDOBJECTS}/chat-v4-standby", 200, "scaledobject-chat-v4-standby.json"),
        Exchange("PATCH", f"{SCALEDOBJECTS}/chat-v4-standby", 200, "scaledobject-chat-v4-standby-patched.json"),
    )
    res = gateway(kube, fleet_cfg, monkeypatch).apply(PrewarmPool("v4-standby"))
    assert res.detail == "ScaledObject infer/chat-v4-standby minReplicaCount 0 -> 4"
    assert res.previous == ScalePool("v4-standby", 0)
    patch = kube.requests[1]
    assert patch.body == {"metadata": {"resourceVersion": "7101"}, "spec": {"minReplicaCount": 4}}
    assert patch.headers["content-type"] == "application/merge-patch+json"
    after = merged(recorded("scaledobject-chat-v4-standby.json"), patch.body)
    assert valid(after) == "KEDA 2.10.1 CRD schemas (@kubernetes-models/keda 0.4.2 validators)"


def test_a_conflict_is_retried_from_a_fresh_read(kube, fleet_cfg, monkeypatch):
    """The KEDA operator (or a person) changed the ScaledObject between our read and our patch: 409, read again."""
    kube.then(
        Exchange("GET", f"{SCALEDOBJECTS}/chat-v4-standby", 200, "scaledobject-chat-v4-standby.json"),
        Exchange("PATCH", f"{SCALEDOBJECTS}/chat-v4-standby", 409, "status-409-deployment.json"),
        Exchange("GET", f"{SCALEDOBJECTS}/chat-v4-standby", 200, "scaledobject-chat-v4-standby.json"),
        Exchange("PATCH", f"{SCALEDOBJECTS}/chat-v4-standby", 200, "scaledobject-chat-v4-standby-patched.json"),
    )
    res = apply_with_retries(gateway(kube, fleet_cfg, monkeypatch), ScalePool("v4-standby", 4), sleep=lambda s: None)
    assert (res.status, res.attempts) == ("applied", 2)


def test_observe_reads_floors_readiness_and_route_weights(kube, fleet_cfg, monkeypatch):
    kube.then(
        Exchange("GET", f"{HPAS}/chat-v4", 200, "hpa-chat-v4.json"),
        Exchange("GET", f"{DEPLOYMENTS}/chat-v4", 200, "deployment-chat-v4.json"),
        Exchange("GET", f"{SCALEDOBJECTS}/chat-v4-standby", 200, "scaledobject-chat-v4-standby.json"),
        Exchange("GET", f"{DEPLOYMENTS}/chat-v4-standby", 200, "deployment-chat-v4-standby.json"),
        Exchange("GET", f"{HTTPROUTES}/chat", 200, "httproute-chat-inferencepool-patched.json"),
    )
    route = {"name": "chat", "backends": BACKENDS, "backend_kind": "InferencePool"}
    obs = gateway(kube, fleet_cfg, monkeypatch, httproute=route).observe()
    got = {p.name: (p.replicas, p.ready, p.spare, p.weight, p.standby) for p in obs.pools}
    assert got == {
        "v4-main": (4, 11, 12, 1.0, False),  # floor 4 of ceiling 16; the Deployment has 11 ready
        "v4-standby": (0, 0, 8, 0.25, True),
        "v3.5-fallback": (5, 5, 0, 0.0, False),  # in the route only: replicas are the fleet file's
    }


@pytest.mark.parametrize("action", [SetBreakerThreshold("v4-main", 0.4)])
def test_actions_the_gateway_backend_cannot_express_are_refused(kube, fleet_cfg, monkeypatch, action):
    with pytest.raises(ActionRefused, match="needs a router backend"):
        gateway(kube, fleet_cfg, monkeypatch).apply(action)
    with pytest.raises(ActionRefused, match=r"set_pool_weight needs actuator.backend.httproute"):
        gateway(kube, fleet_cfg, monkeypatch, httproute=None).apply(SetPoolWeight("v4-main", 0.5))
    with pytest.raises(ActionRefused, match=r"scale_pool needs actuator.backend.autoscalers"):
        gateway(kube, fleet_cfg, monkeypatch, autoscalers={}).apply(ScalePool("v4-main", 5))
    assert kube.requests == []


# --- the kubernetes backend never writes replicas under an autoscaler -------------------------------------------
def kubernetes(kube, fleet_cfg) -> KubernetesAdmin:
    cfg = KubernetesBackend(kind="kubernetes", namespace="infer", deployments={"v4-main": "chat-v4"}, api_url=kube.url)
    return KubernetesAdmin.from_config(cfg, fleet_cfg)


@pytest.mark.parametrize(
    ("hpas", "scaledobjects", "status", "owners"),
    [
        ("hpa-list-chat-v4.json", "scaledobject-list-none.json", 200, "HorizontalPodAutoscaler/chat-v4"),
        ("hpa-list-none.json", "scaledobject-list-chat-v4.json", 200, "ScaledObject/chat-v4-keda"),
    ],
)
def test_scaling_a_deployment_an_autoscaler_owns_is_refused(kube, fleet_cfg, hpas, scaledobjects, status, owners):
    kube.then(Exchange("GET", HPAS, 200, hpas), Exchange("GET", SCALEDOBJECTS, status, scaledobjects))
    with pytest.raises(ActionRefused, match=rf"deployment infer/chat-v4 is scaled by {owners}: .*gateway"):
        kubernetes(kube, fleet_cfg).apply(ScalePool("v4-main", 16))
    assert [r.path for r in kube.requests] == [HPAS, SCALEDOBJECTS]  # no scale read, no patch


def test_a_cluster_without_keda_has_no_scaledobjects_to_fear(kube, fleet_cfg):
    kube.then(
        Exchange("GET", HPAS, 200, "hpa-list-none.json"),
        Exchange("GET", SCALEDOBJECTS, 404, "status-404-no-api.json"),
        Exchange("GET", f"{DEPLOYMENTS}/chat-v4/scale", 200, "scale-chat-v4.json"),
        Exchange("PATCH", f"{DEPLOYMENTS}/chat-v4/scale", 200, "scale-chat-v4-patched.json"),
    )
    assert kubernetes(kube, fleet_cfg).apply(ScalePool("v4-main", 16)).status == "applied"


def test_an_autoscaler_list_rbac_forbids_is_a_refusal_not_a_scale(kube, fleet_cfg):
    kube.then(Exchange("GET", HPAS, 403, "status-403-scale.json"))
    res = apply_with_retries(kubernetes(kube, fleet_cfg), ScalePool("v4-main", 16), sleep=lambda s: None)
    assert res.status == "refused" and "HTTP 403" in res.detail and len(kube.requests) == 1


# --- the fleet file ---------------------------------------------------------------------------------------------
def _doc(backend: dict[str, Any]) -> dict[str, Any]:
    import yaml

    doc = yaml.safe_load(FLASH_SALE.read_text())
    doc["actuator"] = {"backend": backend}
    return doc


def test_the_fleet_file_maps_pools_to_routes_and_autoscalers_and_checks_them():
    good = {"kind": "gateway", "namespace": "infer", "httproute": {"name": "chat", "backends": BACKENDS},
            "autoscalers": AUTOSCALERS, "api_url": "http://127.0.0.1:1"}  # fmt: skip
    cfg = parse_config(_doc(good))
    assert isinstance(build_backend(cfg), GatewayAdmin)
    assert cfg.actuator.backend.httproute.weight_scale == 1000 and cfg.actuator.backend.server_dry_run is False
    bad = {**good, "autoscalers": {"v4-mian": {"kind": "HorizontalPodAutoscaler", "name": "x"}}}
    with pytest.raises(ConfigError, match=r"actuator\.backend\.autoscalers: unknown pool 'v4-mian'"):
        parse_config(_doc(bad))
    bad = {**good, "httproute": {"name": "chat", "backends": {"v5": "x"}}}
    with pytest.raises(ConfigError, match=r"actuator\.backend\.httproute\.backends: unknown pool 'v5'"):
        parse_config(_doc(bad))
    with pytest.raises(ConfigError, match=r"give httproute, autoscalers or both"):
        parse_config(_doc({"kind": "gateway"}))
    with pytest.raises(ConfigError, match=r"weight_scale"):
        parse_config(_doc({**good, "httproute": {"name": "chat", "backends": BACKENDS, "weight_scale": 0}}))
    with pytest.raises(ConfigError, match=r"autoscalers"):
        parse_config(_doc({**good, "autoscalers": {"v4-main": {"kind": "VerticalPodAutoscaler", "name": "x"}}}))
