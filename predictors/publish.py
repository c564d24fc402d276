"""Forecasts as catalog metrics: sample builders (pure) and a prometheus_client collector that serves the latest set.

Names and label sets come from `infercast.catalog`; a sample whose labels don't match its family's spec is refused
at build time.  The collector holds one immutable snapshot, replaced whole after each tick, so a scrape never sees
half a round, and a series the loop stopped publishing disappears from the next scrape (absent, never a stale 0).

Samples carry the catalog's labels only (`forecaster`, `band`).  The deprecated names (`model`, `ml_forecast` with
Prophet's yhat/yhat_lower/yhat_upper: `catalog.LEGACY_FORECAST_LABELS`) are added where a scrape is answered, by
`LatestSamples(legacy_labels=True)` (the predictor's `predictor.legacy_forecast_labels`): onto the same series, so
the series count does not change and nothing inside infercast ever reads them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from infercast.catalog import (
    FORECAST_BANDS,
    FORECAST_BREACH_ETA_SECONDS,
    FORECAST_KV_CACHE_USAGE_RATIO,
    FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS,
    FORECAST_REQUESTS_PER_SECOND,
    FORECAST_SKIPPED,
    LEGACY_BAND_VALUES,
    LEGACY_FORECAST_LABELS,
    breach_threshold_label,
    spec,
)
from infercast.predictors.base import Forecast

FORECAST_METRIC = {"kv": FORECAST_KV_CACHE_USAGE_RATIO, "rps": FORECAST_REQUESTS_PER_SECOND}


@dataclass(frozen=True, slots=True)  # slots: a large fleet's tick builds 100,000s of them
class ForecastSample:
    """One published forecast series: labels in the family's catalog order (`sample` builds and checks them).
    Not `infercast.exporters.base.Sample`, whose labels are a dict straight from a scrape."""

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
    """The point forecast and the band's lower and upper edges at the horizon (the last point of the path).

    KV forecasts carry `aggregate` (`mean` of the pool's instances, or `max`: its fullest instance); traffic is the
    pool's sum and has no such label.
    """
    values = dict(zip(FORECAST_BANDS, fc.at_horizon(), strict=True))
    h = horizon_label(horizon_s)
    extra = {"aggregate": aggregate} if series == "kv" else {}
    return [
        sample(
            FORECAST_METRIC[series],
            values[k],
            pool=pool,
            version=version,
            forecaster=fc.model,
            horizon=h,
            band=k,
            **extra,
        )
        for k in FORECAST_BANDS
    ]


def breach_eta_sample(pool: str, version: str, trigger: float, eta_s: float, aggregate: str = "mean") -> ForecastSample:
    return sample(
        FORECAST_BREACH_ETA_SECONDS,
        eta_s,
        pool=pool,
        version=version,
        threshold=breach_threshold_label(trigger),
        aggregate=aggregate,
    )


def skipped_sample(pool: str, version: str, series: str, reason: str) -> ForecastSample:
    return sample(FORECAST_SKIPPED, 1.0, pool=pool, version=version, series=series, reason=reason)


def last_success_sample(forecaster: str, ts: float) -> ForecastSample:
    return sample(FORECAST_LAST_SUCCESS_TIMESTAMP_SECONDS, ts, forecaster=forecaster)


_LEGACY_VALUES = {"band": dict(LEGACY_BAND_VALUES)}


def with_legacy_labels(labels: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The (name, value) `labels` plus the deprecated name of each renamed label among them (`forecaster` -> `model`,
    `band` -> `ml_forecast` with the band's former value): the same series, labelled both ways.  Removed in the next
    release with `predictor.legacy_forecast_labels`."""
    out = dict(labels)
    for new, old in LEGACY_FORECAST_LABELS:
        if new in out:
            out[old] = _LEGACY_VALUES.get(new, {}).get(out[new], out[new])
    return out


class LatestSamples:
    """A prometheus_client collector serving the last snapshot given to `set` (fresh families per scrape).

    `legacy_labels`: also label each series with the deprecated names (`with_legacy_labels`); the predictor passes
    `predictor.legacy_forecast_labels`."""

    def __init__(self, legacy_labels: bool = False) -> None:
        self._samples: tuple[ForecastSample, ...] = ()
        self._lock = threading.Lock()
        self.legacy_labels = legacy_labels

    def set(self, samples: Iterable[ForecastSample]) -> None:
        snap = tuple(samples)
        with self._lock:
            self._samples = snap

    def snapshot(self) -> tuple[ForecastSample, ...]:
        with self._lock:
            return self._samples

    def collect(self):
        from infercast.exposition import families

        labels = with_legacy_labels if self.legacy_labels else dict
        return families((s.name, labels(s.labels), s.value) for s in sorted(self.snapshot(), key=lambda s: s.name))

    def describe(self):
        return []


def exposition(samples: Iterable[ForecastSample], legacy_labels: bool = False) -> str:
    """The samples in Prometheus text format (what a scrape of the service returns)."""
    from prometheus_client import CollectorRegistry, generate_latest

    reg = CollectorRegistry()
    c = LatestSamples(legacy_labels)
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


class SampleTemplate:
    """Many samples of one family that differ only in their value and the `free` labels (pool and version), which
    must come first in the family's label order: the fixed labels are checked once, by `sample`, and each sample is
    then built without the checks (the predictor's batched tick publishes tens of thousands per tick).  Free labels
    must be ones the catalog gives no enum."""

    def __init__(self, name: str, free: tuple[str, ...], **fixed: str) -> None:
        s = spec(name)
        if any(label == f for label, _ in s.enums for f in free):
            raise ValueError(f"{name}: an enumerated label cannot be free")
        if tuple(s.labels[: len(free)]) != tuple(free):
            raise ValueError(f"{name}: the free labels {free} must come first in {s.labels}")
        sample(name, 0.0, **{f: "" for f in free}, **fixed)  # the same checks as one sample
        self.name = name
        self._tail = tuple((k, str(fixed[k])) for k in s.labels[len(free) :])

    def __call__(self, value: float, free: tuple[tuple[str, str], ...]) -> ForecastSample:
        """A sample; `free` holds the free labels' (name, value) pairs, in order."""
        return ForecastSample(self.name, free + self._tail, float(value))


def kv_forecast_samples_many(
    groups: list[tuple[str, str]],
    forecaster: str,
    at_horizon: np.ndarray,
    horizon_s: float,
    aggregate: str,
    trigger: float,
    eta_s: np.ndarray,
) -> list[ForecastSample]:
    """`forecast_samples("kv", ...)` then `breach_eta_sample(...)` for each group, in that order: `at_horizon` is
    (n, 3), the point, lower and upper band at the horizon (`Forecast.at_horizon`), `eta_s` (n,)."""
    h = horizon_label(horizon_s)
    free = ("pool", "version")
    f0, f1, f2 = (
        SampleTemplate(
            FORECAST_KV_CACHE_USAGE_RATIO, free, forecaster=forecaster, horizon=h, band=k, aggregate=aggregate
        )
        for k in FORECAST_BANDS
    )
    eta = SampleTemplate(
        FORECAST_BREACH_ETA_SECONDS, free, threshold=breach_threshold_label(trigger), aggregate=aggregate
    )
    # the templates' calls written out (what `SampleTemplate.__call__` does): 50,000 series make 400,000 samples a
    # tick, and a call each was a fifth of building them
    fs = ForecastSample
    (n0, a0), (n1, a1), (n2, a2), (ne, ae) = ((x.name, x._tail) for x in (f0, f1, f2, eta))
    out: list[ForecastSample] = []
    for (pool, version), (v0, v1, v2), e in zip(groups, at_horizon.tolist(), eta_s.tolist(), strict=True):
        pv = (("pool", str(pool)), ("version", str(version)))
        out += (
            fs(n0, pv + a0, float(v0)),
            fs(n1, pv + a1, float(v1)),
            fs(n2, pv + a2, float(v2)),
            fs(ne, pv + ae, float(e)),
        )
    return out
