"""What the twin's router reports into: the `Recorder` of its decisions (the exporter's router SDK, or the twin's
own `CountingRecorder`) and the `LatencyBook` of time to first token per priority."""

from __future__ import annotations

from collections import defaultdict
from typing import Protocol

import numpy as np


class Recorder(Protocol):
    def record_request(self, pool: str, version: str, priority: str, outcome: str, n: int = 1) -> None: ...

    def record_degradation(self, from_version: str, to_version: str, reason: str, n: int = 1) -> None: ...


class CountingRecorder:
    """The twin's own record of router decisions when no exporter is attached (the exporter's router SDK,
    `infercast.exporters.router.RouterRecorder`, implements the same `Recorder` protocol and is passed in instead)."""

    def __init__(self) -> None:
        self.requests: dict[tuple[str, str, str, str], int] = defaultdict(int)
        self.degradations: dict[tuple[str, str, str], int] = defaultdict(int)

    def record_request(self, pool: str, version: str, priority: str, outcome: str, n: int = 1) -> None:
        self.requests[(pool, version, priority, outcome)] += n

    def record_degradation(self, from_version: str, to_version: str, reason: str, n: int = 1) -> None:
        self.degradations[(from_version, to_version, reason)] += n


class LatencyBook:
    """Time to first token per priority, as fine log-spaced histograms per time window (like a Prometheus
    histogram with 600 buckets).  Only served requests enter it: latency percentiles are over served requests, as
    serving dashboards compute them; requests that never got a token are counted by the router (`failed_total`)."""

    EDGES = np.concatenate([[0.0], np.logspace(-3, np.log10(600.0), 600)])

    def __init__(self, duration_s: float, window_s: float = 10.0) -> None:
        self.window_s = window_s
        n = int(np.ceil(duration_s / window_s)) + 1
        self.hist = np.zeros((n, 3, len(self.EDGES)), dtype=np.int64)
        self.within_slo = np.zeros((n, 3), dtype=np.int64)
        # prompt tokens of the requests served within their SLO (token-weighted goodput: a 30k-token prompt served
        # in time is worth more work than a 300-token one)
        self.within_slo_tokens = np.zeros((n, 3), dtype=np.float64)
        self.lost = np.zeros((n, 3), dtype=np.int64)  # requests that ended rejected or failed, by when they ended

    def add(
        self, t: np.ndarray, latency: np.ndarray, prio: np.ndarray, slo: np.ndarray, tokens: np.ndarray | None = None
    ) -> None:
        if not len(t):
            return
        w = np.minimum((t / self.window_s).astype(np.int64), self.hist.shape[0] - 1)
        b = np.searchsorted(self.EDGES, latency, side="right") - 1
        np.add.at(self.hist, (w, prio.astype(np.int64), b), 1)
        ok = latency <= slo[prio]
        np.add.at(self.within_slo, (w[ok], prio[ok].astype(np.int64)), 1)
        if tokens is not None:
            np.add.at(self.within_slo_tokens, (w[ok], prio[ok].astype(np.int64)), tokens[ok].astype(np.float64))

    def _windows(self, t0: float, t1: float) -> slice:
        return slice(int(t0 // self.window_s), int(np.ceil(t1 / self.window_s - 1e-9)))

    def within_slo_count(self, t0: float, t1: float, prio: int | None = None) -> int:
        """Requests (of one priority, or all) whose first token came within their SLO, sent in the windows covering
        [t0, t1)."""
        w = self.within_slo[self._windows(t0, t1)]
        return int(w.sum() if prio is None else w[:, prio].sum())

    def within_slo_tokens_sum(self, t0: float, t1: float, prio: int | None = None) -> float:
        """Prompt tokens of those requests."""
        w = self.within_slo_tokens[self._windows(t0, t1)]
        return float(w.sum() if prio is None else w[:, prio].sum())

    def add_lost(self, t: float, prio: np.ndarray) -> None:
        w = min(int(t / self.window_s), self.lost.shape[0] - 1)
        self.lost[w] += np.bincount(prio.astype(np.int64), minlength=3)

    def counts(self, prio: int, t0: float, t1: float) -> tuple[int, int]:
        """(served, lost) requests of a priority in the windows covering [t0, t1)."""
        w0, w1 = int(t0 // self.window_s), int(np.ceil(t1 / self.window_s))
        return int(self.hist[w0:w1, prio].sum()), int(self.lost[w0:w1, prio].sum())

    def quantile(self, q: float, prio: int, t0: float, t1: float) -> float:
        w0, w1 = int(t0 // self.window_s), int(np.ceil(t1 / self.window_s))
        h = self.hist[w0:w1, prio].sum(axis=0)
        n = h.sum()
        if n == 0:
            return float("nan")
        c = np.cumsum(h)
        i = int(np.searchsorted(c, q * n))
        lo, hi = self.EDGES[i], self.EDGES[min(i + 1, len(self.EDGES) - 1)]
        return float(np.sqrt(lo * hi) if lo > 0 else hi)
