"""A twin replay with its harm marked: the fleet's time series (as `infercast.simulator.twin.run` returns it) and, from
the same run, the series `infercast.predictors.harm` judges harm on.  I/O at the edge: this runs the twin.

The twin's run result carries per-pool KV usage and allocation failures but not the urgent tier's time to first
token per window nor the OOM times as a series; both are in the fleet after its run (the latency book of the router,
the nodes' crash logs), so this drives the fleet itself, as `run_trace` / `run_scenario` do with no controller, and
reads them there.  Nothing in the twin changes, and its time series is the same frame `run_trace` returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from infercast.predictors.harm import HarmRule, episodes, kv_harm, urgent_harm

DEFAULT_RULE = HarmRule()
URGENT = 0  # the urgent tier's priority code (`infercast.simulator.twin.requests.PRIORITY_NAMES`)


@dataclass
class Replay:
    """A twin run: its per-pool time series, and per sample time the harm flags (any, and by kind)."""

    timeseries: pd.DataFrame
    t: np.ndarray
    harm: np.ndarray
    kinds: dict[str, np.ndarray] = field(default_factory=dict)
    urgent_sent: np.ndarray | None = None
    urgent_missed: np.ndarray | None = None

    def episodes(self, rule: HarmRule = DEFAULT_RULE) -> list[tuple[float, float]]:
        return episodes(self.t, self.harm, rule.resolve_s)

    def summary(self, rule: HarmRule = DEFAULT_RULE) -> dict:
        """How many harm episodes, how long harmed, and which kinds of harm (samples of each)."""
        eps = self.episodes(rule)
        return {
            "episodes": len(eps),
            "harm_samples": int(self.harm.sum()),
            "samples": len(self.t),
            "by_kind": {k: int(v.sum()) for k, v in self.kinds.items()},
            "first_episodes": [[round(s, 1), round(e, 1)] for s, e in eps[:5]],
        }


def _structural(fleet, trace, edges_s: float, n_windows: int) -> np.ndarray | None:
    """Per latency window: the urgent requests expected to miss the urgent SLO on their length alone (the trace's
    arrivals whose unloaded prefill floor exceeds it, times the urgent share); None without a trace."""
    if trace is None:
        return None
    from infercast.simulator.twin.latency import prefill_floor_seconds

    slo = fleet.cfg.router.slo_seconds.get("urgent", 1.0)
    share = fleet.cfg.router.priority_shares.get("urgent", 0.0)
    t = np.asarray(trace.arrivals_s, float)
    long = prefill_floor_seconds(np.asarray(trace.prompt_tokens, float)) > slo
    w = np.clip((t[long] / edges_s).astype(int), 0, n_windows - 1)
    return np.bincount(w, minlength=n_windows).astype(float) * share


def _mark(fleet, rule: HarmRule, trace=None) -> Replay:
    ts = pd.DataFrame(fleet.samples)
    t = np.unique(ts["t"].to_numpy(dtype=float))
    kv = np.zeros(len(t), bool)
    for _, df in ts.groupby("pool"):
        df = df.sort_values("t")
        flags = kv_harm(df["kv_usage_max"].to_numpy(float), df["alloc_failures_total"].to_numpy(float), rule.kv_full)
        kv[np.searchsorted(t, df["t"].to_numpy(float))] |= flags
    # OOM crashes, per sample interval (t_{i-1}, t_i]
    crashes = np.array(
        [c for n in fleet.nodes for c, why in zip(n.crash_log, n.crash_reasons, strict=True) if why == "oom"], float
    )
    oom = np.zeros(len(t), bool)
    if len(crashes) and len(t):
        idx = np.searchsorted(t, crashes, side="left")
        oom[idx[idx < len(t)]] = True
    # urgent requests sent in the trailing window up to each sample (by send time: when they were hurt), from the
    # router's 10 s latency windows: served (late or not) and lost (rejected or failed, by when they ended)
    book = fleet.book
    served = book.hist[:, URGENT].sum(axis=1)
    ok = book.within_slo[:, URGENT]
    lost = book.lost[:, URGENT]
    cum = np.concatenate([[0], np.cumsum(served + lost)])
    cum_miss = np.concatenate([[0], np.cumsum(served - ok + lost)])
    w1 = np.clip(np.ceil(t / book.window_s - 1e-9).astype(int), 0, len(served))
    w0 = np.clip(np.floor((t - rule.urgent_window_s) / book.window_s + 1e-9).astype(int), 0, len(served))
    sent, missed = (cum[w1] - cum[w0]).astype(float), (cum_miss[w1] - cum_miss[w0]).astype(float)
    per_window = _structural(fleet, trace, book.window_s, len(served))
    structural = None
    if per_window is not None:
        cum_s = np.concatenate([[0.0], np.cumsum(per_window)])
        structural = cum_s[w1] - cum_s[w0]
    urgent = urgent_harm(sent, missed, rule, structural)
    return Replay(ts, t, kv | oom | urgent, {"kv": kv, "oom": oom, "urgent": urgent}, sent, missed)


def replay_trace(trace, cfg, step_seconds: float = 15.0, seed: int = 0, rule: HarmRule = DEFAULT_RULE) -> Replay:
    """`infercast.simulator.twin.run.run_trace(trace, cfg, seed=seed, step_seconds=step_seconds)` with no controller,
    its harm marked."""
    from infercast.simulator.twin.fleet import trace_fleet

    fleet = trace_fleet(cfg, trace, seed, None, sample_seconds=step_seconds)
    fleet.advance(fleet.traffic.duration_s - fleet.now)
    return _mark(fleet, rule, trace)


def replay_scenario(cfg, step_seconds: float = 15.0, seed: int | None = None, rule: HarmRule = DEFAULT_RULE) -> Replay:
    """`infercast.simulator.twin.run.run_scenario(cfg, step_seconds=step_seconds)` with no controller, its harm
    marked."""
    from infercast.simulator.twin.fleet import build_fleet

    if cfg.scenario is None:
        raise ValueError("the fleet file has no `scenario:` section to drive the twin with")
    fleet = build_fleet(cfg, seed, None, sample_seconds=step_seconds)
    fleet.advance(cfg.scenario.duration_seconds - fleet.now)
    return _mark(fleet, rule)


__all__ = ["Replay", "replay_scenario", "replay_trace"]
