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


class KVLabels:
    """The label tuples of each group's four KV samples (`kv_forecast_samples_many`), kept from one call to the next:
    a group's labels are the same every tick, so a steady tick reuses last tick's tuples (the ones its published
    samples hold) instead of building seven new tuples per group, and the garbage collector has that many fewer new
    objects to walk after the tick.  Holds the groups of the last call only (a group gone is forgotten)."""

    def __init__(self) -> None:
        self._tails: tuple = ()
        self._groups: list[tuple[str, str]] = []
        self._labels: list[tuple[tuple[tuple[str, str], ...], ...]] = []
        self._by_group: dict[tuple[str, str], tuple[tuple[tuple[str, str], ...], ...]] = {}

    def of(self, groups: list[tuple[str, str]], tails: tuple) -> list[tuple[tuple[tuple[str, str], ...], ...]]:
        """Each group's four label tuples: `("pool", pool), ("version", version)` then each of `tails` (the fixed
        labels of the four families, in order)."""
        if tails != self._tails:
            self._tails, self._groups, self._labels, self._by_group = tails, [], [], {}
        elif groups == self._groups:  # the groups of the last call, in its order: a steady tick
            return self._labels
        old, new = self._by_group, {}
        out = []
        for g in groups:
            labs = old.get(g)
            if labs is None:
                pv = (("pool", str(g[0])), ("version", str(g[1])))
                labs = (pv + tails[0], pv + tails[1], pv + tails[2], pv + tails[3])
            new[g] = labs
            out.append(labs)
        self._groups, self._labels, self._by_group = list(groups), out, new
        return out


def kv_forecast_samples_many(
    groups: list[tuple[str, str]],
    forecaster: str,
    at_horizon: np.ndarray,
    horizon_s: float,
    aggregate: str,
    trigger: float,
    eta_s: np.ndarray,
    labels: KVLabels | None = None,
) -> list[ForecastSample]:
    """`forecast_samples("kv", ...)` then `breach_eta_sample(...)` for each group, in that order: `at_horizon` is
    (n, 3), the point, lower and upper band at the horizon (`Forecast.at_horizon`), `eta_s` (n,).  `labels`: the
    label tuples kept from the last call (the batched tick keeps one per KV series), else built afresh."""
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
    tails = (f0._tail, f1._tail, f2._tail, eta._tail)
    per_group = (labels or KVLabels()).of(groups, tails)
    # `ForecastSample(name, labels, value)` written out: the frozen dataclass' __init__ sets each slot through
    # `object.__setattr__`; here each slot is set by its own descriptor: the same object in about 60% of the time
    # (50,000 series make 400,000 samples a tick).  `tolist()` gives Python floats, as `float()` would.
    fs, new = ForecastSample, object.__new__
    slots = (ForecastSample.name, ForecastSample.labels, ForecastSample.value)  # type: ignore[attr-defined]
    s_name, s_labels, s_value = (d.__set__ for d in slots)
    n0, n1, n2, ne = f0.name, f1.name, f2.name, eta.name
    values = np.asarray(at_horizon, dtype=np.float64).tolist()
    etas = np.asarray(eta_s, dtype=np.float64).tolist()
    out: list[ForecastSample] = []
    for (l0, l1, l2, le), (v0, v1, v2), e in zip(per_group, values, etas, strict=True):
        a = new(fs)
        s_name(a, n0)
        s_labels(a, l0)
        s_value(a, v0)
        b = new(fs)
        s_name(b, n1)
        s_labels(b, l1)
        s_value(b, v1)
        c = new(fs)
        s_name(c, n2)
        s_labels(c, l2)
        s_value(c, v2)
        d = new(fs)
        s_name(d, ne)
        s_labels(d, le)
        s_value(d, e)
        out += (a, b, c, d)
    return out
