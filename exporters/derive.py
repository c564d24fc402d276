"""Derived fleet scores: avalanche risk per pool, health per pool and version (pure: samples and config in).

Inputs are the samples the exporter already holds: catalog samples of every fresh target, the windowed rates
(`_rate:<counter>`) from `infercast.exporters.windows`, `_target_up` per serving target, and optionally forecasts of KV
usage per pool.  Nothing here reads a clock or does I/O.

## Health (`infercast_health_score{pool,version}` and `infercast_health_dimension_score{pool,version,dimension}`)

Each dimension scores 0-100 with `ramp(x, good, bad)`: 100 at or below `good`, 0 at or above `bad`, linear between.
The worst instance of the pool and version decides (a pool is as healthy as its sickest node).  A dimension with
no input (e.g. fragmentation on vLLM, TGI, SGLang or TRT-LLM, which do not export it) is *excluded*, not zero: it
is not exported and does not count in the score.  The score is `(mean + min) / 2` of the present dimensions, so
one collapsed dimension cannot hide behind ten healthy ones.

| dimension | input | good -> bad |
|---|---|---|
| kv_usage | max `infercast_kv_cache_usage_ratio` | `thresholds.kv_forecast_trigger` -> 1.0 |
| fragmentation | max `infercast_kv_cache_fragmentation_ratio` | `fragmentation_green` -> `fragmentation_release` |
| allocation_failures | max allocation failures per second per running request | 0 -> `FAILURES_BAD` |
| batch_saturation | max `infercast_batch_saturation_ratio` | `gpu_utilization_breaker` -> 1.0 |
| queue_depth | max `infercast_requests_waiting` | `queue_saturated` -> `QUEUE_BAD_FACTOR` x that |
| latency_slo | router: share of requests ending in `timeout` | 0 -> `SHARE_BAD` |
| error_rate | router: share ending in `error`, `rejected` or `shed` | 0 -> `SHARE_BAD` |
| degradation_rate | router: degradations away from the version / its requests | 0 -> `SHARE_BAD` |
| gpu_temperature | max GPU temperature (dcgm targets of the pool) | `gpu_temperature_celsius` - `TEMP_MARGIN_C` -> it |
| gpu_errors | rate of uncorrectable ECC + XID errors | 0 -> any (0 if any error in the window) |
| staleness | share of the pool's serving targets up | 1.0 -> 0.0 |

## Avalanche risk (`infercast_avalanche_risk_score{pool}`, 0-100)

`risk = 100 x P x C`.  `P` is the pool's own pressure: the worst of KV usage, fragmentation, allocation failures,
batch saturation and queue depth, each `1 - dimension score / 100`, fragmentation's scaled by how full the cache is
(max usage / `kv_forecast_trigger`, at most 1).  Nodes already down add pressure twice: their share (a quarter of
the pool down, `DOWN_SHARE_BAD`, is full pressure: a cascade is under way), and the survivors' usage divided by the
share up (they carry the down nodes' load).  `C` is the share of the pool's KV load its failover pools could not absorb:
`C = 1 - min(1, sum_f free_f / used_p)` where `used_p` is the pool's KV tokens in use (a node that is down counts
as full: it most often went down out of memory, and its load needs a home) and `free_f` each failover pool's free
KV tokens (capacities from the fleet file's pools, versions and GPUs), scaled by its relative throughput
(`peak_throughput_factor`).  A failover pool's usage is its forecast upper band when forecasts are given (the
seed's lesson: check the target's *future* headroom), else its current usage; a failover pool with no usage known
counts as no headroom.  A pool without failover has C = 1: whatever fails there
has nowhere to go.  Seed 000 (examples/flash-sale.yaml, v4 at 98%, five half-full v3.5 nodes): P 0.92, C 0.89, risk 82.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from infercast.catalog import (
    AVALANCHE_RISK_SCORE,
    BATCH_SATURATION_RATIO,
    DEGRADATIONS_TOTAL,
    GPU_ECC_ERRORS_TOTAL,
    GPU_TEMPERATURE_CELSIUS,
    GPU_XID_ERRORS_TOTAL,
    HEALTH_DIMENSION_SCORE,
    HEALTH_DIMENSIONS,
    HEALTH_SCORE,
    KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    KV_CACHE_FRAGMENTATION_RATIO,
    KV_CACHE_USAGE_RATIO,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
    ROUTER_REQUESTS_TOTAL,
)
from infercast.config import FleetConfig, Thresholds
from infercast.exporters.base import SERVING_UP, Sample
from infercast.exporters.windows import RATE_PREFIX

# Every scoring constant is a threshold of the fleet file (`config.thresholds`); the docstring's names map to:
# FAILURES_BAD = allocation_failures_bad_per_request_second, QUEUE_BAD_FACTOR = queue_bad_factor,
# SHARE_BAD = router_share_bad, TEMP_MARGIN_C = gpu_temperature_margin_celsius,
# DOWN_SHARE_BAD = nodes_down_full_pressure.
ERROR_OUTCOMES = ("error", "rejected", "shed")
PRESSURE_DIMENSIONS = ("kv_usage", "allocation_failures", "batch_saturation", "queue_depth")
GPU_ERROR_RATES = (RATE_PREFIX + GPU_XID_ERRORS_TOTAL, RATE_PREFIX + GPU_ECC_ERRORS_TOTAL)


def ramp(x: float, good: float, bad: float) -> float:
    """100 at x <= good, 0 at x >= bad, linear between."""
    if x <= good:
        return 100.0
    if x >= bad or bad <= good:
        return 0.0
    return 100.0 * (bad - x) / (bad - good)


def _kv_capacity_tokens(config: FleetConfig, pool: str) -> float | None:
    """KV tokens a pool holds in total: nodes x (usable GPU memory - weights) / KV bytes per token; None when the
    fleet file gives no model shape for the pool's version (a real fleet needs none, `infercast/models.py`)."""
    p = config.pools[pool]
    v = config.versions[p.version]
    if v.model.missing_shape:
        return None
    per_node = p.node_memory_bytes * p.memory_utilization - v.model.weights_bytes
    return max(0.0, per_node) * p.nodes / v.model.kv_bytes_per_token


def _max_by(samples: Iterable[Sample], name: str, key) -> dict:
    out: dict = {}
    for s in samples:
        if s.name == name:
            k = key(s.labels)
            out[k] = max(out.get(k, s.value), s.value)
    return out


def _pv(labels: Mapping[str, str]) -> tuple[str, str]:
    return labels.get("pool", "unknown"), labels.get("version", "unknown")


def health(
    config: FleetConfig, samples: list[Sample], gpu_pools: Mapping[tuple[str, str], str] | None = None
) -> dict[tuple[str, str], dict[str, float]]:
    """Dimension scores per (pool, version); only dimensions with an input are present.

    `gpu_pools` maps a GPU (node, gpu) to the pool whose target it was scraped for (dcgm targets with a `pool`).
    """
    th = config.thresholds
    dims: dict[tuple[str, str], dict[str, float]] = defaultdict(dict)

    def worst(name: str, dimension: str, score) -> None:
        for pv, value in _max_by(samples, name, _pv).items():
            dims[pv][dimension] = score(value)

    worst(KV_CACHE_USAGE_RATIO, "kv_usage", lambda u: ramp(u, th.kv_forecast_trigger, 1.0))
    worst(
        KV_CACHE_FRAGMENTATION_RATIO,
        "fragmentation",
        lambda f: ramp(f, th.fragmentation_green, th.fragmentation_release),
    )
    worst(BATCH_SATURATION_RATIO, "batch_saturation", lambda s: ramp(s, th.gpu_utilization_breaker, 1.0))
    worst(
        REQUESTS_WAITING, "queue_depth", lambda w: ramp(w, th.queue_saturated, th.queue_saturated * th.queue_bad_factor)
    )

    # allocation failures per second per running request, per instance
    running = {(_pv(s.labels), s.labels.get("instance")): s.value for s in samples if s.name == REQUESTS_RUNNING}
    for s in samples:
        if s.name == RATE_PREFIX + KV_BLOCK_ALLOCATION_FAILURES_TOTAL:
            per_req = s.value / max(1.0, running.get((_pv(s.labels), s.labels.get("instance")), 1.0))
            pv = _pv(s.labels)
            score = ramp(per_req, 0.0, th.allocation_failures_bad_per_request_second)
            dims[pv]["allocation_failures"] = min(dims[pv].get("allocation_failures", 100.0), score)

    _router_dimensions(th, samples, dims)
    if gpu_pools:
        _gpu_dimensions(config, samples, gpu_pools, dims)
    _staleness(samples, dims)
    return {pv: d for pv, d in dims.items() if d}


def _router_dimensions(th: Thresholds, samples: list[Sample], dims: dict[tuple[str, str], dict[str, float]]) -> None:
    """The router's shares of outcomes over the window, per (pool, version): timeouts, errors, degradations."""
    req_rates: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for s in samples:
        if s.name == RATE_PREFIX + ROUTER_REQUESTS_TOTAL:
            req_rates[_pv(s.labels)][s.labels.get("outcome", "")] += s.value
    deg_from: dict[str, float] = defaultdict(float)
    for s in samples:
        if s.name == RATE_PREFIX + DEGRADATIONS_TOTAL:
            deg_from[s.labels.get("from_version", "")] += s.value
    for pv, by_outcome in req_rates.items():
        total = sum(by_outcome.values())
        if total <= 0:
            continue
        dims[pv]["latency_slo"] = ramp(by_outcome.get("timeout", 0.0) / total, 0.0, th.router_share_bad)
        dims[pv]["error_rate"] = ramp(
            sum(by_outcome.get(o, 0.0) for o in ERROR_OUTCOMES) / total, 0.0, th.router_share_bad
        )
        version_total = sum(sum(o.values()) for (_, v), o in req_rates.items() if v == pv[1])
        if version_total > 0:
            dims[pv]["degradation_rate"] = ramp(deg_from.get(pv[1], 0.0) / version_total, 0.0, th.router_share_bad)


def _gpu_dimensions(
    config: FleetConfig,
    samples: list[Sample],
    gpu_pools: Mapping[tuple[str, str], str],
    dims: dict[tuple[str, str], dict[str, float]],
) -> None:
    """The GPUs of targets that belong to a pool: temperature and errors."""
    th = config.thresholds
    pool_version = {p: c.version for p, c in config.pools.items()}
    for s in samples:
        pool = gpu_pools.get((s.labels.get("node", ""), s.labels.get("gpu", "")))
        if pool is None:
            continue
        pv = (pool, pool_version.get(pool, "unknown"))
        if s.name == GPU_TEMPERATURE_CELSIUS:
            score = ramp(
                s.value, th.gpu_temperature_celsius - th.gpu_temperature_margin_celsius, th.gpu_temperature_celsius
            )
            dims[pv]["gpu_temperature"] = min(dims[pv].get("gpu_temperature", 100.0), score)
        elif s.name in GPU_ERROR_RATES:
            if s.name.endswith("ecc_errors_total") and s.labels.get("type") != "uncorrectable":
                continue
            score = 0.0 if s.value > 0 else 100.0
            dims[pv]["gpu_errors"] = min(dims[pv].get("gpu_errors", 100.0), score)


def _staleness(samples: list[Sample], dims: dict[tuple[str, str], dict[str, float]]) -> None:
    """The share of each pool's serving targets that answered."""
    ups: dict[tuple[str, str], list[float]] = defaultdict(list)
    for s in samples:
        if s.name == SERVING_UP and "pool" in s.labels:
            ups[_pv(s.labels)].append(s.value)
    for pv, values in ups.items():
        dims[pv]["staleness"] = 100.0 * sum(values) / len(values)


def health_score(dims: Mapping[str, float]) -> float:
    values = [dims[d] for d in HEALTH_DIMENSIONS if d in dims]
    return (sum(values) / len(values) + min(values)) / 2.0


def pressure(dims: Mapping[str, float], fullness: float = 1.0) -> float | None:
    """The pool's own pressure 0-1: the worst of its KV, fragmentation, allocation, batch and queue dimensions.

    Queue depth counts because an engine that queues instead of admitting (SGLang with 17 requests waiting per
    running one, at low KV usage) is as close to timeouts, retries and failover as a full cache, though its KV
    dimensions show no pressure at all.

    Fragmentation's pressure is scaled by `fullness` (KV usage / the forecast trigger, at most 1): blocks a quarter
    empty on a nearly idle cache waste little and threaten nothing; on a full one they are what tips it over.
    """
    own = [1.0 - dims[d] / 100.0 for d in PRESSURE_DIMENSIONS if d in dims]
    if "fragmentation" in dims:
        own.append((1.0 - dims["fragmentation"] / 100.0) * min(1.0, max(0.0, fullness)))
    return max(own) if own else None


def avalanche_risk(
    config: FleetConfig,
    samples: list[Sample],
    dims: Mapping[tuple[str, str], Mapping[str, float]],
    forecast_usage: Mapping[str, float] | None = None,
) -> dict[str, float]:
    """Risk 0-100 per pool (absent for pools with no pressure input)."""
    usage_by_pool: dict[str, list[float]] = defaultdict(list)
    ups: dict[str, list[float]] = defaultdict(list)
    for s in samples:
        if s.name == KV_CACHE_USAGE_RATIO:
            usage_by_pool[s.labels.get("pool", "unknown")].append(s.value)
        elif s.name == SERVING_UP and "pool" in s.labels:
            ups[s.labels["pool"]].append(s.value)
    mean_usage = {p: sum(v) / len(v) for p, v in usage_by_pool.items()}
    max_usage = {p: max(v) for p, v in usage_by_pool.items()}
    th = config.thresholds
    trigger = th.kv_forecast_trigger
    out: dict[str, float] = {}
    for pool, pcfg in config.pools.items():
        fullness = max_usage.get(pool, 1.0) / trigger  # unknown usage: fragmentation counts in full
        pressures = [pr for (p, _), d in dims.items() if p == pool and (pr := pressure(d, fullness)) is not None]
        if ups.get(pool):
            up_share = sum(ups[pool]) / len(ups[pool])
            # nodes already down: a cascade under way
            pressures.append(min(1.0, (1.0 - up_share) / th.nodes_down_full_pressure))
            if pool in max_usage and up_share > 0:
                # the survivors carry the down nodes' load
                pressures.append(1.0 - ramp(max_usage[pool] / up_share, trigger, 1.0) / 100.0)
        if not pressures:
            continue
        own = max(pressures)
        cascade = 1.0
        load = mean_usage.get(pool, 0.0)
        if ups.get(pool):
            # a node that is down (most often: out of memory) held a full cache; that load now needs a home too
            down = len(ups[pool]) - sum(ups[pool])
            load = (load * (len(ups[pool]) - down) + down * 1.0) / len(ups[pool])
        capacity = _kv_capacity_tokens(config, pool)
        used = load * capacity if capacity is not None else 0.0  # unknown capacity: no cascade term
        if pcfg.failover and used > 0:
            factor = config.versions[pcfg.version].peak_throughput_factor
            free = 0.0
            for f in pcfg.failover:
                u = (forecast_usage or {}).get(f, mean_usage.get(f))
                f_capacity = _kv_capacity_tokens(config, f)
                if u is None or f_capacity is None:
                    continue  # unknown headroom counts as none
                rel = config.versions[config.pools[f].version].peak_throughput_factor / factor
                free += max(0.0, 1.0 - u) * f_capacity * min(1.0, rel)
            cascade = 1.0 - min(1.0, free / used)
        out[pool] = 100.0 * own * cascade
    return out


def derive(
    config: FleetConfig,
    samples: list[Sample],
    gpu_pools: Mapping[tuple[str, str], str] | None = None,
    forecast_usage: Mapping[str, float] | None = None,
) -> list[Sample]:
    """All derived samples: risk per pool, health and its dimensions per pool and version."""
    dims = health(config, samples, gpu_pools)
    out: list[Sample] = []
    for pool, risk in sorted(avalanche_risk(config, samples, dims, forecast_usage).items()):
        out.append(Sample(AVALANCHE_RISK_SCORE, {"pool": pool}, risk))
    for (pool, version), d in sorted(dims.items()):
        out.append(Sample(HEALTH_SCORE, {"pool": pool, "version": version}, health_score(d)))
        for dim in HEALTH_DIMENSIONS:
            if dim in d:
                out.append(Sample(HEALTH_DIMENSION_SCORE, {"pool": pool, "version": version, "dimension": dim}, d[dim]))
    return out
