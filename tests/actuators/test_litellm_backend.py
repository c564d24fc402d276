"""The LiteLLM backend (issue 23 item 3) against a fake LiteLLM proxy on loopback: no proxy runs here.  The fake
answers the admin endpoints the backend uses (`GET /model/info`, `POST /model/update`, `GET /router/settings`,
`POST /config/update`) in the shapes LiteLLM's code gives them, keeps what was written, refuses what the proxy's
own request models would (a deployment without `model_info.id`, a `weight` that is not an integer, an unknown
router setting: 422; a wrong master key: 401), and records every request for the tests to check."""

from __future__ import annotations

import copy
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import yaml

from infercast.actuators.actions import ScalePool, SetBreakerThreshold, SetPoolWeight
from infercast.actuators.admin import ActionRefused, Result, apply_with_retries
from infercast.actuators.backends import build_backend
from infercast.actuators.backends.litellm import LiteLLMAdmin
from infercast.config import ConfigError, LiteLLMBackend, parse_config
from tests.actuators.conftest import FLASH_SALE

KEY = "sk-master-4417"
#: what GET /model/info lists: two deployments of one model group (vLLM behind LiteLLM), the proxy's key redacted
MODELS = [
    {
        "model_name": "chat",
        "litellm_params": {"model": "hosted_vllm/llama-v4", "api_base": "http://vllm-v4-main:8000/v1", "weight": 800},
        "model_info": {"id": "dep-v4-main", "db_model": True},
    },
    {
        "model_name": "chat",
        "litellm_params": {
            "model": "hosted_vllm/llama-v3.5",
            "api_base": "http://vllm-v3-5:8000/v1",
            "weight": 200,
            "stream_timeout": 2.0,
        },
        "model_info": {"id": "dep-v3-5", "db_model": True},
    },
]
ROUTER = {"allowed_fails": 3, "cooldown_time": 5.0, "routing_strategy": "simple-shuffle", "num_retries": 2}
PARAMS = {"weight": int, "stream_timeout": float}  # the litellm_params this backend writes, with their types
ROUTER_KEYS = {"allowed_fails": int, "cooldown_time": float}


@dataclass
class FakeProxy:
    models: list[dict[str, Any]] = field(default_factory=lambda: copy.deepcopy(MODELS))
    router: dict[str, Any] = field(default_factory=lambda: dict(ROUTER))
    requests: list[tuple[str, str, Any]] = field(default_factory=list)
    fail_with: int | None = None  # answer every request with this status (a proxy in trouble)

    def __post_init__(self) -> None:
        outer = self
        lock = threading.Lock()

        class H(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a: object) -> None:
                pass

            def _any(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                with lock:
                    outer.requests.append((self.command, self.path, body))
                    status, answer = outer.answer(self.command, self.path, self.headers.get("Authorization"), body)
                data = json.dumps(answer).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def answer(self, method: str, path: str, auth: str | None, body: Any) -> tuple[int, Any]:
        if self.fail_with is not None:
            return self.fail_with, {"error": {"message": "Internal Server Error", "type": "internal_server_error"}}
        if auth != f"Bearer {KEY}":
            msg = "Authentication Error, Invalid proxy server token passed. Received API Key = sk-...0000"
            return 401, {"error": {"message": msg, "type": "auth_error", "param": "None", "code": "401"}}
        if (method, path) == ("GET", "/model/info"):
            return 200, {"data": copy.deepcopy(self.models)}
        if (method, path) == ("GET", "/router/settings"):
            return 200, {"fields": [], "current_values": dict(self.router), "routing_strategy_descriptions": {}}
        if (method, path) == ("POST", "/model/update"):
            dep_id = ((body or {}).get("model_info") or {}).get("id")
            params = (body or {}).get("litellm_params") or {}
            bad = [k for k, v in params.items() if k not in PARAMS or not _typed(v, PARAMS[k])]
            if not isinstance(dep_id, str) or bad:
                return 422, {"detail": [{"loc": ["body", "litellm_params", *bad], "msg": "invalid", "type": "value"}]}
            dep = next((m for m in self.models if m["model_info"]["id"] == dep_id), None)
            if dep is None:
                return 400, {"error": {"message": f"Model with id={dep_id} not found in db", "type": "bad_request"}}
            dep["litellm_params"].update(params)
            return 200, {"model_id": dep_id, "model_name": dep["model_name"], "litellm_params": dep["litellm_params"]}
        if (method, path) == ("POST", "/config/update"):
            settings = (body or {}).get("router_settings") or {}
            if set(body or {}) != {"router_settings"} or any(
                k not in ROUTER_KEYS or not _typed(v, ROUTER_KEYS[k]) for k, v in settings.items()
            ):
                return 422, {"detail": "unexpected config section or router setting"}
            self.router.update(settings)
            return 200, {"message": "Config updated successfully"}
        return 404, {"detail": "Not Found"}

    @property
    def writes(self) -> list[tuple[str, str, Any]]:
        return [r for r in self.requests if r[0] == "POST"]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _typed(v: Any, t: type) -> bool:
    if isinstance(v, bool):
        return False
    return isinstance(v, int) if t is int else isinstance(v, int | float)


@pytest.fixture
def proxy() -> Iterator[FakeProxy]:
    p = FakeProxy()
    yield p
    p.close()


def litellm(proxy: FakeProxy, fleet_cfg, monkeypatch, **over: Any) -> LiteLLMAdmin:
    monkeypatch.setenv("LITELLM_MASTER_KEY", KEY)
    cfg = {
        "kind": "litellm",
        "url": proxy.url,
        "deployments": {"v4-main": "dep-v4-main", "v3.5-fallback": "dep-v3-5"},
        **over,
    }
    return LiteLLMAdmin.from_config(LiteLLMBackend.model_validate(cfg), fleet_cfg)


# --- weights ------------------------------------------------------------------------------------------------------
def test_a_weight_shift_sets_the_deployments_integer_weight_and_reads_back(proxy, fleet_cfg, monkeypatch):
    admin = litellm(proxy, fleet_cfg, monkeypatch)
    res = admin.apply(SetPoolWeight("v4-main", 0.5))
    assert res == Result("applied", "LiteLLM deployment dep-v4-main: weight 800 -> 500", SetPoolWeight("v4-main", 0.8))
    assert proxy.writes == [
        ("POST", "/model/update", {"model_info": {"id": "dep-v4-main"}, "litellm_params": {"weight": 500}})
    ]
    obs = admin.observe()
    assert (obs.pool("v4-main").weight, obs.pool("v3.5-fallback").weight) == (0.5, 0.2)


def test_the_weight_in_place_is_not_written_again(proxy, fleet_cfg, monkeypatch):
    res = litellm(proxy, fleet_cfg, monkeypatch).apply(SetPoolWeight("v4-main", 0.8))
    assert res.detail == "LiteLLM deployment dep-v4-main: already has weight 800" and proxy.writes == []


def test_a_weight_that_would_leave_the_model_group_nothing_to_pick_is_refused(proxy, fleet_cfg, monkeypatch):
    proxy.models[1]["litellm_params"]["weight"] = 0
    with pytest.raises(ActionRefused, match=r"leaves every deployment of model 'chat' at weight 0"):
        litellm(proxy, fleet_cfg, monkeypatch).apply(SetPoolWeight("v4-main", 0.0))
    assert proxy.writes == []


# --- breakers -----------------------------------------------------------------------------------------------------
def test_a_breaker_threshold_is_the_deployments_stream_timeout_with_the_router_settings_kept(
    proxy, fleet_cfg, monkeypatch
):
    admin = litellm(proxy, fleet_cfg, monkeypatch, allowed_fails=3, cooldown_seconds=30.0)
    res = admin.apply(SetBreakerThreshold("v3.5-fallback", 0.4))
    assert res == Result(
        "applied",
        "LiteLLM deployment dep-v3-5: stream_timeout 2s -> 0.4s; router_settings cooldown_time 5.0 -> 30.0",
        SetBreakerThreshold("v3.5-fallback", 2.0),
    )
    assert proxy.writes == [
        ("POST", "/config/update", {"router_settings": {"cooldown_time": 30.0}}),  # allowed_fails was already 3
        ("POST", "/model/update", {"model_info": {"id": "dep-v3-5"}, "litellm_params": {"stream_timeout": 0.4}}),
    ]
    assert admin.observe().pool("v3.5-fallback").breaker_threshold_seconds == 0.4
    # and once in place, nothing is written again
    n = len(proxy.writes)
    again = admin.apply(SetBreakerThreshold("v3.5-fallback", 0.4))
    assert again.detail == "LiteLLM deployment dep-v3-5: already has stream_timeout 0.4s" and len(proxy.writes) == n


def test_without_router_settings_in_the_fleet_file_they_are_left_alone(proxy, fleet_cfg, monkeypatch):
    res = litellm(proxy, fleet_cfg, monkeypatch).apply(SetBreakerThreshold("v4-main", 0.4))
    assert res.previous is None, "the deployment had no stream_timeout: nothing to put back"
    assert [p for _, p, _ in proxy.requests] == ["/model/info", "/model/update"]


# --- refusals and failures ----------------------------------------------------------------------------------------
def test_what_the_proxy_cannot_do_is_refused_before_any_write(proxy, fleet_cfg, monkeypatch):
    admin = litellm(proxy, fleet_cfg, monkeypatch, deployments={"v4-main": "dep-gone"})
    with pytest.raises(ActionRefused, match=r"no deployment with model_info.id 'dep-gone'"):
        admin.apply(SetPoolWeight("v4-main", 0.5))
    with pytest.raises(ActionRefused, match=r"no LiteLLM deployment is mapped to pool 'v4-standby'"):
        admin.apply(SetPoolWeight("v4-standby", 0.5))
    with pytest.raises(ActionRefused, match=r"scale_pool needs another backend"):
        admin.apply(ScalePool("v4-main", 4))
    assert proxy.writes == []


def test_a_wrong_master_key_is_refused_with_the_proxys_reason_and_no_key_shown(proxy, fleet_cfg, monkeypatch):
    cfg = litellm(proxy, fleet_cfg, monkeypatch).cfg
    monkeypatch.setenv("LITELLM_MASTER_KEY", "sk-wrong")  # read when the backend is built
    admin = LiteLLMAdmin.from_config(cfg, fleet_cfg)
    res = apply_with_retries(admin, SetPoolWeight("v4-main", 0.5), sleep=lambda s: None)
    assert res.status == "refused" and res.attempts == 1
    assert "HTTP 401: Authentication Error, Invalid proxy server token passed" in res.detail
    assert "sk-wrong" not in res.detail


def test_a_proxy_answering_500_is_retried_then_given_up(proxy, fleet_cfg, monkeypatch):
    proxy.fail_with = 500
    res = apply_with_retries(
        litellm(proxy, fleet_cfg, monkeypatch), SetPoolWeight("v4-main", 0.5), sleep=lambda s: None
    )
    assert (res.status, res.attempts) == ("failed", 3)
    assert "HTTP 500: Internal Server Error" in res.detail and proxy.writes == []


# --- the fleet file -----------------------------------------------------------------------------------------------
def _fleet(backend: dict[str, Any]):
    doc = yaml.safe_load(FLASH_SALE.read_text())
    doc["actuator"] = {"backend": backend}
    return parse_config(doc)


def test_the_fleet_file_chooses_the_litellm_backend():
    cfg = _fleet({"kind": "litellm", "url": "http://127.0.0.1:4000", "deployments": {"v4-main": "dep-v4-main"}})
    assert isinstance(build_backend(cfg), LiteLLMAdmin)


def test_the_fleet_file_names_a_deployment_pool_it_does_not_have():
    with pytest.raises(ConfigError, match=r"actuator.backend.deployments: unknown pool 'v9'"):
        _fleet({"kind": "litellm", "url": "http://127.0.0.1:4000", "deployments": {"v9": "dep"}})
