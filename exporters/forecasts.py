"""Forecast headroom for the avalanche risk: the predictor's published upper band of KV usage, per pool.

The predictor publishes `infercast_forecast_kv_cache_usage_ratio{pool,...,band="upper"}` to
Prometheus; this asks Prometheus for the highest upper band per pool (over versions, forecasters and horizons: the
pessimistic view a failover decision needs) at most every `refresh_seconds`, with a short timeout so a slow
Prometheus never stalls a scrape.  When it cannot answer, the risk falls back to current usage (logged once).
"""

from __future__ import annotations

import logging
import math
import time

import requests

from infercast.catalog import FORECAST_KV_CACHE_USAGE_RATIO
from infercast.redact import redact, redact_url

log = logging.getLogger(__name__)
QUERY = f'max by (pool) ({FORECAST_KV_CACHE_USAGE_RATIO}{{band="upper"}})'


class PrometheusForecasts:
    """Callable: `{pool: forecast upper band of KV usage}` or None when unavailable."""

    def __init__(self, url: str, timeout: float = 0.5, refresh_seconds: float = 15.0, session=None) -> None:
        self.url = url.rstrip("/")
        self.shown_url = redact_url(self.url)  # what the log says: never the user:password part
        self.timeout = timeout
        self.refresh = refresh_seconds
        self.session = session or requests.Session()
        self._cached: dict[str, float] | None = None
        self._at = -math.inf
        self._error: str | None = None

    def __call__(self) -> dict[str, float] | None:
        now = time.monotonic()
        if now - self._at < self.refresh:
            return self._cached
        self._at = now
        try:
            r = self.session.get(f"{self.url}/api/v1/query", params={"query": QUERY}, timeout=self.timeout)
            r.raise_for_status()
            result = r.json()["data"]["result"]
            out = {}
            for item in result:
                v = float(item["value"][1])
                if "pool" in item["metric"] and math.isfinite(v):
                    out[item["metric"]["pool"]] = v
            self._cached = out
            if self._error is not None:
                log.info("forecasts from %s available again", self.shown_url)
            self._error = None
        except (requests.RequestException, ValueError, KeyError, TypeError, IndexError) as e:
            reason = type(e).__name__
            if reason != self._error:
                log.warning(
                    "forecasts from %s unavailable (%s): avalanche risk uses current usage",
                    self.shown_url,
                    redact(str(e)),
                )
            self._error = reason
            self._cached = None
        return self._cached
