"""SGLang: `/metrics` (always multiprocess: sorted labels, no `_created`) to the catalog.

Usage is `sglang:token_usage` (SGLang excludes evictable radix-cache tokens, as vLLM counts evictable prefix blocks
as free).  Retractions are SGLang's preemption when the KV pool runs out, so `sglang:num_retracted_requests_total`
feeds the allocation-failure counter.  The hit ratio is windowed from `sglang:prefill_effective_tokens_total`
(hits = device + host + storage hits, queries = input tokens); releases without it fall back to SGLang's own
`sglang:cache_hit_rate` gauge.  Memory efficiency is (weights + KV pool x used/total tokens) / (weights + KV pool),
from the startup gauges; activation memory is not exported, so it is left out of both sides.

Batch saturation needs the batch limit: releases that still export `sglang:max_running_requests` (the first
metrics release did) give it, otherwise only `targets[].max_batch` does.  Fragmentation: absent (not exported).
Only tensor/pipeline rank 0 is read (every rank reports the same scheduler state); `dp_rank` makes instances.
"""

from __future__ import annotations

from infercast.catalog import (
    BATCH_SATURATION_RATIO,
    KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    KV_CACHE_HIT_RATIO,
    KV_CACHE_USAGE_RATIO,
    MEMORY_EFFICIENCY_RATIO,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
)
from infercast.exporters.base import (
    HIT_HITS,
    HIT_QUERIES,
    Emitter,
    RankKey,
    Raw,
    Sample,
    ScrapeError,
    Target,
    by_rank,
    parse_text,
    saturation,
)

P = "sglang:"
USAGE_NAME = P + "token_usage"
RUNNING_NAME = P + "num_running_reqs"
QUEUE_NAME = P + "num_queue_reqs"
RETRACTED = P + "num_retracted_requests_total"
EFFECTIVE = P + "prefill_effective_tokens_total"
HIT_RATE = P + "cache_hit_rate"
MAX_RUNNING = P + "max_running_requests"
KV_GB = P + "kv_cache_memory_usage_gb"
WEIGHT_GB = P + "weight_memory_usage_gb"
KV_USED = P + "kv_used_tokens"
KV_TOTAL = P + "max_total_num_tokens"
WANTED = frozenset(
    (
        USAGE_NAME,
        RUNNING_NAME,
        QUEUE_NAME,
        RETRACTED,
        EFFECTIVE,
        HIT_RATE,
        MAX_RUNNING,
        KV_GB,
        WEIGHT_GB,
        KV_USED,
        KV_TOTAL,
    )
)
HIT_MODES = ("device_hit", "host_hit", "storage_hit")
#: the families that are ratios 0-1
MAXIMA = dict.fromkeys((USAGE_NAME, HIT_RATE), 1.0)
#: the families an SGLang page must have
EXPECTED = ((USAGE_NAME,), (RUNNING_NAME,), (QUEUE_NAME,))

Key = RankKey  # (model_name, dp_rank)


def _by_key(rows, mode: str | tuple[str, ...] | None = None) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for labels, value in rows or ():
        if labels.get("tp_rank", "0") != "0" or labels.get("pp_rank", "0") != "0":
            continue
        if mode is not None and labels.get("mode") not in ((mode,) if isinstance(mode, str) else mode):
            continue
        key = (labels.get("model_name"), labels.get("dp_rank"))
        out[key] = out.get(key, 0.0) + value  # sums over `priority` where priority scheduling splits the gauges
    return out


def parse(text: str, target: Target) -> list[Sample]:
    return build(parse_text(text, WANTED, MAXIMA), target)


def build(raw: Raw, target: Target) -> list[Sample]:
    """The samples of the families read (`parse_text(text, WANTED, MAXIMA)`) -> catalog samples."""
    f = {name: _by_key(raw.get(name)) for name in WANTED if name != EFFECTIVE}
    inputs = _by_key(raw.get(EFFECTIVE), "input")
    hits = _by_key(raw.get(EFFECTIVE), HIT_MODES)
    keys = set().union(*(f[n] for n in (USAGE_NAME, RUNNING_NAME, QUEUE_NAME, RETRACTED)))
    if not keys:
        raise ScrapeError("no SGLang scheduler families in the body (is this an SGLang /metrics endpoint?)")
    out = Emitter()
    for key, _, labels in by_rank(keys, target, "dp"):
        running = f[RUNNING_NAME].get(key)
        out.add(KV_CACHE_USAGE_RATIO, labels, f[USAGE_NAME].get(key))
        out.add(REQUESTS_RUNNING, labels, running)
        out.add(REQUESTS_WAITING, labels, f[QUEUE_NAME].get(key))
        out.add(KV_BLOCK_ALLOCATION_FAILURES_TOTAL, labels, f[RETRACTED].get(key))
        out.add(BATCH_SATURATION_RATIO, labels, saturation(running, f[MAX_RUNNING].get(key) or target.max_batch))
        if key in inputs:
            out.add(HIT_QUERIES, labels, inputs[key])
            out.add(HIT_HITS, labels, hits.get(key, 0.0))
        else:
            out.add(KV_CACHE_HIT_RATIO, labels, f[HIT_RATE].get(key))
        w, kv, used, total = (f[n].get(key) for n in (WEIGHT_GB, KV_GB, KV_USED, KV_TOTAL))
        if w is not None and kv is not None and used is not None and total and (w + kv) > 0:
            out.add(MEMORY_EFFICIENCY_RATIO, labels, (w + kv * min(1.0, used / total)) / (w + kv))
    return out.samples
