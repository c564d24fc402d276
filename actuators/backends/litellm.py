"""A LiteLLM proxy as a `FleetAdmin`, through its admin HTTP API (`actuator.backend.kind: litellm`).

Each pool is one LiteLLM deployment (an entry of the proxy's `model_list`), named by its `model_info.id`.  The
proxy is changed through the endpoints its admin UI uses, authenticated with the master key; it needs
`store_model_in_db: true` (deployments kept in its database, which is what lets them change without a restart;
deployments written only in config.yaml are not editable through the API).  No config file is written.

- `set_pool_weight(pool, w)`: the deployment's `litellm_params.weight` = `round(w x weight_scale)` (an integer in
  LiteLLM's schema), by `POST /model/update`.  `weight` steers the default `simple-shuffle` routing between the
  deployments of one `model_name`.  Refused: a pool with no deployment, and a weight 0 that would leave every
  deployment of its `model_name` at 0 (nothing left to pick).
- `set_breaker_threshold(pool, s)`: the deployment's `litellm_params.stream_timeout` = `s`, by the same call.  The
  twin's breaker counts a request that waits longer than the threshold as its pool's failure and takes a pool
  that fails too often out for a while; LiteLLM's cooldown does that to a deployment that fails more than
  `allowed_fails` times in a minute, for `cooldown_time` seconds, and a request that exceeds its timeout is such a
  failure.  `stream_timeout` is the timeout of streamed calls only; as an HTTP read timeout it bounds the wait
  for the first chunk (time to first token) and each gap after it, never a whole long generation.  With
  `allowed_fails` / `cooldown_seconds` in the fleet file, the proxy's `router_settings` are kept at those values
  by `POST /config/update` (`GET /router/settings` reads them first; they are global, not per deployment);
  without them they are left as they are.
- `observe()`: `GET /model/info`: each mapped deployment's weight (`/ weight_scale`; the fleet file's when the
  deployment has none) and its `stream_timeout` as the breaker threshold.  Replicas are the fleet file's: a proxy
  knows endpoints, not replicas.
- `Result.previous` is the value read before the write (none when the deployment had no `stream_timeout`).  The
  proxy has no dry run: advisory mode (the daemon's) is the rehearsal.

Answers: 2xx applied; 401/403/404/422 and other 4xx refused with the proxy's reason; 429, 5xx, a refused or timed
out connection, a body that is not JSON: `BackendError`, retried by `apply_with_retries`.
"""

from __future__ import annotations

import os
import time
from typing import Any

import requests

from infercast.actuators.actions import Action, SetBreakerThreshold, SetPoolWeight
from infercast.actuators.admin import ActionRefused, BackendError, Observation, Result, fleet_pool_state
from infercast.config import FleetConfig
from infercast.redact import redact


class LiteLLMAdmin:
    name = "litellm"

    def __init__(self, cfg: Any, fleet: FleetConfig, session: requests.Session | None = None) -> None:
        self.cfg = cfg  # infercast.config.LiteLLMBackend
        self.fleet = fleet
        self.base = cfg.url.rstrip("/")
        self.token = os.environ.get(cfg.token_env) if cfg.token_env else None
        self.http = session or requests.Session()

    @classmethod
    def from_config(cls, cfg: Any, fleet: FleetConfig) -> LiteLLMAdmin:
        return cls(cfg, fleet)

    # --- FleetAdmin ------------------------------------------------------------------------------------------
    def observe(self) -> Observation:
        found = self._deployments()
        pools = []
        for pool, dep_id in self.cfg.deployments.items():
            pc = self.fleet.pools[pool]
            params = (found.get(dep_id) or {}).get("litellm_params") or {}
            weight = params.get("weight")
            timeout = params.get("stream_timeout")
            pools.append(
                fleet_pool_state(
                    pool,
                    pc,
                    weight=pc.weight if not _number(weight) else weight / self.cfg.weight_scale,
                    breaker_threshold_seconds=float(timeout) if _number(timeout) else None,
                )
            )
        return Observation(time.time(), tuple(pools))

    def apply(self, action: Action) -> Result:
        if not isinstance(action, SetPoolWeight | SetBreakerThreshold):
            raise ActionRefused(
                f"the litellm backend sets deployment weights and breaker thresholds; {action.kind} needs another "
                "backend (kubernetes or gateway for replicas, a router backend for admission and rate limits)"
            )
        if action.pool not in self.cfg.deployments:
            raise ActionRefused(
                f"no LiteLLM deployment is mapped to pool {action.pool!r} (actuator.backend.deployments has "
                f"{sorted(self.cfg.deployments)})"
            )
        dep_id = self.cfg.deployments[action.pool]
        found = self._deployments()
        if dep_id not in found:
            raise ActionRefused(
                f"the proxy has no deployment with model_info.id {dep_id!r} (GET /model/info lists "
                f"{sorted(found)[:10]}); the actuator never adds a deployment"
            )
        if isinstance(action, SetPoolWeight):
            return self._weight(action, dep_id, found)
        return self._breaker(action, dep_id, found[dep_id])

    # --- the two levers --------------------------------------------------------------------------------------
    def _weight(self, action: SetPoolWeight, dep_id: str, found: dict[str, dict[str, Any]]) -> Result:
        scale = self.cfg.weight_scale
        want = round(action.weight * scale)
        mine = found[dep_id]
        before = (mine.get("litellm_params") or {}).get("weight")
        undo = SetPoolWeight(action.pool, before / scale) if _number(before) else None
        if want == 0:
            group = [d for i, d in found.items() if i != dep_id and d.get("model_name") == mine.get("model_name")]
            if all(_number(w := (d.get("litellm_params") or {}).get("weight")) and w == 0 for d in group):
                raise ActionRefused(
                    f"weight 0 for {action.pool!r} leaves every deployment of model {mine.get('model_name')!r} at "
                    "weight 0 (the proxy would have none to pick); shift weight to another deployment first"
                )
        where = f"LiteLLM deployment {dep_id}"
        if _number(before) and before == want:
            return Result("applied", f"{where}: already has weight {want}", undo)
        self._update(dep_id, {"weight": want})
        shown = "none" if before is None else f"{before:g}"
        return Result("applied", f"{where}: weight {shown} -> {want}", undo)

    def _breaker(self, action: SetBreakerThreshold, dep_id: str, mine: dict[str, Any]) -> Result:
        where = f"LiteLLM deployment {dep_id}"
        before = (mine.get("litellm_params") or {}).get("stream_timeout")
        undo = SetBreakerThreshold(action.pool, float(before)) if _number(before) and 0 < before <= 600 else None
        done = []
        settings = self._router_settings_wanted()
        if settings:
            done += self._keep_router_settings(settings)
        if _number(before) and float(before) == action.seconds:
            done.insert(0, f"{where}: already has stream_timeout {action.seconds:g}s")
            return Result("applied", "; ".join(done), undo)
        self._update(dep_id, {"stream_timeout": action.seconds})
        shown = "none" if before is None else f"{before:g}s"
        done.insert(0, f"{where}: stream_timeout {shown} -> {action.seconds:g}s")
        return Result("applied", "; ".join(done), undo)

    def _router_settings_wanted(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.cfg.allowed_fails is not None:
            out["allowed_fails"] = self.cfg.allowed_fails
        if self.cfg.cooldown_seconds is not None:
            out["cooldown_time"] = self.cfg.cooldown_seconds
        return out

    def _keep_router_settings(self, want: dict[str, Any]) -> list[str]:
        """Bring the proxy's router_settings to `want` when they differ; what changed, as text."""
        status, body = self._call("GET", "/router/settings")
        if status >= 300 or not isinstance(body, dict) or not isinstance(body.get("current_values"), dict):
            self._raise(status, body, "/router/settings")
            raise BackendError(f"{self.base}/router/settings: not the proxy's router settings")
        have = body["current_values"]
        changed = {k: v for k, v in want.items() if have.get(k) != v}
        if not changed:
            return []
        status, body = self._call("POST", "/config/update", {"router_settings": changed})
        if status >= 300:
            self._raise(status, body, "/config/update")
        return [f"router_settings {k} {have.get(k)!r} -> {v!r}" for k, v in changed.items()]

    # --- the proxy -------------------------------------------------------------------------------------------
    def _deployments(self) -> dict[str, dict[str, Any]]:
        """model_info.id -> the deployment as `GET /model/info` lists it."""
        status, body = self._call("GET", "/model/info")
        if status >= 300:
            self._raise(status, body, "/model/info")
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list):
            raise BackendError(f"{self.base}/model/info: no `data` list in the answer")
        out = {}
        for d in data:
            dep_id = ((d or {}).get("model_info") or {}).get("id") if isinstance(d, dict) else None
            if isinstance(dep_id, str):
                out[dep_id] = d
        return out

    def _update(self, dep_id: str, params: dict[str, Any]) -> None:
        status, body = self._call("POST", "/model/update", {"model_info": {"id": dep_id}, "litellm_params": params})
        if status >= 300:
            self._raise(status, body, "/model/update")

    def _call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            r = self.http.request(
                method, self.base + path, json=body, headers=headers, timeout=self.cfg.timeout_seconds
            )
        except requests.RequestException as e:
            raise BackendError(redact(f"{self.base}{path}: {type(e).__name__}: {e}", [self.token])[:300]) from None
        try:
            return r.status_code, r.json()
        except ValueError:
            if r.status_code >= 300:
                return r.status_code, {"detail": r.text[:200]}
            raise BackendError(f"{self.base}{path}: HTTP {r.status_code} with a body that is not JSON") from None

    def _raise(self, status: int, body: Any, path: str) -> None:
        msg = redact(f"{self.base}{path}: HTTP {status}: {_reason(body)}", [self.token])
        if status >= 500 or status == 429:
            raise BackendError(msg)
        raise ActionRefused(msg)


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _reason(body: Any) -> str:
    """The proxy's error message: FastAPI's `detail` or LiteLLM's `error.message`."""
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        if body.get("detail"):
            return str(body["detail"])[:300]
    return str(body)[:300]
