"""GET a server's JSON API with a timeout, and errors that say which server failed and how (never a password).

`get_json` is the one place transport failures become messages: "cannot connect to Prometheus at URL:
ConnectionError", "... did not answer within N s", "request to ... failed: ...".  What an answer means (a
Prometheus envelope, an Alertmanager status) is the caller's to judge, so a body that is not JSON comes back as
None with its status code rather than as an error.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import requests

from infercast.redact import redact, redact_url


def get_json(
    http: requests.Session,
    base: str,
    path: str,
    params: dict[str, str] | None = None,
    *,
    timeout: float,
    server: str,
    error: type[Exception] = RuntimeError,
    parse: Callable[[bytes], Any] | None = None,
) -> tuple[int, Any]:
    """(HTTP status, parsed JSON body or None when the body is not JSON) of `GET base+path`; `error(message)` naming
    `server` ("Prometheus", "Alertmanager") and the redacted `base` when the server cannot be reached in time.
    `parse`: reads the body's bytes instead of `json.loads` (raising ValueError when it is not JSON)."""
    shown = redact_url(base)
    try:
        r = http.get(f"{base}{path}", params=params, timeout=timeout)
    except requests.Timeout:
        raise error(f"{server} at {shown} did not answer within {timeout:g} s") from None
    except requests.ConnectionError as e:
        raise error(f"cannot connect to {server} at {shown}: {e.__class__.__name__}") from None
    except requests.RequestException as e:
        raise error(f"request to {server} at {shown} failed: {redact(str(e))}") from None
    try:
        return r.status_code, (parse(r.content) if parse is not None else r.json())
    except ValueError:
        return r.status_code, None


__all__ = ["get_json"]
