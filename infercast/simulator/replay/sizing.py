"""Sizing a twin fleet for a trace as an operator sizes one: the trace's median load at <= 0.6 KV usage.

No operator sizes a fleet to sit on its page threshold; the scores of a page are only meaningful on a fleet where
harm is rare and comes from the trace's own bursts (issue 37).  The criterion, from the trace alone (as an operator
sizing a fleet would look at the whole trace; the forecasters never do):

1. `infercast.simulator.twin.run.size_fleet_for_trace` at a busiest-minute target of `PEAK_KV` (0.85) gives the whole
   fleet the trace needs at its peak (nodes for the busiest 10 s of prefill, KV for the busiest minute, calibrated by
   replays): what `infercast twin run --size-fleet` splits into always-on and standby nodes.
2. Its KV capacity is scaled by f = min(1, (median minute load / busiest minute load) x `PEAK_KV` / `MEDIAN_KV`),
   loads by Little's law (`infercast.simulator.twin.run.trace_minute_load`, as `tracefleet` computes its always-on
   share), so the median minute runs at about `MEDIAN_KV` (0.6); never below a few of the trace's largest requests.  The
   standby is counted as an operator counts it, as capacity the fleet has: the replay runs no autoscaler, so the
   whole sized fleet serves, and it is never larger than the peak-sized fleet (f <= 1: an operator buys no more than
   the busiest minute needs).  The node count (prefill throughput) is kept; the KV per node (the card's memory) is
   what scales.
3. One replay checks it: if the replay's median KV usage (the pool's mean over its instances, over the samples) is
   still over `MEDIAN_KV`, the capacity grows by that ratio and the replay is repeated (at most twice), past the
   peak-sized fleet where that fleet's own median is over (its busiest-minute calibration is approximate).

A smooth trace (median close to its busiest minute) gets the peak-sized fleet and little or no harm; a bursty one
gets a fleet its bursts overfill.  The backtest (`infercast backtest --series kv`), the forecast bench and the tests
use it.
"""

from __future__ import annotations

import logging

import numpy as np

log = logging.getLogger(__name__)

MEDIAN_KV = 0.6
PEAK_KV = 0.85
CHECK_REPLAYS = 2


def _kv_scaled(cfg, f: float):
    """The fleet with every serving pool's KV capacity per node scaled by `f` (its card's memory resized)."""
    pools = {}
    for name, pc in cfg.pools.items():
        if pc.standby or pc.weight <= 0:
            pools[name] = pc
            continue
        vc = cfg.versions[pc.version]
        fixed = vc.model.weights_gb + cfg.twin.overhead_gb_per_gpu * pc.gpus_per_node
        kv_gb = pc.gpus_per_node * pc.gpu.memory_gb * pc.memory_utilization - fixed
        card = (fixed + f * kv_gb) / (pc.gpus_per_node * pc.memory_utilization)
        gpu = pc.gpu.model_copy(update={"memory_gb": round(card, 4)})
        pools[name] = pc.model_copy(update={"gpu": gpu})
    return cfg.model_copy(update={"pools": pools})


def _kv_tokens(cfg) -> float:
    """KV tokens the serving pools hold."""
    total = 0.0
    for pc in cfg.pools.values():
        if pc.standby or pc.weight <= 0:
            continue
        vc = cfg.versions[pc.version]
        fixed = vc.model.weights_gb + cfg.twin.overhead_gb_per_gpu * pc.gpus_per_node
        kv_gb = pc.gpus_per_node * pc.gpu.memory_gb * pc.memory_utilization - fixed
        total += pc.nodes * kv_gb * 1024**3 / vc.model.kv_bytes_per_token
    return total


def median_kv(timeseries) -> float:
    """The replay's median KV usage: the busiest pool's mean over instances, median over the samples."""
    return float(timeseries.groupby("pool")["kv_usage"].median().max())


def sized_fleet(trace, base, step: float):
    """(config, replay with harm marked, how it was sized): see the module docstring."""
    from infercast.simulator.replay.harm_replay import replay_trace
    from infercast.simulator.twin.run import size_fleet_for_trace, trace_minute_load

    peak = size_fleet_for_trace(trace, base, target_peak_kv=PEAK_KV)
    load = trace_minute_load(trace, peak)
    busiest, median = float(load.max()), float(np.median(load))
    f = min(1.0, (median / busiest) * PEAK_KV / MEDIAN_KV) if busiest > 0 else 1.0
    largest = float(np.quantile(np.asarray(trace.prompt_tokens) + np.asarray(trace.output_tokens), 0.999))
    full = _kv_tokens(peak)
    f = max(f, min(1.0, 4.0 * largest / full)) if full > 0 else 1.0
    tries = 0
    while True:
        cfg = _kv_scaled(peak, f)
        rep = replay_trace(trace, cfg, step)
        realised = median_kv(rep.timeseries)
        tries += 1
        if realised <= MEDIAN_KV or tries > CHECK_REPLAYS:
            break
        f *= realised / MEDIAN_KV * 1.02  # the criterion first: past the peak-sized fleet if its median is over
    how = {
        "rule": f"median minute at <= {MEDIAN_KV:g} KV, standby counted (the whole fleet serves)",
        "kv_scale_of_peak_fleet": round(f, 4),
        "busiest_over_median_load": round(busiest / median, 3) if median > 0 else None,
        "nodes": {p: c.nodes for p, c in cfg.pools.items() if not c.standby},
        "realised_median_kv": round(realised, 4),
        "realised_peak_kv": round(float(rep.timeseries.groupby("pool")["kv_usage"].max().max()), 4),
        "replays": tries,
        "harm": rep.summary(),
    }
    if realised > MEDIAN_KV:
        log.warning("sizing: the median KV usage stays at %.2f after %d replays", realised, tries)
        how["note"] = f"median KV usage still over {MEDIAN_KV:g} after {tries} replays"
    return cfg, rep, how
