"""Max-min fair shares of a whole number of units: the twin's gateway splits a token bucket's tokens this way, and
the actuator's policy the standby nodes of a reservoir between the pools that draw on it."""

from __future__ import annotations

import numpy as np


def max_min_share(want: np.ndarray | list[int], n: int) -> np.ndarray:
    """Split n between claimants wanting `want` each, max-min fair: who wants less than an equal share gets all it
    wants, the rest share what is left equally (integers; never more than wanted)."""
    want = np.asarray(want, dtype=np.int64)
    give = np.zeros(len(want), dtype=np.int64)
    left, open_ = int(n), np.flatnonzero(want > 0)
    while left > 0 and len(open_):
        share = max(1, left // len(open_))
        add = np.minimum(want[open_] - give[open_], share)
        if add.sum() > left:  # the last units: one each, in order
            add = np.minimum(add, 1)
            add[np.cumsum(add) > left] = 0
        give[open_] += add
        left -= int(add.sum())
        open_ = open_[give[open_] < want[open_]]
    return give


def share_by_value(want: np.ndarray | list[int], n: int, value: np.ndarray | list[float]) -> np.ndarray:
    """Split n between claimants by what a unit does for each (`value`, higher first): when n covers every want,
    each gets what it wants; when not, the most valuable claimant's whole want first, then the next.  Claimants of
    equal value share what reaches them max-min fairly.  (The policy's and the `scheduled` arm's split of the
    standby nodes, by the requests a node serves in each pool: `actuators/policy.py`.)"""
    want = np.asarray(want, dtype=np.int64)
    value = np.asarray(value, dtype=np.float64)
    give = np.zeros(len(want), dtype=np.int64)
    left = max(0, int(n))
    for v in sorted(set(value.tolist()), reverse=True):
        tier = np.flatnonzero(value == v)
        give[tier] = max_min_share(want[tier], left)
        left -= int(give[tier].sum())
    return give
