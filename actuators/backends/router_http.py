"""A router's admin HTTP API as a `FleetAdmin`: the client of docs/router-admin-api.md.

What the caller gets, by what the router did:
- 2xx with the API's JSON: the `Result` (a replayed idempotent POST gives the first answer again);
- 4xx: `ActionRefused` with the router's reason (400 bad action, 401 token, 404, 409 stale fencing token, 422 the
  fleet said no): retrying cannot help;
- 5xx, a refused or reset connection, a timeout, or a 2xx whose body is not the API's (a proxy's HTML page,
  truncated JSON, a body over 1 MiB): `BackendError`, which `apply_with_retries` retries.  Retries carry the same
  `Idempotency-Key`, so an action whose answer was lost is applied once.
Every wait is bounded by `timeout_seconds` in total, not per read (a server dribbling its answer is cut off too),
redirects are not followed (the bearer token stays with the configured host), and no error text carries the token.
One credential source per target: a URL carrying `user:pass@` and a bearer token at once is refused when the backend
is made (requests would send the URL's Basic credentials instead of the token, and every call would be a 401 with
no hint why).
"""

from __future__ import annotations

import json
import os
import time
from typing import Any
from urllib.parse import urlsplit

import requests

from infercast.actuators.actions import Action
from infercast.actuators.admin import ActionRefused, BackendError, Observation, Result
from infercast.actuators.stamp import Stamp
from infercast.actuators.wire import WireError, observation_from_dict, result_from_dict
from infercast.redact import redact, redact_url

MAX_ANSWER_BYTES = 1024 * 1024


class HttpAdmin:
    name = "http"
    takes_stamp = True

    def __init__(
        self,
        url: str,
        token: str | None = None,
        *,
        connect_timeout_seconds: float = 1.0,
        timeout_seconds: float = 2.0,
        session: requests.Session | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.token = token
        parts = urlsplit(self.url)
        if token and (parts.username or parts.password):
            raise ValueError(
                f"{redact_url(self.url)}: the URL carries credentials (user:password@) and a bearer token is set too: "
                "use one (the URL's would replace the token, and every call would be refused 401)"
            )
        self.connect_timeout = connect_timeout_seconds
        self.timeout = timeout_seconds
        self.session = session or requests.Session()
        self.session.trust_env = False  # no proxies or netrc credentials picked up from the environment
        self._shown = redact_url(self.url)

    @classmethod
    def from_config(cls, cfg) -> HttpAdmin:
        """From `infercast.config.HttpBackend`; the token is read from its `token_env` now."""
        from infercast.config import ConfigError

        token = os.environ.get(cfg.token_env) or None if cfg.token_env else None
        try:
            return cls(
                cfg.url, token, connect_timeout_seconds=cfg.connect_timeout_seconds, timeout_seconds=cfg.timeout_seconds
            )
        except ValueError as e:
            raise ConfigError(f"actuator.backend.url: {e} (${cfg.token_env} is set)") from None

    # --- FleetAdmin ------------------------------------------------------------------------------------------
    def observe(self) -> Observation:
        status, body = self._call("GET", "/v1/fleet")
        if status != 200:
            raise BackendError(f"{self._shown}/v1/fleet: HTTP {status}: {_reason(body)}")
        try:
            return observation_from_dict(body)
        except WireError as e:
            raise BackendError(f"{self._shown}/v1/fleet: not a fleet document: {e}") from None

    def apply(self, action: Action, stamp: Stamp | None = None) -> Result:
        headers = {}
        if stamp is not None and stamp.key is not None:
            headers["Idempotency-Key"] = stamp.key
        if stamp is not None and stamp.fencing_token is not None:
            headers["X-Fencing-Token"] = str(stamp.fencing_token)
        status, body = self._call("POST", "/v1/actions", action.to_dict(), headers)
        if 400 <= status < 500:
            raise ActionRefused(f"HTTP {status}: {_reason(body)}")
        if status != 200:
            raise BackendError(f"{self._shown}/v1/actions: HTTP {status}: {_reason(body)}")
        return self._result(body, "/v1/actions")

    def fence(self) -> int | None:
        """The highest fencing token the router has seen (`GET /v1/fence`); None when it keeps none or is a router
        without that route (404).  BackendError when it cannot be asked."""
        status, body = self._call("GET", "/v1/fence")
        if status == 404:
            return None
        if status != 200 or not isinstance(body, dict):
            raise BackendError(f"{self._shown}/v1/fence: HTTP {status}: {_reason(body)}")
        t = body.get("fencing_token")
        if t is None:
            return None
        if isinstance(t, bool) or not isinstance(t, int) or t < 0:
            raise BackendError(f"{self._shown}/v1/fence: fencing_token is not a non-negative integer: {t!r}"[:200])
        return t

    def lookup(self, key: str) -> Result | None:
        """The router's answer for idempotency key `key`; None when it applied nothing under it."""
        Stamp(key=key)  # validates the key before it goes into a URL
        status, body = self._call("GET", f"/v1/actions/{key}")
        if status == 404:
            return None
        if status == 422:  # the fleet refused it then: an answer, not an error
            return Result("refused", _reason(body))
        if status != 200:
            raise BackendError(f"{self._shown}/v1/actions/{key}: HTTP {status}: {_reason(body)}")
        return self._result(body, f"/v1/actions/{key}")

    def close(self) -> None:
        self.session.close()

    # --- HTTP ------------------------------------------------------------------------------------------------
    def _result(self, body: Any, path: str) -> Result:
        try:
            res = result_from_dict(body, "answer")
        except WireError as e:
            raise BackendError(f"{self._shown}{path}: not the API's answer: {e}") from None
        if isinstance(body, dict) and body.get("replayed"):
            res = Result(res.status, res.detail or "replayed: applied earlier under this idempotency key", res.previous)
        return res

    def _call(
        self, method: str, path: str, payload: dict | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, Any]:
        """(status, decoded JSON body); BackendError on any transport failure or a body that is not JSON."""
        h = {"Accept": "application/json", **(headers or {})}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        deadline = time.monotonic() + self.timeout
        try:
            with self.session.request(
                method,
                self.url + path,
                json=payload,
                headers=h,
                timeout=(self.connect_timeout, self.timeout),
                allow_redirects=False,
                stream=True,
            ) as r:
                raw = _read(r, deadline)
                status = r.status_code
        except requests.RequestException as e:
            raise BackendError(f"{self._shown}{path}: {redact(_short(e), [self.token])}") from None
        except (TimeoutError, _TooLarge) as e:
            raise BackendError(f"{self._shown}{path}: {e}") from None
        try:
            return status, json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, json.JSONDecodeError):
            if status >= 400:  # an error page from a proxy: its first words are the reason
                return status, {"error": raw[:200].decode("utf-8", "replace")}
            raise BackendError(
                f"{self._shown}{path}: HTTP {status} with a body that is not JSON: {raw[:80]!r}"
            ) from None


class _TooLarge(Exception):
    pass


def _read(r: requests.Response, deadline: float) -> bytes:
    out = bytearray()
    for chunk in r.iter_content(64 * 1024):
        out += chunk
        if len(out) > MAX_ANSWER_BYTES:
            raise _TooLarge(f"answer over {MAX_ANSWER_BYTES} bytes")
        if time.monotonic() > deadline:
            raise TimeoutError("answer not complete within the timeout")
    return bytes(out)


def _reason(body: Any) -> str:
    if isinstance(body, dict) and isinstance(body.get("error"), str):
        return body["error"][:300]
    return json.dumps(body)[:300] if body is not None else "(no body)"


def _short(e: Exception) -> str:
    """A requests exception in one line (urllib3 nests the whole retry history into its message)."""
    kind = type(e).__name__
    text = str(e)
    for marker in ("Caused by ", "(Caused by "):
        if marker in text:
            text = text.split(marker, 1)[1]
    return f"{kind}: {text[:200]}"
