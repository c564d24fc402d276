"""Prometheus as a store: `query_range` over its HTTP API (`/api/v1/query_range`), with timeouts and clear errors.

Every failure becomes a `StoreError` whose message names the URL and what went wrong (connection refused, timed
out after N s, HTTP status with Prometheus' own error text, a body that is not the API's JSON), so the predictor
can log it and publish `infercast_forecast_skipped{reason="source_down"}` instead of crashing or guessing.
"""

from __future__ import annotations

import math
import re

import numpy as np
import requests

from infercast.httpjson import get_json
from infercast.redact import redact, redact_url
from infercast.store import Series, StoreError
from infercast.store.promjson import matrix_series, parse_body

_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
# Prometheus refuses range queries with more than 11,000 points per series; stay under it by splitting.
MAX_POINTS = 11_000


def selector(metric: str, matchers: dict[str, str] | None) -> str:
    """`metric{k="v",...}` with values escaped as PromQL string literals."""
    if not re.match(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$", metric):
        raise StoreError(f"not a valid metric name: {metric!r}")
    parts = []
    for k, v in sorted((matchers or {}).items()):
        if not _LABEL.match(k):
            raise StoreError(f"not a valid label name: {k!r}")
        esc = str(v).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        parts.append(f'{k}="{esc}"')
    return metric + ("{" + ",".join(parts) + "}" if parts else "")


def _result_type(data: object) -> object:
    return data.get("resultType") if isinstance(data, dict) else type(data).__name__


class PrometheusStore:
    """Read-only store backed by a Prometheus server."""

    def __init__(self, url: str, timeout_seconds: float = 10.0, session: requests.Session | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise StoreError(f"Prometheus URL must start with http:// or https://, got {redact_url(url)!r}")
        self.url = url.rstrip("/")
        self.shown_url = redact_url(self.url)  # what messages say: never the user:password part
        self.timeout = float(timeout_seconds)
        self._http = session or requests.Session()

    def api(self, path: str, params: dict[str, str] | None = None) -> dict:
        """The `data` of a successful answer of the HTTP API at `path` (`/api/v1/...`); StoreError otherwise.
        A matrix's samples come as arrays (`promjson.parse_body`); `promjson.matrix_series` reads either form."""
        where = f"{self.shown_url}{path}"
        status, body = get_json(
            self._http,
            self.url,
            path,
            params,
            timeout=self.timeout,
            server="Prometheus",
            error=StoreError,
            parse=parse_body,
        )
        if body is None:
            raise StoreError(f"{where} answered HTTP {status} with a body that is not JSON")
        if status != 200 or not isinstance(body, dict) or body.get("status") != "success":
            err = body.get("error", "") if isinstance(body, dict) else ""
            raise StoreError(f"{where} answered HTTP {status}: {redact(str(err)) or 'no error text'}")
        return body.get("data") or {}

    def query_range(
        self, metric: str, matchers: dict[str, str] | None, start: float, end: float, step: float
    ) -> list[Series]:
        if step <= 0 or end < start or not (math.isfinite(start) and math.isfinite(end)):
            raise StoreError(f"bad range: start={start} end={end} step={step}")
        query = selector(metric, matchers)
        merged: dict[tuple, list[tuple[np.ndarray, np.ndarray]]] = {}
        chunk = step * (MAX_POINTS - 1)
        s = start
        while s <= end:
            e = min(end, s + chunk)
            data = self.api(
                "/api/v1/query_range",
                {"query": query, "start": repr(float(s)), "end": repr(float(e)), "step": repr(float(step))},
            )
            if not isinstance(data, dict) or data.get("resultType") != "matrix":
                raise StoreError(f"expected a matrix from query_range, got {_result_type(data)!r}")
            result = data.get("result", [])
            if not isinstance(result, list):
                raise StoreError(f"expected a list of series from query_range, got {type(result).__name__}")
            for item in result:
                if not isinstance(item, dict) or not isinstance(item.get("metric", {}), dict):
                    raise StoreError(f"expected a series object in query_range's result, got {item!r:.80}")
                labels = {k: str(v) for k, v in item.get("metric", {}).items() if k != "__name__"}
                key = tuple(sorted(labels.items()))
                ts, vs = matrix_series(item, StoreError)
                parts = merged.setdefault(key, [])
                last = next((p[0][-1] for p in reversed(parts) if len(p[0])), None)
                if last is not None and len(ts):
                    keep = ts > last  # the chunk boundary is evaluated twice
                    ts, vs = ts[keep], vs[keep]
                parts.append((ts, vs))
            s = e + step
        out = []
        for k, parts in merged.items():
            if len(parts) == 1:
                ts, vs = parts[0]
            else:
                ts, vs = np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts])
            out.append(Series(dict(k), ts, vs))
        return out
