"""The router's arithmetic on cohorts, pure functions of arrays: picking rows, the retries' cohorts per tick, a
prompt's cumulative pool weights, and splitting requests over nodes by room (`share_by_room`) or load
(`water_fill`)."""

from __future__ import annotations

import math

import numpy as np

from infercast.simulator.twin.requests import (
    Requests,
    is_sorted,
    stable_order,
)


def pick(a: np.ndarray | None, idx: np.ndarray | None) -> np.ndarray | None:
    """`a[idx]`, where None stands for every row in order: as `idx`, `a` whole; as `a` (the rows `idx` picks of
    0, 1, 2, ...), `idx`.  So rows of rows compose: `pick(pick(None, i), j)` is `i[j]`."""
    if idx is None:
        return a
    if a is None:
        return idx
    return a[idx]


def retry_cohorts(
    pending: list[tuple[Requests, np.ndarray, np.ndarray]], tick_seconds: float
) -> list[tuple[int, Requests]]:
    """Failures' retries as (tick, cohort) in the order `route` reads them: given each failure's (requests, the rows
    that retry, when each is sent again), each tick's cohorts hold, failure after failure, that failure's retries
    in the tick sorted stably by when -- what cutting each failure's sorted retries at the ticks gave, one slice per
    tick instead of one per failure and tick.  Each retry is sent at `when` as its next attempt."""
    src, rows, when = retry_rows(pending)
    ticks = np.floor(when / tick_seconds + 1e-9).astype(np.int64)
    if not is_sorted(ticks):  # several failures: grouped by tick, keeping the order within each
        by_tick = np.argsort(ticks, kind="stable")
        rows, when, ticks = rows[by_tick], when[by_tick], ticks[by_tick]
    r = src.take(rows)
    r.att_t = when
    r.attempt = (r.attempt + 1).astype(np.int8)
    starts = [0, *((ticks[1:] != ticks[:-1]).nonzero()[0] + 1).tolist()]
    if len(starts) == 1:  # one tick: the buffer whole
        return [(int(ticks[0]), r)]
    ends = [*starts[1:], len(r)]
    return [(k, r.take(slice(a, b))) for a, b, k in zip(starts, ends, ticks[starts].tolist(), strict=True)]


def retry_rows(pending: list[tuple[Requests, np.ndarray, np.ndarray]]) -> tuple[Requests, np.ndarray, np.ndarray]:
    """Failures' retries as one gather: from each failure's (requests, rows that retry, when each is sent again),
    the requests of all of them, the rows that retry (indices into those) and when -- each failure's rows sorted
    stably by when, the failures in their order."""
    if len(pending) == 1:
        reqs, idx, when = pending[0]
        order = stable_order(when)
        return reqs, idx[order], when[order]
    rows, whens, offset = [], [], 0
    for reqs, idx, when in pending:
        order = stable_order(when)
        rows.append(idx[order] + offset)
        whens.append(when[order])
        offset += len(reqs)
    return Requests.concat([p[0] for p in pending]), np.concatenate(rows), np.concatenate(whens)


def pool_row(prompt: int, lo: np.ndarray, hi: np.ndarray, share: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, bool]:
    """The cumulative pool weights a prompt is drawn against (and whether they are all finite): the pools whose
    context range [lo, hi] it fits, by share; none in rotation: by bare weight; none fits: any pool."""
    fits = (prompt >= lo) & (prompt <= hi)
    row = fits * share
    if row.sum() <= 0:  # no pool in rotation fits: bare weights, then any pool
        row = fits * w
        if row.sum() <= 0:
            row = w if w.sum() > 0 else np.ones(len(w))
    c = np.cumsum(row)
    return c, bool(np.isfinite(c).all())


def share_by_room(room: np.ndarray, n: int) -> np.ndarray:
    """Split n requests over nodes in proportion to each one's room (largest remainders first), none beyond it;
    n must not exceed the total room."""
    room = np.asarray(room, dtype=np.int64)
    total = int(room.sum())
    if n > total:
        raise ValueError(f"{n} requests do not fit in a room of {total}")
    if n == 0:
        return np.zeros(len(room), dtype=np.int64)
    exact = room * (n / total)
    counts = np.floor(exact).astype(np.int64)
    # n <= total: a node's exact share is below its room unless n == total, when it equals it with no remainder,
    # so one more for the largest remainders never takes a node past its room
    rest = n - int(counts.sum())
    if rest > 0:
        counts[np.argsort(-(exact - counts), kind="stable")[:rest]] += 1
    return counts


def water_fill(loads: np.ndarray, n: int) -> np.ndarray:
    """Split n requests over nodes so that the least-loaded get the most: final loads as level as possible."""
    k = len(loads)
    if k == 0 or n == 0:
        return np.zeros(k, dtype=np.int64)
    if k <= _FEW_NODES:
        return _water_fill_few(loads.tolist(), n)
    order = loads.argsort(kind="stable")
    s = loads[order]
    csum = s.cumsum()
    # find the level L such that sum(max(0, L - load)) = n
    levels = (n + csum) / np.arange(1, k + 1)
    ok = levels >= s
    m = int(ok.nonzero()[0][-1]) + 1
    level = levels[m - 1]
    give = np.zeros(k)
    give[:m] = level - s[:m]
    counts = np.floor(give).astype(np.int64)
    rest = n - int(counts.sum())
    if rest > 0:
        frac = give - counts
        top = np.argsort(-frac, kind="stable")[:rest]
        counts[top] += 1
    out = np.zeros(k, dtype=np.int64)
    out[order] = counts
    return out


_FEW_NODES = 16  # `water_fill` over at most this many nodes goes through `_water_fill_few`


def _water_fill_few(loads: list[float], n: int) -> np.ndarray:
    """`water_fill` in plain Python numbers for a handful of nodes: the same stable orders (Python's sort is stable,
    as `kind="stable"` is), the running sum added in the same order and the same float operations, so the same
    counts."""
    k = len(loads)
    order = sorted(range(k), key=loads.__getitem__)
    s = [loads[i] for i in order]
    m, level, acc = 0, 0.0, 0.0
    for i, v in enumerate(s):
        acc = v if i == 0 else acc + v  # `cumsum`
        lv = (n + acc) / (i + 1)  # `levels`
        if lv >= v:  # the last level at or above its load
            m, level = i + 1, lv
    give = [level - v for v in s[:m]] + [0.0] * (k - m)
    counts = [math.floor(g) for g in give]
    rest = n - sum(counts)
    if rest > 0:
        frac = [g - c for g, c in zip(give, counts, strict=True)]
        for i in sorted(range(k), key=lambda i: -frac[i])[:rest]:
            counts[i] += 1
    out = [0] * k
    for j, i in enumerate(order):
        out[i] = counts[j]
    return np.array(out, dtype=np.int64)
