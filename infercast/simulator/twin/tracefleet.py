"""The fleet a real trace is replayed on when it is sized for the trace (`infercast twin run --trace F --size-fleet`,
`infercast demo --trace F`): always-on nodes for its usual load, standby nodes for its peak, and the fleet file's
protections set up again on that fleet.

Sizing (`sized_trace_fleet`), from the trace alone:
- the whole fleet, N_peak nodes, serves the trace's busiest minute at KV <= 0.85: `run.size_fleet_for_trace`
  (Little's law for the busiest minute's resident KV, enough prefill for the busiest 10 s, replays to calibrate);
- N_on = ceil(N_peak x median-minute load / busiest-minute load) of them are always on, where a minute's load is
  the KV tokens it keeps resident by Little's law (`run.trace_minute_load`); at least 1, and at least 2 when the
  file splits the pool by context into a short and a long pool (each half needs a node);
- the other N_peak - N_on nodes (at least 1) are a standby pool of the same nodes, which the autoscaler and the
  controllers start (paying the cold start) when the load climbs: what a controller can win on a trace is bringing
  them up in time.

The fleet file's protections name pools and streams of its own scenario, so they are set up again for the sized
pool the way the file sets them up for its own (examples/flash-sale.yaml):
- the gateway's token bucket at 1.1x the busiest minute's request rate, what the whole fleet (standby included) is
  sized to serve; same queue.  (The seed's fleet has its bucket at 1.1x its steady rate, but that fleet cannot
  serve more; at 1.1x a bursty trace's mean the bucket refused the bursts that the standby nodes exist for, and
  every arm's result was the bucket's.)
- no quota lanes (a trace is one stream);
- the always-on pool split by context length in the file's proportion of long-context nodes;
- the autoscaler on the serving pools, drawing on the standby pool;
- no calendar events (the file's are its own scenario's; a trace brings none, so `scheduled` is `reactive` on it);
- the file's tiers, thresholds, failover headroom and flow control unchanged; no cold standby (the sized fleet has no
  fallback pool).
"""

from __future__ import annotations

import math

import numpy as np

from infercast.config import FleetConfig, parse_config

TARGET_PEAK_KV = 0.85


def _nodes(k: int) -> str:
    return f"{k} node" if k == 1 else f"{k} nodes"


def always_on_nodes(n_peak: int, median_load: float, busiest_load: float, split: bool) -> tuple[int, int]:
    """(always-on nodes, standby nodes) for a fleet of `n_peak` nodes at the peak: see the module docstring."""
    ratio = median_load / busiest_load if busiest_load > 0 else 1.0
    n_on = max(2 if split else 1, math.ceil(n_peak * ratio - 1e-9))
    return n_on, max(1, n_peak - n_on)


def sized_trace_fleet(
    trace, cfg: FleetConfig, target_peak_kv: float = TARGET_PEAK_KV, seed: int = 0
) -> tuple[FleetConfig, list[str]]:
    """(the fleet sized for the trace with the file's protections set up on it, what was changed from the file, in
    words).  The rule is the module docstring's."""
    from infercast.simulator.twin.run import size_fleet_for_trace, trace_minute_load

    sized = size_fleet_for_trace(trace, cfg, target_peak_kv=target_peak_kv, seed=seed)
    load = trace_minute_load(trace, sized)
    busiest, median = float(load.max()), float(np.median(load))
    data = sized.model_dump(mode="json")
    pool, pc = next((p, pc) for p, pc in data["pools"].items() if not pc["standby"] and pc["weight"] > 0)
    n_peak = pc["nodes"]
    prot = data.get("protections") or {}
    split = prot.get("context_pools")
    n_on, n_standby = always_on_nodes(n_peak, median, busiest, split is not None)
    standby = f"{pool}-standby"
    data["pools"][pool] = {**pc, "nodes": n_on}
    data["pools"][standby] = {**pc, "nodes": n_standby, "standby": True, "weight": 0.0, "failover": []}
    notes = [
        f"one serving pool {pool} sized for the trace: its busiest minute at KV {target_peak_kv:g} takes "
        f"{_nodes(n_peak)}; {n_on} always on (median minute / busiest = {median / max(busiest, 1e-12):.2f}), "
        f"{n_standby} standby"
    ]
    t = np.asarray(trace.arrivals_s, dtype=np.float64)
    peak_rps = float(np.bincount((t // 60).astype(np.int64)).max()) / 60.0 if len(t) else 0.0
    if prot.get("rate_limit"):
        prot["rate_limit"] = {**prot["rate_limit"], "rps": round(1.1 * peak_rps, 3), "burst": None}
        notes.append(f"token bucket at {1.1 * peak_rps:.1f} req/s (1.1x the busiest minute the whole fleet serves)")
    if prot.get("quota_lanes"):
        notes.append("no quota lanes (a trace is one stream)")
    prot["quota_lanes"] = {}
    prot["cold_standby"] = []
    serving = [pool]
    if split:
        share = split["long_nodes"] / cfg.pools[split["pool"]].nodes
        long_nodes = min(n_on - 1, max(1, round(n_on * share)))
        prot["context_pools"] = {**split, "pool": pool, "long_nodes": long_nodes,
                                 "short_pool": f"{pool}-short", "long_pool": f"{pool}-long"}  # fmt: skip
        serving = [f"{pool}-short", f"{pool}-long"]
        notes.append(f"{pool} split: {_nodes(long_nodes)} for prompts over {split['split_tokens']} tokens")
    if prot.get("autoscaler"):
        prot["autoscaler"] = {**prot["autoscaler"], "pools": serving, "reservoir": standby}
    data["protections"] = prot
    if data.get("events"):
        notes.append("no calendar events (the fleet file's are its own scenario's)")
    data["events"] = []
    return parse_config(data, source="the fleet sized for the trace"), notes


def surged_trace_run(
    trace, cfg: FleetConfig, surges=(), *, size_fleet: bool = False, seed: int = 0, name: str | None = None
) -> tuple[FleetConfig, object, list[str]]:
    """(the fleet, the trace with `surges` laid on it, what sizing changed): what `infercast twin run --trace F
    [--size-fleet] [--surge ...]` and the control bench replay.  Every surge's window is checked against the trace
    first (`traces.SurgeError`, before any sizing run); with `size_fleet` the fleet is sized for the trace WITHOUT
    its surges, as an operator sized it before the surge came (sized for the surged trace, a surge would find its
    own capacity waiting as standby nodes); then each surge is laid on in turn (`Trace.surged`, under `seed`)."""
    for surge in surges:
        surge.check(trace.duration_s, name or trace.name)
    notes: list[str] = []
    if size_fleet:
        cfg, notes = sized_trace_fleet(trace, cfg)
    for surge in surges:
        trace = trace.surged(surge, seed=seed)
    if surges:
        notes.append("surges " + "; ".join(x.describe() for x in surges) + " (the fleet sized without them)")
    return cfg, trace, notes


__all__ = ["TARGET_PEAK_KV", "always_on_nodes", "sized_trace_fleet", "surged_trace_run"]
