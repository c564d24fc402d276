"""The fleet a real trace is replayed on in the demo: sized for the trace, with the seeds' fixes set up on it.

`size_fleet_for_trace` gives one serving pool sized so the trace's busiest minute reaches 0.85 KV usage (docs/twin.md,
"Traces").  The fleet file's protections name pools and streams of its own scenario, so they are set up again for
that pool the way the fleet file sets them up for its own (examples/flash-sale.yaml):
- the gateway's token bucket at 1.1x the trace's mean rate (the seed's rule: 1.1x the steady rate), same queue;
- no quota lanes (a trace is one stream);
- the serving pool split by context length in the file's proportion of long-context nodes (when it has 2+ nodes);
- a standby pool of the same nodes, a third of the serving pool's size, for the autoscaler and the actuator's
  pre-warming (the file's reservoir is 4 standby nodes for 12 serving ones);
- the file's tiers, failover headroom and flow control unchanged; no cold standby (the sized fleet has no fallback).
"""

from __future__ import annotations

import math

from infercast.config import FleetConfig, parse_config

STANDBY_SHARE = 1 / 3


def trace_fleet(trace, cfg: FleetConfig) -> tuple[FleetConfig, list[str]]:
    """(the sized fleet with its protections, what was changed from the file, in words)."""
    from infercast.twin.run import size_fleet_for_trace

    sized = size_fleet_for_trace(trace, cfg)
    data = sized.model_dump(mode="json")
    pool, pc = next((p, pc) for p, pc in data["pools"].items() if not pc["standby"] and pc["weight"] > 0)
    nodes = pc["nodes"]
    standby = f"{pool}-standby"
    data["pools"][standby] = {**pc, "nodes": max(1, math.ceil(nodes * STANDBY_SHARE)), "standby": True,
                              "weight": 0.0, "failover": []}  # fmt: skip
    prot = data.get("protections") or {}
    notes = [f"one serving pool {pool} of {nodes} nodes sized for the trace, {data['pools'][standby]['nodes']} standby"]
    mean_rps = len(trace) / max(trace.duration_s, 1e-9)
    if prot.get("rate_limit"):
        prot["rate_limit"] = {**prot["rate_limit"], "rps": round(1.1 * mean_rps, 3), "burst": None}
        notes.append(f"token bucket at {1.1 * mean_rps:.1f} req/s (1.1x the trace's mean)")
    if prot.get("quota_lanes"):
        notes.append("no quota lanes (a trace is one stream)")
    prot["quota_lanes"] = {}
    prot["cold_standby"] = []
    split = prot.get("context_pools")
    serving = [pool]
    if split and nodes >= 2:
        share = split["long_nodes"] / cfg.pools[split["pool"]].nodes
        long_nodes = min(nodes - 1, max(1, round(nodes * share)))
        prot["context_pools"] = {**split, "pool": pool, "long_nodes": long_nodes,
                                 "short_pool": f"{pool}-short", "long_pool": f"{pool}-long"}  # fmt: skip
        serving = [f"{pool}-short", f"{pool}-long"]
        notes.append(f"{pool} split: {long_nodes} nodes for prompts over {split['split_tokens']} tokens")
    else:
        prot["context_pools"] = None
    if prot.get("autoscaler"):
        prot["autoscaler"] = {**prot["autoscaler"], "pools": serving, "reservoir": standby}
    data["protections"] = prot
    return parse_config(data), notes


__all__ = ["trace_fleet"]
