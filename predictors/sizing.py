"""Sizing a twin fleet for a trace so that its busiest minutes push KV usage above the predictive trigger.

`infercast.twin.run.size_fleet_for_trace` sizes a one-pool fleet once, for a target peak (it cannot change: the
twin's sources are pinned by the published results); `sized_fleet` here searches over that: it replays the trace on
`size_fleet_for_trace` at a target peak of 0.85 and, while the realised peak stays under `MIN_REALISED_PEAK`, raises
the target (fewer nodes), and once every pool is down to one node, gives the nodes fewer GPUs (smaller KV caches).
The sizing looks at the whole trace, as an operator sizing a test fleet would; the forecasters never do.  The
backtest (`infercast backtest --series kv`), the forecast bench and the tests use it.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

MIN_REALISED_PEAK = 0.80
SIZING_TARGETS = (0.85, 1.0, 1.25, 1.6, 2.0, 3.0)


def _with_gpus(cfg, gpus: int | None):
    if gpus is None:
        return cfg
    pools = {n: (pc if pc.standby else pc.model_copy(update={"gpus_per_node": gpus})) for n, pc in cfg.pools.items()}
    return cfg.model_copy(update={"pools": pools})


def sized_fleet(trace, base, step: float):
    """(config, twin result, how it was sized): the first size, in `SIZING_TARGETS` order and then with fewer GPUs
    per node, whose replay of the trace reaches `MIN_REALISED_PEAK`; the smallest tried (with a note) if none does."""
    from infercast.twin.run import run_trace, size_fleet_for_trace

    tried = []
    best = None
    for gpus in (None, 2, 1):
        b = _with_gpus(base, gpus)
        for target in SIZING_TARGETS:
            cfg = size_fleet_for_trace(trace, b, target_peak_kv=target)
            res = run_trace(trace, cfg, seed=0, step_seconds=step)
            peak = float(res.timeseries.groupby("pool")["kv_usage"].max().max())
            nodes = {p: c.nodes for p, c in cfg.pools.items() if not c.standby}
            how = {
                "target_peak_kv": target,
                "gpus_per_node": gpus or "as configured",
                "nodes": nodes,
                "realised_peak_kv": round(peak, 4),
            }
            tried.append(how)
            best = (cfg, res, how)
            if peak >= MIN_REALISED_PEAK:
                return cfg, res, {**how, "tries": len(tried)}
            if all(n == 1 for n in nodes.values()):
                break  # fewer nodes is impossible: try smaller nodes
    log.warning("sizing: no fleet size pushes KV usage over %.2f; using the smallest", MIN_REALISED_PEAK)
    return best[0], best[1], {**best[2], "tries": len(tried), "note": "peak stays under the threshold"}
