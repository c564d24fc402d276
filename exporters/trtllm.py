"""Triton + TensorRT-LLM (inflight batcher) `/metrics` to the catalog.

One Triton server serves several models; each model's `model` label is mapped to the fleet file's version.
Usage is `nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}` (else used / max blocks); running and
waiting come from `nv_trt_llm_request_metrics{request_type="active"|"waiting"}`, and batch saturation is
active / `request_type="max"` (the configured batch limit, which Triton does export).

Allocation failures: absent.  TRT-LLM's `paused_requests` is a gauge of requests paused *now* for lack of KV
blocks; summing it over scrapes would count one long pause many times and miss short ones between scrapes, so it
is not turned into a counter.  Fragmentation, memory efficiency and prefix-cache hit ratio: absent (the `reused`
block count's cumulative-vs-instant meaning is unverified).
"""

from __future__ import annotations

from exporters.base import RUNNING, SATURATION, USAGE, WAITING, Emitter, Sample, ScrapeError, Target, parse_text
from exporters.base import saturation as _saturation

BLOCKS = "nv_trt_llm_kv_cache_block_metrics"
REQUESTS = "nv_trt_llm_request_metrics"
WANTED = frozenset((BLOCKS, REQUESTS))


def _table(rows, label: str) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for labels, value in rows or ():
        kind = labels.get(label)
        if kind is not None:
            out.setdefault(labels.get("model", ""), {})[kind] = value
    return out


def parse(text: str, target: Target) -> list[Sample]:
    raw = parse_text(text, WANTED)
    blocks = _table(raw.get(BLOCKS), "kv_cache_block_type")
    reqs = _table(raw.get(REQUESTS), "request_type")
    models = sorted(set(blocks) | set(reqs))
    if not models:
        raise ScrapeError("no TensorRT-LLM families in the body (is this Triton's /metrics with the TRT-LLM backend?)")
    out = Emitter()
    for model in models:
        labels = target.serving_labels(model or None, target.name)
        b, r = blocks.get(model, {}), reqs.get(model, {})
        usage = b.get("fraction")
        if usage is None and b.get("max"):
            usage = b.get("used", 0.0) / b["max"]
        active = r.get("active")
        out.add(USAGE, labels, usage)
        out.add(RUNNING, labels, active)
        out.add(WAITING, labels, r.get("waiting"))
        out.add(SATURATION, labels, _saturation(active, r.get("max") or target.max_batch))
    return out.samples
