"""Reaching the Kubernetes API with the official client (`kubernetes` from PyPI, the `kubernetes` extra), for the
Kubernetes backend and the Lease elector.

`api_client(access)` builds a client from `infercast.config.KubernetesAccess`: an explicit `api_url` (+ a bearer
token from `token_env`), the pod's service account (`in_cluster`), or a kubeconfig.  The client's own urllib3
retries are off: `apply_with_retries` and the next leader check are the retries.  `call()` turns what the client
raises into the actuator's two errors:

- 5xx, 409 Conflict (someone changed the object since we read it: read again and retry), 429, a refused or reset
  connection, a timeout: `BackendError`;
- any other 4xx (404 no such Deployment, 403 RBAC forbids, 422 invalid): `ActionRefused` with the API's message.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any, TypeVar

from infercast.actuators.admin import ActionRefused, BackendError
from infercast.config import ConfigError, FleetConfig
from infercast.redact import redact

T = TypeVar("T")


def api_client(access: Any, where: str = "actuator.backend") -> Any:
    """A `kubernetes.client.ApiClient` for `access` (a `KubernetesAccess`); ConfigError naming `where` when no
    configuration can be loaded."""
    try:
        from kubernetes import client, config
    except ModuleNotFoundError:
        raise ConfigError(
            f"{where}: the kubernetes client is not installed: pip install -e '.[kubernetes]' -c constraints.txt"
        ) from None
    cfg = client.Configuration()
    try:
        if access.api_url:
            cfg.host = access.api_url.rstrip("/")
            token = os.environ.get(access.token_env) if access.token_env else None
            if token:
                cfg.api_key = {"authorization": token}
                cfg.api_key_prefix = {"authorization": "Bearer"}
        elif access.in_cluster:
            config.load_incluster_config(client_configuration=cfg)
        else:
            config.load_kube_config(
                config_file=access.kubeconfig, context=access.context, client_configuration=cfg, persist_config=False
            )
    except (config.ConfigException, OSError) as e:
        raise ConfigError(f"{where}: cannot load the Kubernetes configuration: {e}") from None
    cfg.retries = False
    return client.ApiClient(cfg)


def call(fn: Callable[..., T], *args: Any, timeout: float, secrets: tuple[str | None, ...] = (), **kw: Any) -> T:
    """`fn(*args, **kw)` with a request timeout, its failures as BackendError or ActionRefused (module doc)."""
    return _call(fn, args, kw, timeout, secrets, none_if_missing=False)  # type: ignore[return-value]


def call_or_none(
    fn: Callable[..., T], *args: Any, timeout: float, secrets: tuple[str | None, ...] = (), **kw: Any
) -> T | None:
    """`call()`, but None when the API answers 404: the object, or a whole API (a CRD not installed), is not there."""
    return _call(fn, args, kw, timeout, secrets, none_if_missing=True)


def _call(
    fn: Callable[..., T],
    args: tuple[Any, ...],
    kw: dict[str, Any],
    timeout: float,
    secrets: tuple[str | None, ...],
    *,
    none_if_missing: bool,
) -> T | None:
    import urllib3
    from kubernetes.client.exceptions import ApiException

    try:
        return fn(*args, _request_timeout=(min(timeout, 2.0), timeout), **kw)
    except ApiException as e:
        status = e.status or 0
        if status == 404 and none_if_missing:
            return None
        msg = f"HTTP {status} {status_reason(e)}: {status_message(e)}"
        if status >= 500 or status in (0, 409, 429):
            raise BackendError(redact(msg, secrets)) from None
        raise ActionRefused(redact(msg, secrets)) from None
    except (urllib3.exceptions.HTTPError, OSError) as e:
        raise BackendError(redact(f"{type(e).__name__}: {e}", secrets)[:300]) from None


def status_message(e: Any) -> str:
    """The `message` of the API's Status body, or the HTTP reason."""
    try:
        body = json.loads(e.body or "")
        if isinstance(body, dict) and isinstance(body.get("message"), str):
            return body["message"][:300]
    except (TypeError, ValueError):
        pass
    return str(e.reason or "no reason given")[:300]


def status_reason(e: Any) -> str:
    try:
        body = json.loads(e.body or "")
        return str(body.get("reason") or e.reason or "")
    except (TypeError, ValueError, AttributeError):
        return str(e.reason or "")


class CustomObjects:
    """What each gateway backend part (route weights, autoscaler floors, breaker policies) holds: the cluster's
    custom-objects API, the namespace its objects live in, the fleet file, the timeout of one API call, and the
    `dryRun` value every write carries (`All` when `server_dry_run`: the API server admits, nothing persists)."""

    def __init__(self, api: Any, section: Any, fleet: FleetConfig) -> None:
        """`section`: the `actuator.backend` section (`infercast.config.GatewayBackend` or `EnvoyGatewayBackend`)."""
        from kubernetes import client

        self.custom = client.CustomObjectsApi(api)
        self.namespace = section.namespace
        self.fleet = fleet
        self.timeout = section.timeout_seconds
        self.dry_run = "All" if section.server_dry_run else None

    @property
    def dry_run_note(self) -> str:
        """Appended to what a write reports, so that a dry run never reads as a change."""
        return " (server dry run: admitted, not persisted)" if self.dry_run else ""
