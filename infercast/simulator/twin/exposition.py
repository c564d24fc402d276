"""What one twin node shows a scraper: vLLM 0.34-style `/metrics` text (single-process shape: labels `model_name`,
`engine`; real family names, HELP and TYPE as in `tests/data/engines/`), plus the infercast engine extension v1
(`docs/engine-extension.md`): the families real engines lack (fragmentation, memory efficiency, max batch,
block-allocation failures, GPU memory).  A node that is down renders nothing (its endpoint does not answer).

Apart from `surfaces` (the HTTP server) because the engine keeps its TTFT histogram in these buckets: the engine
imports this module, and the server imports the fleet, so one module for both made a cycle.
"""

from __future__ import annotations

import math

import numpy as np

from infercast.catalog import (
    ENGINE_EXTENSION_INFO,
    ENGINE_EXTENSION_VERSION,
    ENGINE_GPU_MEMORY_TOTAL_BYTES,
    ENGINE_GPU_MEMORY_USED_BYTES,
    ENGINE_KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    ENGINE_KV_CACHE_FRAGMENTATION_RATIO,
    ENGINE_MAX_NUM_SEQS,
    ENGINE_MEMORY_EFFICIENCY_RATIO,
    spec,
)

# vLLM 0.34's time-to-first-token buckets (vllm/v1/metrics/loggers.py)
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip


def _num(v: float) -> str:
    if isinstance(v, float) and math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    return repr(float(v))


def _family(lines: list[str], name: str, kind: str, help_text: str, samples: list[tuple[str, str, float]]) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    for sample, labels, value in samples:
        lines.append(f"{sample}{{{labels}}} {_num(value)}")


def node_metrics_text(node, t: float | None = None) -> str:
    """vLLM-style exposition of one node (empty when the node is down)."""
    if not node.up:
        return ""
    t = node.t_last if t is None else t
    base = f'engine="{node.engine_index}",model_name="{node.vcfg.model.name}"'
    out: list[str] = []
    _family(out, "vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
            [("vllm:num_requests_running", base, node.running)])  # fmt: skip
    _family(out, "vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
            [("vllm:num_requests_waiting", base, node.waiting)])  # fmt: skip
    _family(out, "vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.",
            [("vllm:kv_cache_usage_perc", base, round(node.kv_usage(), 6))])  # fmt: skip
    _family(out, "vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
            [("vllm:num_preemptions_total", base, node.preemptions_total)])  # fmt: skip
    _family(out, "vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
            [("vllm:prompt_tokens_total", base, node.prompt_tokens_total)])  # fmt: skip
    _family(out, "vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
            [("vllm:generation_tokens_total", base, math.floor(node.generation_tokens_total))])  # fmt: skip
    _family(out, "vllm:request_success_total", "counter", "Count of successfully processed requests.",
            [("vllm:request_success_total", f'{base},finished_reason="stop"', node.success_total)])  # fmt: skip
    bt = node.vcfg.block_size_tokens
    cache_labels = (
        f'block_size="{bt}",cache_dtype="auto",enable_prefix_caching="False",{base},'
        f'gpu_memory_utilization="{node.pcfg.memory_utilization}",kv_cache_size_tokens="{node.kv_capacity_tokens}",'
        f'num_gpu_blocks="{node.kv_capacity_tokens // bt}"'
    )
    _family(out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig",
            [("vllm:cache_config_info", cache_labels, 1.0)])  # fmt: skip
    cum = np.cumsum(node.ttft_hist)
    samples = [
        ("vllm:time_to_first_token_seconds_bucket", f'{base},le="{_num(b)}"', float(c))
        for b, c in zip((*TTFT_BUCKETS, float("inf")), cum, strict=True)
    ]
    samples.append(("vllm:time_to_first_token_seconds_count", base, float(cum[-1])))
    samples.append(("vllm:time_to_first_token_seconds_sum", base, float(node.ttft_sum)))
    _family(out, "vllm:time_to_first_token_seconds", "histogram",
            "Histogram of time to first token in seconds.", samples)  # fmt: skip
    # --- infercast engine extension v1 ---------------------------------------------------------------------
    ext = [
        (ENGINE_KV_CACHE_FRAGMENTATION_RATIO, round(node.fragmentation(t), 6)),
        (ENGINE_MEMORY_EFFICIENCY_RATIO, round(node.memory_efficiency(t), 6)),
        (ENGINE_MAX_NUM_SEQS, node.max_batch),
        (ENGINE_KV_BLOCK_ALLOCATION_FAILURES_TOTAL, node.alloc_failures_total),
        (ENGINE_GPU_MEMORY_USED_BYTES, round(node.memory_usage() * node.physical_bytes)),
        (ENGINE_GPU_MEMORY_TOTAL_BYTES, node.physical_bytes),
    ]
    info = spec(ENGINE_EXTENSION_INFO)
    _family(out, info.name, "gauge", info.help, [(info.name, f'version="{ENGINE_EXTENSION_VERSION}"', 1.0)])
    for name, value in ext:
        m = spec(name)
        _family(out, name, m.kind.value, m.help, [(name, base, value)])
    return "\n".join(out) + "\n"
