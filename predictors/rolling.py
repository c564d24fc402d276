"""The predictor's history, kept between ticks: each tick asks the store only for the newest points.

A `RollingWindow` holds one query's answer (one metric, every label set) as a matrix on the tick's step grid, a
row per label set: the values (NaN where the store returned none) and where the store returned a sample at all (a
NaN value is a sample; a missing point is not).  Each `read(store, start, end, step)` returns the window
[start, end]:
- the first read, or one that cannot extend what is held, fetches the whole window (a *full* fetch);
- later reads fetch only [last point held - `overlap` steps, end] (late samples can change the newest points held,
  so they are read again), shift the matrix, write the answer over that range (a label set missing from it has no
  points there) and drop the columns older than `start`; a label set with no point left in the window is evicted.

A full fetch is made again, instead of an incremental one, when the step or the grid changed, the window grew at
its old end, the tick is older than what is held, nothing held overlaps the new window (the loop missed ticks, or
the store was down, for longer than the window), or when an incremental answer holds none of the label sets that
had a point where it starts (Prometheus lost its data, e.g. restarted without its TSDB: the window is read again
whole rather than patched).  A read the store fails (down, refused, a malformed answer: `StoreError`) changes
nothing held; the next one fetches from the newest point held, so the outage's points come in then.  Memory stays
bounded: rows x window columns, for the label sets present in the window.

`Block` is what a read returns: the rows' labels, the grid, the values and the presence mask, which
`infercast.predictors.service.align_block` combines per (pool, version) as `align_many` does for a list of `Series`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from infercast.store import Series, Store

LabelKey = tuple[tuple[str, str], ...]


@dataclass
class Block:
    """One metric's label sets on the grid `t`: `v[i, k]` the value at `t[k]` (NaN: none), `present[i, k]` whether
    the store returned a sample there.  Every row has at least one sample."""

    labels: list[dict[str, str]]
    t: np.ndarray
    v: np.ndarray
    present: np.ndarray
    #: what is worked out from `labels` alone (the rows' (pool, version) grouping, `reading.align_block`), shared by
    #: every Block of the same label sets in the same order: a rolling window's reads while its label sets stay
    #: (None: nothing shared, worked out each time)
    derived: dict | None = field(default=None, compare=False, repr=False)

    def tail(self, k: int) -> Block:
        """The last `k` grid points, without the rows that have no sample in them (as a fetch of that range gives)."""
        if k >= len(self.t):
            return self
        present = self.present[:, len(self.t) - k :]
        rows = np.nonzero(present.any(axis=1))[0]
        if len(rows) == len(self.labels):  # every row: the same label sets, what was derived from them holds
            return Block(self.labels, self.t[-k:], self.v[:, -k:], present, self.derived)
        return Block([self.labels[i] for i in rows.tolist()], self.t[-k:], self.v[rows, -k:], present[rows])

    def series(self) -> list[Series]:
        """The rows as the store's answer (`query_range`) would give them."""
        return [
            Series(dict(lab), self.t[p], self.v[i, p])
            for i, (lab, p) in enumerate(zip(self.labels, self.present, strict=True))
        ]


def empty_block(t: np.ndarray) -> Block:
    return Block([], t, np.zeros((0, len(t))), np.zeros((0, len(t)), dtype=bool))


def block_of(series: list[Series], t: np.ndarray) -> Block:
    """`series` (a store's answer) placed on the grid `t` (each sample at the nearest grid point; outside: dropped)."""
    rows: dict[LabelKey, int] = {}
    labels: list[dict[str, str]] = []
    for s in series:
        key = tuple(sorted(s.labels.items()))
        if key not in rows:
            rows[key] = len(labels)
            labels.append(dict(s.labels))
    v = np.full((len(labels), len(t)), np.nan)
    present = np.zeros((len(labels), len(t)), dtype=bool)
    _scatter(series, [rows[tuple(sorted(s.labels.items()))] for s in series], t, v, present)
    keep = present.any(axis=1)
    if not keep.all():
        idx = np.nonzero(keep)[0]
        return Block([labels[i] for i in idx.tolist()], t, v[idx], present[idx])
    return Block(labels, t, v, present)


def _scatter(series: list[Series], rows: list[int], t: np.ndarray, v: np.ndarray, present: np.ndarray) -> None:
    """Write each series' samples into row `rows[i]` of (v, present) at their grid points (later samples win)."""
    if not series or not len(t):
        return
    step = float(t[1] - t[0]) if len(t) > 1 else 1.0
    lens = np.fromiter((len(s.t) for s in series), dtype=np.int64, count=len(series))
    if not lens.sum():
        return
    r = np.repeat(np.asarray(rows, dtype=np.int64), lens)
    tt = np.concatenate([s.t for s in series])
    vv = np.concatenate([s.v for s in series])
    k = np.rint((tt - t[0]) / step).astype(np.int64)
    ok = (k >= 0) & (k < len(t))
    v[r[ok], k[ok]] = vv[ok]
    present[r[ok], k[ok]] = True


class RollingWindow:
    """One metric's newest window, refreshed by fetching only what is new (see the module docstring)."""

    #: an answer of the label sets held, in the order held, is placed row for row without a key per label set
    #: (off: every answer is matched by key; the tests compare the two)
    fast = True

    def __init__(self, metric: str, matchers: dict[str, str] | None = None, overlap: int = 1) -> None:
        self.metric, self.matchers, self.overlap = metric, matchers, overlap
        self.full_fetches = 0
        self.incremental_fetches = 0
        self._reset()

    def _reset(self) -> None:
        self.t: np.ndarray | None = None  # the grid held
        self.step = 0.0
        self.rows: dict[LabelKey, int] = {}
        self.labels: list[dict[str, str]] = []
        self.v = np.zeros((0, 0))
        self.present = np.zeros((0, 0), dtype=bool)
        # what `Block.derived` holds for the label sets `self.labels` (a new list whenever they change)
        self._derived: dict = {}
        self._derived_for: list | None = None

    def read(self, store: Store, start: float, end: float, step: float) -> Block:
        """The window [start, end] on the grid `start + k*step`.  StoreError when the store cannot answer (down,
        refused, a malformed answer): what was held is kept as it was, and the next read fetches from its newest
        point, which covers the outage (or the whole window, when the outage outlasted it)."""
        n = math.floor((end - start) / step + 1e-9) + 1
        t = start + step * np.arange(n)
        if not self._extends(t, step) or not self._incremental(store, t, step):
            self._full(store, t, step)
        if self._derived_for is not self.labels:  # other label sets (or the first read): derived afresh
            self._derived, self._derived_for = {}, self.labels
        return Block(list(self.labels), t, self.v, self.present, self._derived)

    def _extends(self, t: np.ndarray, step: float) -> bool:
        held = self.t
        if held is None or not len(held) or step != self.step:
            return False
        shift = (t[0] - held[0]) / step
        if abs(shift - round(shift)) > 1e-6:
            return False  # another grid
        # the window must start at or after what is held, end at or after it, and overlap it
        return t[0] >= held[0] - 1e-9 and t[-1] >= held[-1] - 1e-9 and held[-1] >= t[0] - 1e-9

    def _full(self, store: Store, t: np.ndarray, step: float) -> None:
        answer = store.query_range(self.metric, self.matchers, float(t[0]), float(t[-1]), step)
        self.full_fetches += 1
        b = block_of(answer, t)
        self.t, self.step = t, step
        self.labels = b.labels
        self.rows = {tuple(sorted(lab.items())): i for i, lab in enumerate(b.labels)}
        self.v, self.present = b.v, b.present

    def _incremental(self, store: Store, t: np.ndarray, step: float) -> bool:
        """Fetch from the newest point held (less `overlap` steps) to `t[-1]` and fold it in; False: a full fetch is
        needed instead (the answer says Prometheus lost what it held)."""
        held = self.t
        assert held is not None
        a = max(float(t[0]), float(held[-1]) - self.overlap * step)
        answer = store.query_range(self.metric, self.matchers, a, float(t[-1]), step)
        self.incremental_fetches += 1
        drop = round((t[0] - held[0]) / step)  # columns older than the window
        n, rows = len(t), len(self.labels)
        v = np.full((rows, n), np.nan)
        present = np.zeros((rows, n), dtype=bool)
        kept = max(0, len(held) - drop)
        v[:, :kept] = self.v[:, drop : drop + kept]
        present[:, :kept] = self.present[:, drop : drop + kept]
        ka = round((a - t[0]) / step)  # the answer is the whole truth from here on
        had = present[:, ka].copy() if ka < n else np.zeros(rows, dtype=bool)
        v[:, ka:] = np.nan
        present[:, ka:] = False
        index, labels = self.rows, self.labels  # copied before the first new label set: committed at the end
        idx: list[int] | range
        if self.fast and len(answer) == rows and all(s.labels == lab for s, lab in zip(answer, labels, strict=True)):
            # the label sets held, in the order held (a steady fleet, as Prometheus answers it): each its own row,
            # found without building and looking up a sorted key per label set
            idx = range(rows)
        else:
            idx = []
            for s in answer:
                key = tuple(sorted(s.labels.items()))
                i = index.get(key)
                if i is None:
                    if index is self.rows:
                        index, labels = dict(self.rows), list(self.labels)
                    i = index[key] = len(labels)
                    labels.append(dict(s.labels))
                idx.append(i)
        if len(labels) > rows:  # label sets new in this answer
            extra = len(labels) - rows
            v = np.vstack([v, np.full((extra, n), np.nan)])
            present = np.vstack([present, np.zeros((extra, n), dtype=bool)])
            had = np.concatenate([had, np.zeros(extra, dtype=bool)])
        # (every row answered, `idx` is every row: some of them had a point there, nothing to look up)
        if (
            not isinstance(idx, range)
            and had.any()
            and not np.isin(np.nonzero(had)[0], np.asarray(idx, dtype=np.int64)).any()
        ):
            return False  # every label set that had a point where the answer starts is gone from it
        _scatter(answer, idx, t, v, present)
        live = present.any(axis=1)
        if not live.all():  # evict the label sets with no point left in the window
            keep = np.nonzero(live)[0]
            labels = [labels[i] for i in keep.tolist()]
            index = {tuple(sorted(lab.items())): j for j, lab in enumerate(labels)}
            v, present = v[keep], present[keep]
        self.t, self.v, self.present, self.rows, self.labels = t, v, present, index, labels
        return True


class RollingHistory:
    """The loop's `RollingWindow`s, one per metric (and matchers)."""

    def __init__(self, overlap: int = 1) -> None:
        self.overlap = overlap
        self.windows: dict[tuple[str, tuple], RollingWindow] = {}

    def read(
        self, store: Store, metric: str, start: float, end: float, step: float, matchers: dict[str, str] | None = None
    ) -> Block:
        key = (metric, tuple(sorted((matchers or {}).items())))
        w = self.windows.get(key)
        if w is None:
            w = self.windows[key] = RollingWindow(metric, matchers, self.overlap)
        return w.read(store, start, end, step)

    def forget(self, keep: set[str]) -> None:
        """Drop the windows of metrics no longer read (bounded memory when what the loop reads changes)."""
        for key in [k for k in self.windows if k[0] not in keep]:
            del self.windows[key]


__all__ = ["Block", "RollingHistory", "RollingWindow", "block_of", "empty_block"]
