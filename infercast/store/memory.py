"""The in-memory metric store: what the twin writes and the embedded demo's predictor reads.

Raw samples are kept per (metric, label set), append-only in time order per series.  `query_range` evaluates them
on a grid like Prometheus does (newest sample within `lookback` of each grid point), so the predictor sees the same
thing from either store.  No global state: create one per demo or test.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable

import numpy as np

from infercast.store import Series, StoreError, grid

LabelKey = tuple[tuple[str, str], ...]


class _Column:
    """Samples of one series; arrays grow geometrically so appends stay O(1) amortised."""

    __slots__ = ("n", "t", "v")

    def __init__(self) -> None:
        self.t = np.empty(64)
        self.v = np.empty(64)
        self.n = 0

    def append(self, t: float, v: float) -> None:
        if self.n and t < self.t[self.n - 1]:
            raise StoreError(f"sample at t={t} is older than the newest one (t={self.t[self.n - 1]}); append in order")
        if self.n and t == self.t[self.n - 1]:
            self.v[self.n - 1] = v  # same timestamp: the later write wins, as a re-scrape would
            return
        if self.n == len(self.t):
            self.t = np.resize(self.t, 2 * self.n)
            self.v = np.resize(self.v, 2 * self.n)
        self.t[self.n] = t
        self.v[self.n] = v
        self.n += 1


class MemoryStore:
    """Append samples with `write`, read them back with `query_range` (the interface of `infercast.store`)."""

    def __init__(self, lookback_seconds: float | None = None) -> None:
        #: None: one query step (a value is never carried past the next grid point, so a series that stops being
        #: written reads as missing at once; Prometheus gets the same effect from its staleness markers).
        self.lookback = lookback_seconds
        self._data: dict[str, dict[LabelKey, _Column]] = {}
        self._lock = threading.Lock()

    def write(self, metric: str, labels: dict[str, str], t: float, value: float) -> None:
        """Record one sample; NaN is stored as NaN (a scrape can return it), infinities too."""
        if not metric:
            raise StoreError("metric name is empty")
        if not math.isfinite(t):
            raise StoreError(f"{metric}: sample time must be finite, got {t}")
        key = tuple(sorted((str(k), str(v)) for k, v in labels.items()))
        with self._lock:
            col = self._data.setdefault(metric, {}).setdefault(key, _Column())
            col.append(float(t), float(value))

    def write_many(self, metric: str, labels: dict[str, str], t: Iterable[float], values: Iterable[float]) -> None:
        for ti, vi in zip(t, values, strict=True):
            self.write(metric, labels, ti, vi)

    def metrics(self) -> list[str]:
        return sorted(self._data)

    def query_range(
        self, metric: str, matchers: dict[str, str] | None, start: float, end: float, step: float
    ) -> list[Series]:
        g = grid(start, end, step)
        out = []
        with self._lock:
            cols = list(self._data.get(metric, {}).items())
        for key, col in cols:
            labels = dict(key)
            if matchers and any(labels.get(k, "") != v for k, v in matchers.items()):
                continue
            t, v = col.t[: col.n], col.v[: col.n]
            # Newest sample at or before each grid point, kept if within the lookback (Prometheus semantics).
            idx = np.searchsorted(t, g, side="right") - 1
            ok = idx >= 0
            age = g[ok] - t[idx[ok]]
            ok[ok] &= (age < step) if self.lookback is None else (age <= self.lookback)
            if not ok.any():
                continue
            out.append(Series(labels, g[ok].copy(), v[idx[ok]].copy()))
        return out

    def prune(self, before: float) -> None:
        """Forget samples older than `before` (the demo calls this to bound memory)."""
        with self._lock:
            for series in self._data.values():
                for col in series.values():
                    k = int(np.searchsorted(col.t[: col.n], before, side="left"))
                    if k:
                        col.t[: col.n - k] = col.t[k : col.n]
                        col.v[: col.n - k] = col.v[k : col.n]
                        col.n -= k
