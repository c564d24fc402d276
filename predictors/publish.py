"""Forecasts as catalog metrics: sample builders (pure) and a prometheus_client collector that serves the latest set.

Names and label sets come from `infercast.catalog`; a sample whose labels don't match its family's spec is refused
at build time.  The collector holds one immutable snapshot, replaced whole after each tick, so a scrape never sees
half a round, and a series the loop stopped publishing disappears from the next scrape (absent, never a stale 0).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass

from infercast.catalog import (
    FORECAST_BREACH_ETA_SECONDS,
    FORECAST_KV_CACHE_USAGE_RATIO,
    FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS,
    FORECAST_REQUESTS_PER_SECOND,
    FORECAST_SKIPPED,
    ML_FORECAST,
    spec,
)
from predictors.base import Forecast

FORECAST_METRIC = {"kv": FORECAST_KV_CACHE_USAGE_RATIO, "rps": FORECAST_REQUESTS_PER_SECOND}


@dataclass(frozen=True)
class ForecastSample:
    """One published forecast series: labels in the family's catalog order (`sample` builds and checks them).
    Not `exporters.base.Sample`, whose labels are a dict straight from a scrape."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    @property
    def label_dict(self) -> dict[str, str]:
        return dict(self.labels)


def sample(name: str, value: float, **labels: str) -> ForecastSample:
    """A sample of catalog family `name`; its labels must be exactly the family's, in any order."""
    s = spec(name)
    if set(labels) != set(s.labels):
        raise ValueError(f"{name} takes labels {s.labels}, got {tuple(sorted(labels))}")
    for label, allowed in s.enums:
        if label in labels and labels[label] not in allowed and name != FORECAST_SKIPPED:
            raise ValueError(f"{name}: {label}={labels[label]!r} is not one of {allowed}")
    if name == FORECAST_SKIPPED and labels["reason"] not in s.enum("reason"):
        raise ValueError(f"{name}: reason={labels['reason']!r} is not one of {s.enum('reason')}")
    return ForecastSample(name, tuple((k, str(labels[k])) for k in s.labels), float(value))


def horizon_label(horizon_s: float) -> str:
    return f"{horizon_s:g}s"


def forecast_samples(
    series: str, pool: str, version: str, fc: Forecast, horizon_s: float, aggregate: str = "mean"
) -> list[ForecastSample]:
    """yhat, yhat_lower and yhat_upper at the horizon (the last point of the path).

    KV forecasts carry `aggregate` (`mean` of the pool's instances, or `max`: its fullest instance); traffic is the
    pool's sum and has no such label.
    """
    values = dict(zip(ML_FORECAST, fc.at_horizon(), strict=True))
    h = horizon_label(horizon_s)
    extra = {"aggregate": aggregate} if series == "kv" else {}
    return [
        sample(
            FORECAST_METRIC[series],
            values[k],
            pool=pool,
            version=version,
            model=fc.model,
            horizon=h,
            ml_forecast=k,
            **extra,
        )
        for k in ML_FORECAST
    ]


def threshold_label(threshold: float) -> str:
    return f"{threshold:g}"


def breach_eta_sample(
    pool: str, version: str, threshold: float, eta_s: float, aggregate: str = "mean"
) -> ForecastSample:
    return sample(
        FORECAST_BREACH_ETA_SECONDS,
        eta_s,
        pool=pool,
        version=version,
        threshold=threshold_label(threshold),
        aggregate=aggregate,
    )


def skipped_sample(pool: str, version: str, series: str, reason: str) -> ForecastSample:
    return sample(FORECAST_SKIPPED, 1.0, pool=pool, version=version, series=series, reason=reason)


def last_success_sample(model: str, ts: float) -> ForecastSample:
    return sample(FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS, ts, model=model)


class LatestSamples:
    """A prometheus_client collector serving the last snapshot given to `set` (fresh families per scrape)."""

    def __init__(self) -> None:
        self._samples: tuple[ForecastSample, ...] = ()
        self._lock = threading.Lock()

    def set(self, samples: Iterable[ForecastSample]) -> None:
        snap = tuple(samples)
        with self._lock:
            self._samples = snap

    def snapshot(self) -> tuple[ForecastSample, ...]:
        with self._lock:
            return self._samples

    def collect(self):
        from infercast.exposition import families

        return families((s.name, dict(s.labels), s.value) for s in sorted(self.snapshot(), key=lambda s: s.name))

    def describe(self):
        return []


def exposition(samples: Iterable[ForecastSample]) -> str:
    """The samples in Prometheus text format (what a scrape of the service returns)."""
    from prometheus_client import CollectorRegistry, generate_latest

    reg = CollectorRegistry()
    c = LatestSamples()
    c.set(samples)
    reg.register(c)
    return generate_latest(reg).decode()


def write_to(store, samples: Iterable[ForecastSample], t: float) -> None:
    """Record samples in a writable store (the demo's MemoryStore) at time `t`, as a scrape of the service would.

    The actuator and the alert evaluation then read forecasts through the same `query_range` as everything else.
    """
    for s in samples:
        store.write(s.name, s.label_dict, t, s.value)


def finite_forecast(fc: Forecast) -> bool:
    return all(math.isfinite(v) for v in fc.at_horizon())
