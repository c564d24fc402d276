"""Harm: when a replay's requests are hurt, and how well a page warns of it.  Pure: arrays in, episodes and scores out.

The KV line at 0.75 is what the actuator acts on; a page is for harm (issue 37).  A sample at time t_i (covering
(t_{i-1}, t_i]) is *harmful* when any of these holds:

- **KV exhausted**: some pool had a block-allocation failure or a preemption in the interval (the twin counts a
  preemption as an allocation failure too) while that pool's fullest instance was at or over `kv_full` (0.9) at
  t_i or t_{i-1}.  The KV condition keeps out the failures of one huge prompt waiting for blocks on a cache that is
  mostly free: that request waits, but the fleet is not out of KV.
- **OOM**: a node crashed for lack of GPU memory in the interval.
- **urgent SLO missed**: of the urgent tier's requests sent in the `urgent_window_s` (30 s) up to t_i, more than
  `urgent_miss_share` (5%) missed their time-to-first-token SLO (served late, or lost: rejected or failed), and at
  least `urgent_min_misses` (2) did, so one late request in a trickle of ten is not an incident.  Misses that the
  request's own length makes certain are not harm the fleet did: a prompt whose unloaded prefill alone takes longer
  than the SLO (over ~33k tokens at the seed's 1 s urgent SLO; Mooncake's p99 is 85k) misses on an idle fleet, and
  counting those would mark a long-context trace as harmed all the time.  So the misses judged are those over the
  expected number of such requests in the window (`structural`, computed by the replay from the trace).

An *episode* is a maximal run of harmful samples, from the first's time to the last's; episodes closer than
`resolve_s` (300 s, Alertmanager's default `resolve_timeout`: a page for the first would not have resolved before
the second) merge into one.

Scores of a page (a firing flag per evaluation, e.g. the deployed alert's `AlarmPolicy.run` on a model's band):

- a *page* is a maximal run of consecutive firing evaluations (onset = its first, end = its last);
- an episode starting at s is *paged ahead* when the page fires at some evaluation in [s - `window_s`, s -
  `lead_min_s`] (10 minutes to 60 s before the harm); its *lead* is s minus the onset of the earliest such page,
  capped at `window_s` (a page that went out more than ten minutes before is not a warning of this harm; it counts
  as paged, since it was still firing, and its own first ten minutes decide whether it was a false page);
- `recall` = episodes paged ahead / episodes scored; an episode is scored when the evaluations started at least
  `lead_min_s` before it and had not ended by then (none could page it otherwise); `median_lead_seconds` is over the
  paged ones;
- a *false page* is a page with no harm from its onset to `window_s` after its end (a page with no harm within 10
  minutes); `false_pages_per_day` = false pages / days of evaluations;
- `paged_fraction` = the share of evaluations with the page firing (time paged per day = 24 h x it).

A page that is always on reads recall 1 (on a slice with harm) and `paged_fraction` 1; one that never pages reads
recall 0: the four numbers are read together.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class HarmRule:
    """What counts as harm, and how harmful samples join into episodes (see the module docstring)."""

    kv_full: float = 0.9
    urgent_window_s: float = 30.0
    urgent_miss_share: float = 0.05
    urgent_min_misses: int = 2
    resolve_s: float = 300.0


@dataclass(frozen=True)
class PageRule:
    """How a page is judged against harm episodes (see the module docstring)."""

    lead_min_s: float = 60.0
    window_s: float = 600.0


def _deltas(total: np.ndarray) -> np.ndarray:
    """Per-sample increments of a cumulative counter (the first sample's own value counts as its increment)."""
    total = np.nan_to_num(np.asarray(total, float))
    return np.diff(total, prepend=0.0)


def kv_harm(kv_max: np.ndarray, alloc_failures_total: np.ndarray, kv_full: float) -> np.ndarray:
    """Samples of one pool where allocation failures (or preemptions) happened with the KV cache at or over `kv_full`
    at the sample or the one before."""
    kv = np.nan_to_num(np.asarray(kv_max, float), nan=0.0)
    full = kv >= kv_full
    full_prev = np.concatenate([[False], full[:-1]]) if len(full) else full
    return (_deltas(alloc_failures_total) > 0) & (full | full_prev)


def urgent_harm(
    sent: np.ndarray, missed: np.ndarray, rule: HarmRule, structural: np.ndarray | None = None
) -> np.ndarray:
    """Samples whose trailing window had more than `urgent_miss_share` of urgent requests miss their SLO (and at least
    `urgent_min_misses` of them); `sent`, `missed` are the counts over each sample's trailing window, `structural`
    the misses expected there from the requests' own lengths (subtracted first)."""
    sent = np.nan_to_num(np.asarray(sent, float))
    missed = np.nan_to_num(np.asarray(missed, float))
    if structural is not None:
        missed = np.maximum(missed - np.nan_to_num(np.asarray(structural, float)), 0.0)
    return (missed >= rule.urgent_min_misses) & (missed > rule.urgent_miss_share * sent)


def episodes(t: np.ndarray, flags: np.ndarray, merge_s: float) -> list[tuple[float, float]]:
    """(start, end) of each harm episode: maximal runs of True `flags` over samples at times `t` (ascending), from the
    first flagged sample's time to the last's, with runs whose gap (next start - previous end) is under `merge_s`
    merged."""
    t = np.asarray(t, float)
    flags = np.asarray(flags, bool)
    if len(t) != len(flags):
        raise ValueError(f"{len(t)} times but {len(flags)} flags")
    out: list[tuple[float, float]] = []
    prev = False
    for ti, f in zip(t, flags, strict=True):
        if f:
            if out and (prev or ti - out[-1][1] < merge_s):
                out[-1] = (out[-1][0], float(ti))
            else:
                out.append((float(ti), float(ti)))
        prev = bool(f)
    return out


def pages(t: np.ndarray, firing: np.ndarray, max_gap: float) -> list[tuple[float, float]]:
    """(onset, end) of each page: maximal runs of consecutive firing evaluations (at most `max_gap` apart)."""
    out: list[tuple[float, float]] = []
    last = -math.inf
    for ti, f in zip(np.asarray(t, float), np.asarray(firing, bool), strict=True):
        if f:
            if out and out[-1][1] == last and ti - last <= max_gap:
                out[-1] = (out[-1][0], float(ti))
            else:
                out.append((float(ti), float(ti)))
            last = float(ti)
    return out


def score_page(
    t: np.ndarray,
    firing: np.ndarray,
    harm: list[tuple[float, float]],
    rule: PageRule | None = None,
) -> dict:
    """Harm scores of a page firing at evaluations `t` (ascending, evenly spaced) against harm `episodes`: the keys
    of `infercast backtest --json`'s `harm` (see the module docstring), plus the counts behind them."""
    rule = rule or PageRule()
    t = np.asarray(t, float)
    firing = np.asarray(firing, bool)
    if len(t) != len(firing):
        raise ValueError(f"{len(t)} evaluations but {len(firing)} flags")
    res: dict = {
        "episodes": 0,
        "paged": 0,
        "recall": None,
        "median_lead_seconds": None,
        "pages": 0,
        "false_pages": 0,
        "false_pages_per_day": None,
        "paged_fraction": None,
    }
    if not len(t):
        return res
    step = float(np.median(np.diff(t))) if len(t) > 1 else 1.0
    tol = step / 2
    page_list = pages(t, firing, step + tol)
    onset_at = np.full(len(t), np.nan)  # each firing evaluation's page onset
    for a, b in page_list:
        onset_at[(t >= a - tol / 10) & (t <= b + tol / 10)] = a
    scored = [(s, e) for s, e in harm if t[0] - tol / 10 <= s - rule.lead_min_s <= t[-1] + tol / 10]
    leads = []
    for s, _ in scored:
        w = (t >= s - rule.window_s - tol / 10) & (t <= s - rule.lead_min_s + tol / 10) & firing
        if w.any():
            leads.append(min(s - float(np.nanmin(onset_at[w])), rule.window_s))
    false = 0
    for a, b in page_list:
        if not any(s <= b + rule.window_s and e >= a for s, e in harm):
            false += 1
    days = (t[-1] - t[0] + step) / 86400.0
    res.update(
        episodes=len(scored),
        paged=len(leads),
        recall=len(leads) / len(scored) if scored else None,
        median_lead_seconds=float(np.median(leads)) if leads else None,
        pages=len(page_list),
        false_pages=false,
        false_pages_per_day=false / days,
        paged_fraction=float(firing.mean()),
    )
    return res


__all__ = ["HarmRule", "PageRule", "episodes", "kv_harm", "pages", "score_page", "urgent_harm"]
