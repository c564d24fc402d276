"""The stateful stage between a collector's pure `parse` and the exposition: what needs the previous scrapes.

One `Windows` per target turns the internal samples a parser emits into catalog samples:
- prefix-cache hit ratio = increase of hits / increase of queries over the last `window_seconds` (absent until
  two scrapes span some queries);
- PCIe bytes: dcgm-exporter and NVML give a rate (bytes/s gauge); it is integrated (trapezoid rule, rate x elapsed
  seconds) into the catalog counter, which starts at 0 on the exporter's first scrape of that GPU;
- XID errors: dcgm-exporter gives the *last* XID as a gauge; each change to a non-zero code (and a non-zero code at
  the first scrape) adds one to `infercast_gpu_xid_errors_total{xid=code}`.  Two XIDs of the same code between
  scrapes count once: it is a lower bound.
It also adds, for every catalog counter, an internal `_rate:<name>` sample (increase per second over the window)
that the derived scores read.

Counter resets (an engine restarted) are not errors: the window restarts from the new value, so no ratio or rate
ever goes negative.  Time is passed in (`now`), never read here.
"""

from __future__ import annotations

from collections import deque

from infercast.catalog import GPU_PCIE_BYTES_TOTAL, GPU_XID_ERRORS_TOTAL, KV_CACHE_HIT_RATIO
from infercast.exporters.base import HIT_HITS, HIT_QUERIES, PCIE_RATE, XID_LAST, Sample

RATE_PREFIX = "_rate:"

Key = tuple[tuple[str, str], ...]


def _key(labels: dict[str, str]) -> Key:
    return tuple(sorted(labels.items()))


class CounterWindow:
    """(time, value) points of one counter over a window; increase() restarts after a reset."""

    __slots__ = ("points",)

    def __init__(self) -> None:
        self.points: deque[tuple[float, tuple[float, ...]]] = deque()

    def add(self, now: float, values: tuple[float, ...], window: float) -> bool:
        """Add a point; True when it shows a reset (a counter went down, or time went backwards)."""
        reset = False
        if self.points:
            last_t, last_v = self.points[-1]
            if now < last_t or any(v < lv for v, lv in zip(values, last_v, strict=True)):
                self.points.clear()  # start again from the new value
                reset = True
        self.points.append((now, values))
        while len(self.points) > 2 and self.points[1][0] <= now - window:
            self.points.popleft()
        return reset

    def increase(self) -> tuple[float, tuple[float, ...]] | None:
        """(elapsed seconds, increase of each value) between the oldest and newest point, or None."""
        if len(self.points) < 2:
            return None
        (t0, v0), (t1, v1) = self.points[0], self.points[-1]
        if t1 <= t0:
            return None
        return t1 - t0, tuple(b - a for a, b in zip(v0, v1, strict=True))


class Windows:
    """Per-target state for windowed ratios, integrated counters and change counts."""

    def __init__(self, window_seconds: float, forget_seconds: float | None = None) -> None:
        self.window = window_seconds
        self.forget = forget_seconds if forget_seconds is not None else max(window_seconds, 60.0) * 2
        self._counters: dict[tuple[str, Key], CounterWindow] = {}
        self._seen: dict[tuple[str, Key], float] = {}
        self._pcie: dict[Key, tuple[float, float, float]] = {}  # key -> (time, rate, total bytes)
        self._xid_last: dict[Key, float] = {}
        self._xid_counts: dict[Key, dict[str, int]] = {}  # GPU key -> {xid code: count}
        #: counter resets seen so far (the exporter logs when this grows: an engine restarted)
        self.resets = 0

    def _window(self, name: str, key: Key, now: float, values: tuple[float, ...]):
        w = self._counters.get((name, key))
        if w is None:
            w = self._counters[(name, key)] = CounterWindow()
        if w.add(now, values, self.window):
            self.resets += 1
        self._seen[(name, key)] = now
        return w.increase()

    def apply(self, samples: list[Sample], now: float) -> list[Sample]:
        out: list[Sample] = []
        hit_q: dict[Key, tuple[dict[str, str], float]] = {}
        hit_h: dict[Key, float] = {}
        for s in samples:
            if s.name == HIT_QUERIES:
                hit_q[_key(s.labels)] = (s.labels, s.value)
            elif s.name == HIT_HITS:
                hit_h[_key(s.labels)] = s.value
            elif s.name == PCIE_RATE:
                out.append(self._integrate(s, now))
            elif s.name == XID_LAST:
                out.extend(self._xid(s))
            else:
                out.append(s)
                if s.name.endswith("_total"):
                    inc = self._window(s.name, _key(s.labels), now, (s.value,))
                    if inc is not None:
                        out.append(Sample(RATE_PREFIX + s.name, s.labels, inc[1][0] / inc[0]))
        for key, (labels, queries) in hit_q.items():
            if key not in hit_h:
                continue
            inc = self._window(KV_CACHE_HIT_RATIO, key, now, (queries, hit_h[key]))
            if inc is not None and inc[1][0] > 0:
                out.append(Sample(KV_CACHE_HIT_RATIO, labels, min(1.0, inc[1][1] / inc[1][0])))
        self._expire(now)
        return out

    def _integrate(self, s: Sample, now: float) -> Sample:
        key = _key(s.labels)
        prev = self._pcie.get(key)
        total = 0.0
        if prev is not None and now > prev[0]:
            total = prev[2] + (prev[1] + s.value) / 2.0 * (now - prev[0])
        elif prev is not None:
            total = prev[2]
        self._pcie[key] = (now, s.value, total)
        self._seen[(GPU_PCIE_BYTES_TOTAL, key)] = now
        return Sample(GPU_PCIE_BYTES_TOTAL, s.labels, total)

    def _xid(self, s: Sample) -> list[Sample]:
        key = _key(s.labels)
        code = float(s.value)
        last = self._xid_last.get(key)
        counts = self._xid_counts.setdefault(key, {})
        if code != 0 and code != last:
            c = str(int(code)) if code.is_integer() else str(code)
            counts[c] = counts.get(c, 0) + 1
        self._xid_last[key] = code
        return [Sample(GPU_XID_ERRORS_TOTAL, {**s.labels, "xid": c}, float(n)) for c, n in sorted(counts.items())]

    def _expire(self, now: float) -> None:
        old = [k for k, t in self._seen.items() if t < now - self.forget]
        for k in old:
            del self._seen[k]
            self._counters.pop(k, None)
            if k[0] == GPU_PCIE_BYTES_TOTAL:
                self._pcie.pop(k[1], None)
