"""The fleet laid out as the seeds' fixes ask, on the same hardware.  Pure: a fleet config in, a fleet config out.

Seed 000's new architecture (版本隔离部署) isolates pools by context length — a v4 short-context pool that
autoscales, a v4 long-context pool of fixed nodes, a v3.5 emergency pool kept cold — instead of one v4 pool with a
hot v3.5 fallback.  That is a deployment, not a knob turned at run time, so the arms that use the seeds' fixes
(`reactive`, and every arm built on it) run on `protected_layout(cfg)`: the same nodes, GPUs and
standby capacity as the fleet file, split as `protections.context_pools` says.  `none` and `basic` run the fleet
file as it is.
"""

from __future__ import annotations

from infercast.config import FleetConfig, PoolConfig


def protected_layout(cfg: FleetConfig) -> FleetConfig:
    pr = cfg.protections
    pools: dict[str, PoolConfig] = {}
    cp = pr.context_pools
    for name, pc in cfg.pools.items():
        if cp is not None and name == cp.pool:
            pools[cp.short_pool] = pc.model_copy(
                update={"nodes": pc.nodes - cp.long_nodes, "max_context_tokens": cp.split_tokens}
            )
            pools[cp.long_pool] = pc.model_copy(
                update={"nodes": cp.long_nodes, "min_context_tokens": cp.split_tokens + 1}
            )
        elif name in pr.cold_standby:
            pools[name] = pc.model_copy(update={"standby": True})
        else:
            pools[name] = pc
    if cp is not None:  # failover paths into the split pool now lead to both halves
        for name, pc in pools.items():
            if cp.pool in pc.failover:
                failover = []
                for f in pc.failover:
                    failover += [cp.short_pool, cp.long_pool] if f == cp.pool else [f]
                pools[name] = pc.model_copy(update={"failover": tuple(failover)})
    return cfg.model_copy(update={"pools": pools})
