"""What a tick reads: the store's series, through the rolling history, placed on the tick's grid, one row per
(pool, version), combined over a pool's instances as the series asks (`mean`, `max`, `sum` of gauges, or `rate`:
the per-second increase of counters, reset-aware, `counter_rate`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from infercast.predictors.base import History
from infercast.predictors.rolling import Block, RollingHistory
from infercast.store import Series, Store, StoreError

Group = tuple[str, str]  # (pool, version)


class TickReads:
    """Each metric's window for one tick, read through the rolling history once (its longest span, `spans`), the
    store's error kept in its place when it did not answer."""

    def __init__(
        self, store: Store, rolling: RollingHistory, t: np.ndarray, spans: dict[str, int], step: float
    ) -> None:
        self.store, self.rolling, self.t, self.spans, self.step = store, rolling, t, spans, step
        self.blocks: dict[str, Block | StoreError] = {}

    def __contains__(self, metric: str) -> bool:
        return metric in self.blocks

    def read(self, metric: str) -> Block | StoreError:
        if metric not in self.blocks:
            n, w = len(self.t), self.spans[metric]
            try:
                self.blocks[metric] = self.rolling.read(
                    self.store, metric, float(self.t[n - w]), float(self.t[-1]), self.step
                )
            except StoreError as e:
                self.blocks[metric] = e
        return self.blocks[metric]


@dataclass
class Aligned:
    """One (pool, version)'s series on the tick's grid; `raw_nonfinite` counts NaN/Inf values the store returned."""

    y: np.ndarray
    raw_points: int = 0
    raw_nonfinite: int = 0
    last_raw_t: float = -math.inf  # newest time the store returned anything for this group, NaN included


@dataclass
class AlignedMatrix:
    """Every (pool, version) of one metric on the tick's grid, one row each, rows in sorted group order."""

    groups: list[Group]
    y: np.ndarray  # (groups, n)
    raw_points: np.ndarray  # (groups,) samples the store returned on the grid
    raw_nonfinite: np.ndarray  # (groups,) of which NaN/Inf
    last_raw_t: np.ndarray  # (groups,) newest time the store returned anything, NaN included; -inf: never
    index: dict[Group, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.index:
            self.index = {g: i for i, g in enumerate(self.groups)}

    def row(self, i: int) -> Aligned:
        return Aligned(self.y[i], int(self.raw_points[i]), int(self.raw_nonfinite[i]), float(self.last_raw_t[i]))

    def as_dict(self) -> dict[Group, Aligned]:
        return {g: self.row(i) for i, g in enumerate(self.groups)}


#: Series placed on the grid at a time by `align_many`'s general path (memory, not speed, sets it).
ALIGN_CHUNK = 4096


def align_matrix(series: list[Series], g0: float, step: float, n: int, how: str) -> AlignedMatrix:
    """Series -> one row per (pool, version) on the grid `g0 + k*step`, k < n, built in numpy for the whole fleet.

    `how`: `mean`, `max` or `sum` of gauges over instances, or `rate` (per-second increase of counters,
    reset-aware, summed over label sets).  NaN where no instance has a value.
    """
    return align_many(series, g0, step, n, (how,))[how]


def align_many(series: list[Series], g0: float, step: float, n: int, hows: tuple[str, ...]) -> dict[str, AlignedMatrix]:
    """`align_matrix` for several ways of combining the same series, placing them on the grid once."""
    index: dict[Group, int] = {}
    gid: list[int] = []
    ts, vs = [], []
    for s in series:
        pool = s.labels.get("pool")
        if not pool:
            continue
        gid.append(index.setdefault((pool, s.labels.get("version", "")), len(index)))
        ts.append(np.asarray(s.t, dtype=np.float64))
        vs.append(np.asarray(s.v, dtype=np.float64))
    if not index:
        empty = np.zeros(0, dtype=np.int64)
        return {how: AlignedMatrix([], np.full((0, n), np.nan), empty, empty, np.zeros(0)) for how in hows}
    n_series = len(ts)
    placed: np.ndarray | None = None  # allocated below unless every series is on the grid already
    points = np.zeros(n_series)
    nonfinite = np.zeros(n_series)
    last_s = np.full(n_series, -math.inf)
    # Fast path: a series with a sample at every grid point (what Prometheus' query_range returns for a healthy
    # series) is its row as it is; checked, not assumed.  The others are placed sample by sample.
    cand = np.fromiter((len(x) == n for x in ts), dtype=bool, count=n_series)
    rest = np.ones(n_series, dtype=bool)
    if cand.any():
        ci = np.nonzero(cand)[0]
        exact = np.zeros(len(ci), dtype=bool)
        grid = np.arange(n)
        for a in range(0, len(ci), ALIGN_CHUNK):
            part = ci[a : a + ALIGN_CHUNK]
            tm = np.concatenate([ts[i] for i in part]).reshape(len(part), n)  # (vstack is slower on many rows)
            exact[a : a + ALIGN_CHUNK] = (np.rint((tm - g0) / step) == grid).all(axis=1)
            last_s[part] = tm.max(axis=1)
        last_s[ci[~exact]] = -math.inf  # placed below, sample by sample, counting only the grid's
        ci = ci[exact]
        vm = np.concatenate([vs[i] for i in ci]).reshape(len(ci), n) if len(ci) else np.zeros((0, n))
        if len(ci) == n_series:
            placed = vm  # ci is every series, in order
        else:
            placed = np.full((n_series, n), np.nan)
            placed[ci] = vm
        points[ci] = n
        nonfinite[ci] = (~np.isfinite(vm)).sum(axis=1)
        rest[ci] = False
    if placed is None:
        placed = np.full((n_series, n), np.nan)
    rest_rows = np.nonzero(rest)[0]
    for a in range(0, len(rest_rows), ALIGN_CHUNK):  # in chunks: the temporaries stay small on a large fleet
        ri = rest_rows[a : a + ALIGN_CHUNK]
        lens = np.fromiter((len(ts[i]) for i in ri), dtype=np.int64, count=len(ri))
        sid = np.repeat(ri, lens)
        tt = np.concatenate([ts[i] for i in ri])
        vv = np.concatenate([vs[i] for i in ri])
        k = np.rint((tt - g0) / step).astype(np.int64)
        ok = (k >= 0) & (k < n)
        placed[sid[ok], k[ok]] = vv[ok]
        points += np.bincount(sid[ok], minlength=n_series)
        nonfinite += np.bincount(sid[ok], weights=~np.isfinite(vv[ok]), minlength=n_series)
        np.maximum.at(last_s, sid[ok], tt[ok])
    placed[~np.isfinite(placed)] = np.nan
    return _combined(_grouping(index, gid), placed, points, nonfinite, last_s, step, hows)


def align_block(block: Block, hows: tuple[str, ...]) -> dict[str, AlignedMatrix]:
    """`align_many` for a `Block` (the rolling history's matrix, already on the grid): the same matrices.  The rows'
    grouping depends on the labels alone: worked out once per label sets and kept in `block.derived` when the block
    shares one (a rolling window's reads, while its label sets stay the same)."""
    t = block.t
    n = len(t)
    cached = block.derived.get("grouping") if block.derived is not None else None
    if cached is None:
        index: dict[Group, int] = {}
        gid: list[int] = []
        rows: list[int] = []
        for i, lab in enumerate(block.labels):
            pool = lab.get("pool")
            if pool:
                gid.append(index.setdefault((pool, lab.get("version", "")), len(index)))
                rows.append(i)
        cached = (_grouping(index, gid) if index else None, rows)
        if block.derived is not None:
            block.derived["grouping"] = cached
    grouping, rows = cached
    if grouping is None:
        empty = np.zeros(0, dtype=np.int64)
        return {how: AlignedMatrix([], np.full((0, n), np.nan), empty, empty, np.zeros(0)) for how in hows}
    every = len(rows) == len(block.labels)
    v = block.v if every else block.v[rows]
    present = block.present if every else block.present[rows]
    fin = np.isfinite(v)
    placed = np.where(fin, v, np.nan)  # a copy: the block is the rolling history's, read-only here
    points = present.sum(axis=1).astype(np.float64)
    nonfinite = (present & ~fin).sum(axis=1).astype(np.float64)
    anyp = present.any(axis=1)
    last_s = np.where(anyp, t[n - 1 - np.argmax(present[:, ::-1], axis=1)], -math.inf)
    return _combined(grouping, placed, points, nonfinite, last_s, float(t[1] - t[0]) if n > 1 else 1.0, hows)


@dataclass(frozen=True)
class _Grouping:
    """How the placed series (a row each, series `i` in group `gid[i]`) combine into one row per (pool, version)."""

    groups: list[Group]  # sorted
    index: dict[Group, int]  # group -> its row
    sgroup: np.ndarray  # each series' group row
    order: np.ndarray  # the series, each group's together, in the store's order
    firsts: np.ndarray  # where each group starts in `order`
    single: bool  # one series per group
    in_order: bool  # `order` is the identity


def _grouping(index: dict[Group, int], gid: list[int]) -> _Grouping:
    groups = sorted(index)
    g = len(groups)
    rank = np.empty(g, dtype=np.int64)
    rank[[index[k] for k in groups]] = np.arange(g)
    sgroup = rank[np.asarray(gid)]  # each series' row
    order = np.argsort(sgroup, kind="stable")  # each group's series together, in the store's order
    firsts = np.searchsorted(sgroup[order], np.arange(g))
    return _Grouping(
        groups,
        {k: i for i, k in enumerate(groups)},
        sgroup,
        order,
        firsts,
        len(gid) == g,
        bool((order == np.arange(len(order))).all()),
    )


def _combined(
    gr: _Grouping,
    placed: np.ndarray,
    points: np.ndarray,
    nonfinite: np.ndarray,
    last_s: np.ndarray,
    step: float,
    hows: tuple[str, ...],
) -> dict[str, AlignedMatrix]:
    g = len(gr.groups)
    sgroup = gr.sgroup
    raw_points = np.bincount(sgroup, weights=points, minlength=g).astype(np.int64)
    raw_nonfinite = np.bincount(sgroup, weights=nonfinite, minlength=g).astype(np.int64)
    last = np.full(g, -math.inf)
    np.maximum.at(last, sgroup, last_s)
    out = {}
    for how in hows:
        m = counter_rate(placed, step) if how == "rate" else placed
        m = m if gr.in_order else m[gr.order]
        if gr.single:
            y = m  # shared by the ways of combining (mean and max of one series are the series): read-only
            y.flags.writeable = False
        else:
            fin = np.isfinite(m)
            count = np.add.reduceat(fin.astype(np.int64), gr.firsts, axis=0)
            if how == "max":
                y = np.fmax.reduceat(m, gr.firsts, axis=0)
            else:
                y = np.add.reduceat(np.where(fin, m, 0.0), gr.firsts, axis=0)
                if how == "mean":
                    with np.errstate(invalid="ignore", divide="ignore"):
                        y = y / count
            y = np.where(count > 0, y, np.nan)
        # the groups and their index are shared (read-only) by every matrix of this grouping
        out[how] = AlignedMatrix(gr.groups, y, raw_points, raw_nonfinite, last, gr.index)
    return out


def align(series: list[Series], g0: float, step: float, n: int, how: str) -> dict[Group, Aligned]:
    """`align_matrix` as one `Aligned` per (pool, version)."""
    return align_matrix(series, g0, step, n, how).as_dict()


RATE_WINDOW_STEPS = 4


def counter_rate(v: np.ndarray, step: float, window: int = RATE_WINDOW_STEPS) -> np.ndarray:
    """Per-second rate of a counter sampled on a grid (the last axis; rows are separate counters), like PromQL's
    `rate(x[window*step])`.

    Increases between neighbouring grid points are reset-aware (a decrease means the counter restarted from 0, so
    the increase is the new value), then averaged over the last `window` intervals that have both ends, so a
    scrape that lands in the next grid interval (a 0 then a double increase) does not read as a traffic dip.
    """
    v = np.asarray(v, dtype=np.float64)
    n = v.shape[-1]
    inc = np.full(v.shape, np.nan)
    d = v[..., 1:] - v[..., :-1]
    inc[..., 1:] = np.where(d < 0, v[..., 1:], d)
    ok = np.isfinite(inc)
    zeros = np.zeros((*v.shape[:-1], 1))
    csum = np.concatenate([zeros, np.cumsum(np.where(ok, inc, 0.0), axis=-1)], axis=-1)
    cnt = np.concatenate([zeros, np.cumsum(ok, axis=-1)], axis=-1)
    lo = np.maximum(np.arange(n) + 1 - window, 0)
    total = csum[..., 1:] - csum[..., lo]
    k = cnt[..., 1:] - cnt[..., lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        rate = np.where(k > 0, total / (k * step), np.nan)
    rate[~ok] = np.nan  # no rate where the newest interval itself is missing
    return rate


def series_history(
    series: str,
    kind: str,
    group: Group,
    t: np.ndarray,
    y: np.ndarray,
    start: int,
    covs: dict[str, AlignedMatrix] | None,
) -> History:
    """One series' history as its model reads it: from `start`, with the LSTM's covariates for KV."""
    feats = {}
    if kind == "kv":
        feats = {k: m.y[m.index[group]][start:] for k, m in (covs or {}).items() if group in m.index}
    return History(t[start:], y[start:], feats, f"{series}/{group[0]}/{group[1]}")
