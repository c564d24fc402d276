"""Weighted dominant-resource fairness with floors and caps (seed 004's DRF 多租户公平调度): how the gateway splits a
pool's room between tenants that want more than it, when `protections.drf_tenants` is set.

Each tenant's request costs `cost` units of the room in its dominant resource (a batch slot, or the KV of its
prompt when its prompts are longer than the pool's mean: `Router._share`).  A tenant first gets its floor
(`min_quota` of the room, or what it wants if less); the rest is filled so that the dominant shares divided by the
weights are as level as possible (progressive filling), never past a tenant's cap (`max_quota` of the room) nor
past what it wants.  Room no tenant may take (every tenant below the cap has all it wants) stays unused: the caps
are quotas, not hints.
"""

from __future__ import annotations

import numpy as np


def drf_share(
    want: np.ndarray,
    room: int,
    cost: np.ndarray,
    weight: np.ndarray,
    floor: np.ndarray,
    cap: np.ndarray,
) -> np.ndarray:
    """Requests per tenant (integers, never more than wanted, total cost within `room`)."""
    want = np.asarray(want, dtype=np.int64)
    cost = np.maximum(np.asarray(cost, dtype=np.float64), 1e-9)
    weight = np.asarray(weight, dtype=np.float64)
    n = len(want)
    give = np.zeros(n, dtype=np.int64)
    if room <= 0 or n == 0:
        return give
    top = np.minimum(want, np.floor(np.asarray(cap, dtype=np.float64) * room / cost + 1e-9).astype(np.int64))
    left = float(room)
    for i in range(n):  # floors first, in the order given (they only exceed the room when misconfigured)
        k = min(int(top[i]), int(np.floor(float(floor[i]) * room / cost[i] + 1e-9)), int(left // cost[i]))
        give[i] = max(0, k)
        left -= give[i] * cost[i]

    def at(level: float) -> np.ndarray:
        # requests each tenant holds when its dominant share / weight reaches `level` (never below its floor)
        return np.clip(np.floor(level * weight * room / cost + 1e-9).astype(np.int64), give, top)

    lo, hi = 0.0, float(np.max(top * cost / (weight * room))) + 1.0
    for _ in range(60):  # the highest level whose allocation fits in the room
        mid = (lo + hi) / 2.0
        if float((at(mid) * cost).sum()) <= room + 1e-9:
            lo = mid
        else:
            hi = mid
    give = at(lo)
    left = room - float((give * cost).sum())
    # rounding leaves a little room: one more each to the lowest weighted dominant shares while it fits
    while True:
        open_ = ((give < top) & (cost <= left + 1e-9)).nonzero()[0]
        if not len(open_):
            break
        i = open_[np.argmin(give[open_] * cost[open_] / weight[open_], axis=0)]
        give[i] += 1
        left -= cost[i]
    return give
