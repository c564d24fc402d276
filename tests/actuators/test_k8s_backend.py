"""The Kubernetes backend through the official `kubernetes` client, against recorded API answers replayed on
loopback (tests/data/k8s/; no cluster runs here): scale a Deployment's `scale` subresource, observe Deployments,
and what the actuator sees for 404, 403, 409 and 500 answers and for actions Kubernetes cannot express."""

from __future__ import annotations

import pytest

from infercast.actuators.actions import PrewarmPool, ScalePool, SetBreakerThreshold, SetPoolWeight
from infercast.actuators.admin import ActionRefused, BackendError, Result, apply_with_retries
from infercast.actuators.backends.k8s import KubernetesAdmin
from infercast.config import KubernetesBackend, parse_config
from tests.actuators.conftest import FLASH_SALE
from tests.actuators.kube_replay import DEPLOYMENTS, HPAS, SCALEDOBJECTS, Exchange, KubeReplay

MAPPING = {"v4-main": "chat-v4", "v4-standby": "chat-v4-standby"}
#: before every scale: no HPA and no ScaledObject scales the Deployment (the backend looks each time)
NO_AUTOSCALER = (
    Exchange("GET", HPAS, 200, "hpa-list-none.json"),
    Exchange("GET", SCALEDOBJECTS, 200, "scaledobject-list-none.json"),
)


@pytest.fixture
def kube():
    replay = KubeReplay([])
    yield replay
    replay.close()


def admin_for(kube, fleet_cfg, monkeypatch) -> KubernetesAdmin:
    monkeypatch.setenv("K8S_TOKEN", "sa-token-123")
    cfg = KubernetesBackend(
        kind="kubernetes",
        namespace="infer",
        deployments=MAPPING,
        api_url=kube.url,
        token_env="K8S_TOKEN",
        timeout_seconds=2.0,
    )
    return KubernetesAdmin.from_config(cfg, fleet_cfg)


def test_scale_pool_reads_the_scale_then_patches_it_with_its_resource_version(kube, fleet_cfg, monkeypatch):
    kube.then(
        *NO_AUTOSCALER,
        Exchange("GET", f"{DEPLOYMENTS}/chat-v4/scale", 200, "scale-chat-v4.json"),
        Exchange("PATCH", f"{DEPLOYMENTS}/chat-v4/scale", 200, "scale-chat-v4-patched.json"),
    )
    res = admin_for(kube, fleet_cfg, monkeypatch).apply(ScalePool("v4-main", 16))
    assert res == Result("applied", "deployment infer/chat-v4 scaled 12 -> 16", ScalePool("v4-main", 12))
    get, patch = kube.requests[2:]
    assert get.headers["authorization"] == "Bearer sa-token-123"
    assert patch.body == {"metadata": {"resourceVersion": "918273"}, "spec": {"replicas": 16}}
    assert patch.headers["content-type"] == "application/strategic-merge-patch+json"


def test_prewarm_scales_a_standby_deployment_to_its_nodes(kube, fleet_cfg, monkeypatch):
    kube.then(
        *NO_AUTOSCALER,
        Exchange("GET", f"{DEPLOYMENTS}/chat-v4-standby/scale", 200, "scale-chat-v4-standby.json"),
        Exchange("PATCH", f"{DEPLOYMENTS}/chat-v4-standby/scale", 200, "scale-chat-v4-standby-patched.json"),
    )
    res = admin_for(kube, fleet_cfg, monkeypatch).apply(PrewarmPool("v4-standby"))
    assert res.previous == ScalePool("v4-standby", 0) and res.detail.endswith("scaled 0 -> 4")
    assert kube.requests[3].body["spec"] == {"replicas": fleet_cfg.pools["v4-standby"].nodes}


def test_scaling_to_what_it_has_sends_no_patch(kube, fleet_cfg, monkeypatch):
    kube.then(*NO_AUTOSCALER, Exchange("GET", f"{DEPLOYMENTS}/chat-v4/scale", 200, "scale-chat-v4.json"))
    res = admin_for(kube, fleet_cfg, monkeypatch).apply(ScalePool("v4-main", 12))
    assert res.status == "applied" and "already has 12" in res.detail and len(kube.requests) == 3


def test_observe_reads_replicas_and_ready_from_the_deployment(kube, fleet_cfg, monkeypatch):
    admin = admin_for(kube, fleet_cfg, monkeypatch)
    admin.deployments = {"v4-main": "chat-v4"}
    kube.then(Exchange("GET", f"{DEPLOYMENTS}/chat-v4", 200, "deployment-chat-v4.json"))
    obs = admin.observe()
    v4 = obs.pool("v4-main")
    assert (v4.replicas, v4.ready, v4.version, v4.weight) == (12, 11, "v4", 1.0)
    assert v4.breaker_threshold_seconds is None  # Kubernetes does not know it


@pytest.mark.parametrize(
    ("answer", "status", "error", "message"),
    [
        ("status-404-deployment.json", 404, ActionRefused, r'HTTP 404 NotFound: deployments.apps "chat-v4" not found'),
        (
            "status-403-scale.json",
            403,
            ActionRefused,
            'HTTP 403 Forbidden: .*cannot patch resource "deployments/scale"',
        ),
        ("status-500.json", 500, BackendError, "HTTP 500 InternalError: .*etcdserver: request timed out"),
    ],
)
def test_api_errors_are_refused_or_retried_by_their_status(
    kube, fleet_cfg, monkeypatch, answer, status, error, message
):
    kube.then(*[*NO_AUTOSCALER, Exchange("GET", f"{DEPLOYMENTS}/chat-v4/scale", status, answer)] * 4)
    admin = admin_for(kube, fleet_cfg, monkeypatch)
    with pytest.raises(error, match=message) as e:
        admin.apply(ScalePool("v4-main", 16))
    assert "sa-token-123" not in str(e.value)
    res = apply_with_retries(admin, ScalePool("v4-main", 16), sleep=lambda s: None)
    want = ("refused", 1) if error is ActionRefused else ("failed", 3)
    assert (res.status, res.attempts) == want


def test_a_409_conflict_is_retried_from_a_fresh_read(kube, fleet_cfg, monkeypatch):
    """Someone (an HPA) scaled the Deployment between our read and our patch: the API answers 409, the retry reads
    the new resourceVersion and patches again."""
    kube.then(
        *NO_AUTOSCALER,
        Exchange("GET", f"{DEPLOYMENTS}/chat-v4/scale", 200, "scale-chat-v4.json"),
        Exchange("PATCH", f"{DEPLOYMENTS}/chat-v4/scale", 409, "status-409-deployment.json"),
        *NO_AUTOSCALER,
        Exchange("GET", f"{DEPLOYMENTS}/chat-v4/scale", 200, "scale-chat-v4.json"),
        Exchange("PATCH", f"{DEPLOYMENTS}/chat-v4/scale", 200, "scale-chat-v4-patched.json"),
    )
    res = apply_with_retries(admin_for(kube, fleet_cfg, monkeypatch), ScalePool("v4-main", 16), sleep=lambda s: None)
    assert res.status == "applied" and res.attempts == 2
    assert [r.method for r in kube.requests] == ["GET", "GET", "GET", "PATCH"] * 2


@pytest.mark.parametrize("action", [SetPoolWeight("v4-main", 0.5), SetBreakerThreshold("v4-main", 0.4)])
def test_actions_kubernetes_cannot_express_are_refused_saying_so(kube, fleet_cfg, monkeypatch, action):
    with pytest.raises(ActionRefused, match=f"only scales Deployments .*; {action.kind} needs a router backend"):
        admin_for(kube, fleet_cfg, monkeypatch).apply(action)
    assert kube.requests == []


def test_an_unmapped_pool_is_refused_naming_the_mapping(kube, fleet_cfg, monkeypatch):
    with pytest.raises(ActionRefused, match=r"no Deployment is mapped to pool 'v3.5-fallback' \(actuator.backend"):
        admin_for(kube, fleet_cfg, monkeypatch).apply(ScalePool("v3.5-fallback", 2))


def test_an_api_server_that_is_not_there_is_a_backend_error(fleet_cfg, monkeypatch):
    from infercast.servers import free_port

    cfg = KubernetesBackend(kind="kubernetes", deployments=MAPPING, api_url=f"http://127.0.0.1:{free_port()}")
    with pytest.raises(BackendError, match=r"MaxRetryError|NewConnectionError|Connection refused"):
        KubernetesAdmin.from_config(cfg, fleet_cfg).apply(ScalePool("v4-main", 3))


def test_the_fleet_file_maps_pools_to_deployments_and_checks_them():
    import yaml

    from infercast.config import ConfigError

    doc = yaml.safe_load(FLASH_SALE.read_text())
    doc["actuator"] = {"backend": {"kind": "kubernetes", "namespace": "infer", "deployments": {"v4-mian": "chat"}}}
    with pytest.raises(ConfigError, match=r"actuator\.backend\.deployments: unknown pool 'v4-mian'"):
        parse_config(doc)
