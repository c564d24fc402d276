"""Secrets out of everything infercast prints or logs: one helper, used wherever a URL or an error text is shown.

- `redact_url(url)`: the URL without its `user:password@` part and without a query string (query strings carry
  `?token=...` as often as not); `http://admin:hunter2@grafana:3000/api?x=1` -> `http://***@grafana:3000/api`.
- `redact(text, secrets)`: any text (an exception message, a server's answer) with every URL's user-info replaced,
  `Authorization: ...`/`Bearer ...` values replaced, and each known secret replaced where it occurs as a whole
  token.  Whole tokens only: a one-letter password must not turn "Max retries exceeded" into "Ma*** retries
  e***ceeded" (what replacing every substring did).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from urllib.parse import urlsplit, urlunsplit

MASK = "***"
# scheme://user[:password]@  (user-info never contains '/', '@' or whitespace)
_USERINFO = re.compile(r"(?P<scheme>\b[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s'\"<>]+@")
_BEARER = re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=-]+")
_AUTH_HEADER = re.compile(
    r"(?i)\b(authorization|x-api-key|api[_-]?key|token|password)(['\"]?\s*[:=]\s*['\"]?)[^\s'\",}]+"
)


def redact_url(url: str) -> str:
    """`url` without user-info and query string; unparseable input is redacted as text."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        if parts.port:
            host = f"{host}:{parts.port}"
    except ValueError:  # e.g. an invalid port: never raise from a helper used in error paths
        return redact(url)
    if parts.username is not None or parts.password is not None:
        host = f"{MASK}@{host}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


def redact(text: str, secrets: Iterable[str | None] = ()) -> str:
    """`text` with URL user-info, authorization values and the given `secrets` (whole tokens) masked."""
    text = _USERINFO.sub(lambda m: m.group("scheme") + MASK + "@", text)
    text = _BEARER.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    text = _AUTH_HEADER.sub(lambda m: m.group(1) + m.group(2) + MASK, text)
    for s in sorted({s for s in secrets if s}, key=len, reverse=True):
        text = re.sub(rf"(?<![A-Za-z0-9]){re.escape(s)}(?![A-Za-z0-9])", MASK, text)
    return text
