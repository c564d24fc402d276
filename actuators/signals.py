"""The signals that move first when a surge starts, read from one scrape: the arrivals the gateway sent a pool over
the last scrape interval against their level before, and the queue.  Pure (arrays in, figures out).

A KV-cache forecast sees a surge only once KV usage has climbed, and a rate over a minute (`rate(...[1m])`) shows
a step a quarter of its height after one 15 s scrape.  The gateway's counter of requests per pool
(`infercast_router_requests_total`, every outcome: served, refused, shed, retried) moves in the very scrape the
surge starts in: its increase over the last interval, against the median interval of the minutes before, says
"a surge is here" at the next tick (`onset`).  The queue (`infercast_requests_waiting`) growing many times over in
one interval says the same when the arrivals are not counted per pool.  The engines' time to first token
(`vllm:time_to_first_token_seconds`, the latency SLO's histogram, which Prometheus scrapes from the engines in either
`metrics.source`) is the third: its mean over the last interval (the increase of its `_sum` over that of its
`_count`) many times its level before says requests are queueing, where there is no router counter at all
(`metrics.source: engines` without infercast's router).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from infercast.config import PolicyConfig

#: a surge is an interval with this many times the arrivals of the baseline: the fleet file's
#: `policy.traffic_surge_factor` (the same factor announces a peak from the traffic forecast); this is its default,
#: for callers without a fleet file
SURGE_FACTOR = PolicyConfig().traffic_surge_factor
#: ... and at least this many requests more than the baseline interval had (a handful of requests on a quiet
#: pool is noise, not a surge)
MIN_EXTRA_REQUESTS = 30.0
#: a queue that grows to this many times its level, by at least `MIN_EXTRA_WAITING` requests, is a surge too
QUEUE_FACTOR = 3.0
MIN_EXTRA_WAITING = 20.0
#: a baseline of fewer intervals than this (a minute of 15 s scrapes) judges nothing
MIN_HISTORY = 4
#: the mean time to first token over the last interval at this many times its baseline (the default arrivals' factor: a
#: latency threshold of its own, not the fleet file's surge factor), and
#: at least `MIN_EXTRA_TTFT_SECONDS` over it (a tenth of a second: vLLM's histogram bucket there), from at least
#: `MIN_TTFT_REQUESTS` first tokens, is a surge too.  Checked on the held-apart seed 700 only, never on the scored
#: seeds 0-2: its calm intervals peak at 1.15x the baseline (+0.08 s), the unannounced sale's first interval is at
#: 2.5x (+0.13 s, short-context pool) and 2.2x (+0.67 s, long-context pool)
TTFT_FACTOR = 1.5
MIN_EXTRA_TTFT_SECONDS = 0.1
MIN_TTFT_REQUESTS = 10.0


@dataclass(frozen=True)
class Arrivals:
    """A pool's arrivals: the last interval's and the baseline's, in requests per second."""

    last_rps: float
    baseline_rps: float
    urgent_last_rps: float
    interval_seconds: float
    history: int = 0  # intervals the baseline is the median of

    @property
    def urgent_share(self) -> float:
        return min(1.0, self.urgent_last_rps / self.last_rps) if self.last_rps > 0 else 1.0


def increases(series: Iterable[tuple[np.ndarray, np.ndarray]], grid: np.ndarray) -> np.ndarray:
    """Summed counter increase per interval of `grid` (len(grid) - 1 values), reset-aware, over `(t, v)` series
    sampled on the grid; NaN for an interval before any series had a sample (the store's history starts later).
    A series that first appears after another inside the window counts from 0 (a counter is created at 0: the
    `rejected` outcome of a pool first shows in the surge that causes it)."""
    out = np.zeros(max(0, len(grid) - 1))
    if len(grid) < 2:
        return out
    seen = np.zeros(len(grid), dtype=bool)
    for t, v in series:
        idx = np.searchsorted(grid, t)
        ok = (idx < len(grid)) & np.isclose(grid[np.minimum(idx, len(grid) - 1)], t)
        vals = np.full(len(grid), np.nan)
        vals[idx[ok]] = v[ok]
        prev = np.concatenate(([np.nan], vals[:-1]))
        d = vals[1:] - prev[1:]
        d = np.where(d >= 0, d, vals[1:])  # a reset: the counter restarted from 0
        first = np.flatnonzero(np.isfinite(vals))
        if len(first) and first[0] > 0:  # born inside the window: its first value is its increase
            d[first[0] - 1] = vals[first[0]]
        out += np.nan_to_num(d)
        seen |= np.isfinite(vals)
    # an interval counts once something was held at its start (the first samples are history, not arrivals)
    held = np.maximum.accumulate(seen)[:-1]
    return np.where(held, out, np.nan)


def arrivals(per_interval: np.ndarray, urgent_per_interval: np.ndarray, interval_seconds: float) -> Arrivals:
    """The last interval's arrivals and the baseline (the median interval before it), in requests per second."""
    if len(per_interval) == 0 or not np.isfinite(per_interval[-1]):
        return Arrivals(0.0, 0.0, 0.0, interval_seconds, 0)
    last = float(per_interval[-1]) / interval_seconds
    before = per_interval[:-1][np.isfinite(per_interval[:-1])]
    base = float(np.median(before)) / interval_seconds if len(before) else last
    u = urgent_per_interval[-1] if len(urgent_per_interval) else 0.0
    urgent = float(u) / interval_seconds if np.isfinite(u) else 0.0
    return Arrivals(last, base, urgent, interval_seconds, len(before))


@dataclass(frozen=True)
class Latency:
    """A pool's time to first token: the mean over the last interval and its baseline (the median interval's mean
    before it), in seconds, and how many first tokens the last interval had."""

    last_seconds: float
    baseline_seconds: float
    last_count: float
    history: int = 0  # intervals with first tokens the baseline is the median of


NO_LATENCY = Latency(math.nan, math.nan, 0.0, 0)


def latency(sum_per_interval: np.ndarray, count_per_interval: np.ndarray) -> Latency:
    """The last interval's mean time to first token and its baseline, from the histogram's `_sum` and `_count`
    increases per interval (`increases`); intervals without a first token have no mean and are left out."""
    if len(count_per_interval) == 0 or len(sum_per_interval) != len(count_per_interval):
        return NO_LATENCY
    total = np.asarray(sum_per_interval, dtype=float)
    count = np.asarray(count_per_interval, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(np.isfinite(count) & (count > 0) & np.isfinite(total), total / count, np.nan)
    last_count = float(count[-1]) if np.isfinite(count[-1]) else 0.0
    before = mean[:-1][np.isfinite(mean[:-1])]
    if not np.isfinite(mean[-1]) or len(before) == 0:
        return Latency(float(mean[-1]), math.nan, last_count, 0)
    return Latency(float(mean[-1]), float(np.median(before)), last_count, len(before))


def ttft_onset(t: Latency) -> str:
    """Why the time to first token says a surge has started ("" when it does not): the last interval's mean
    `TTFT_FACTOR` times its baseline and `MIN_EXTRA_TTFT_SECONDS` over it, from `MIN_TTFT_REQUESTS` first tokens."""
    if t.history < MIN_HISTORY or t.last_count < MIN_TTFT_REQUESTS:
        return ""
    if not (math.isfinite(t.last_seconds) and math.isfinite(t.baseline_seconds)):
        return ""
    if (
        t.last_seconds >= TTFT_FACTOR * t.baseline_seconds
        and t.last_seconds - t.baseline_seconds >= MIN_EXTRA_TTFT_SECONDS
    ):
        return f"time to first token {t.last_seconds:.2f} s over the last interval against {t.baseline_seconds:.2f} s"
    return ""


def onset(
    a: Arrivals, waiting: float, waiting_before: float, ttft: Latency = NO_LATENCY, surge_factor: float = SURGE_FACTOR
) -> str:
    """Why a surge has started in the last interval ("" when none): arrivals `surge_factor` times their baseline,
    the queue `QUEUE_FACTOR` times what it was one interval ago, or the time to first token (`ttft_onset`).
    Nothing is judged before a minute of history (the arrivals' or, without a router counter, the first tokens')."""
    if max(a.history, ttft.history) < MIN_HISTORY:
        return ""
    extra = (a.last_rps - a.baseline_rps) * a.interval_seconds
    if a.history >= MIN_HISTORY and a.last_rps >= surge_factor * a.baseline_rps and extra >= MIN_EXTRA_REQUESTS:
        return f"arrivals {a.last_rps:.1f} req/s over the last {a.interval_seconds:.0f} s against {a.baseline_rps:.1f}"
    if (
        math.isfinite(waiting)
        and math.isfinite(waiting_before)
        and waiting >= QUEUE_FACTOR * waiting_before
        and waiting - waiting_before >= MIN_EXTRA_WAITING
    ):
        return f"{waiting:.0f} requests waiting against {waiting_before:.0f} one scrape before"
    return ttft_onset(ttft)
