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


def _value(s: str) -> float:
    # The API encodes values as strings, including "NaN", "+Inf" and "-Inf".
    try:
        return float(s)
    except (TypeError, ValueError):
        raise StoreError(f"unparseable sample value {s!r}") from None


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
        """The `data` of a successful answer of the HTTP API at `path` (`/api/v1/...`); StoreError otherwise."""
        where = f"{self.shown_url}{path}"
        status, body = get_json(
            self._http, self.url, path, params, timeout=self.timeout, server="Prometheus", error=StoreError
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
        merged: dict[tuple, tuple[list[float], list[float]]] = {}
        chunk = step * (MAX_POINTS - 1)
        s = start
        while s <= end:
            e = min(end, s + chunk)
            data = self.api(
                "/api/v1/query_range",
                {"query": query, "start": repr(float(s)), "end": repr(float(e)), "step": repr(float(step))},
            )
            if data.get("resultType") != "matrix":
                raise StoreError(f"expected a matrix from query_range, got {data.get('resultType')!r}")
            for item in data.get("result", []):
                labels = {k: v for k, v in item.get("metric", {}).items() if k != "__name__"}
                key = tuple(sorted(labels.items()))
                ts, vs = merged.setdefault(key, ([], []))
                for t, v in item.get("values", []):
                    if ts and float(t) <= ts[-1]:
                        continue  # the chunk boundary is evaluated twice
                    ts.append(float(t))
                    vs.append(_value(v))
            s = e + step
        return [Series(dict(k), np.asarray(ts), np.asarray(vs)) for k, (ts, vs) in merged.items()]
