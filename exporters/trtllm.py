"""Triton + TensorRT-LLM (inflight batcher) `/metrics` to the catalog.

One Triton server serves several models, and several versions of a model (its `version` label: the model
repository's version directory); every series is keyed on both.  Each model's `model` label is mapped to the fleet
file's version; two Triton versions of one model are two instances (`<target>/v<version>`), never one
overwriting the other.
Usage is `nv_trt_llm_kv_cache_block_metrics{kv_cache_block_type="fraction"}`, cross-checked against used / max
blocks of the same page when both are there (they come from one statistics snapshot, so they agree up to the
rounding of the text; more than FRACTION_TOLERANCE apart, the page is not trusted); without `fraction` it is used /
max.  Under the exporter (`build(..., errors=...)`) a disagreement drops only that model version's KV usage and
reports the family (`nv_trt_llm_kv_cache_block_metrics: ... disagrees ...`): the rest of the page -- running,
waiting, saturation -- is kept and the target stays up.  The example page of TensorRT-LLM's own Triton README
(fraction 0.4875 beside 1 used of 6239 blocks, tests/data/engines/tensorrt-llm-readme.prom) used to down its target.
Running and waiting come from `nv_trt_llm_request_metrics{request_type="active"|"waiting"}`, and batch
saturation is active / `request_type="max"` (the configured batch limit, which Triton does export).

Allocation failures: absent.  TRT-LLM's `paused_requests` is a gauge of requests paused *now* for lack of KV
blocks; summing it over scrapes would count one long pause many times and miss short ones between scrapes, so it
is not turned into a counter.  Fragmentation, memory efficiency and prefix-cache hit ratio: absent (the `reused`
block count's cumulative-vs-instant meaning is unverified).
"""

from __future__ import annotations

from infercast.catalog import BATCH_SATURATION_RATIO, KV_CACHE_USAGE_RATIO, REQUESTS_RUNNING, REQUESTS_WAITING
from infercast.exporters.base import Emitter, Raw, Sample, ScrapeError, Target, parse_text
from infercast.exporters.base import saturation as _saturation

BLOCKS = "nv_trt_llm_kv_cache_block_metrics"
REQUESTS = "nv_trt_llm_request_metrics"
WANTED = frozenset((BLOCKS, REQUESTS))
MAXIMA: dict[str, float] = {}  # one family mixes a ratio (fraction) with block counts: checked in build()
#: the families a Triton TRT-LLM page must have
EXPECTED = ((BLOCKS,), (REQUESTS,))
#: how far `fraction` may be from used / max of the same page (the text rounds both; 0.383 vs 2598/6784 = 0.38296)
FRACTION_TOLERANCE = 0.01

Key = tuple[str, str]  # (model, Triton model version)


def _table(rows, label: str) -> dict[Key, dict[str, float]]:
    out: dict[Key, dict[str, float]] = {}
    for labels, value in rows or ():
        kind = labels.get(label)
        if kind is not None:
            out.setdefault((labels.get("model", ""), labels.get("version", "")), {})[kind] = value
    return out


def usage(key: Key, b: dict[str, float]) -> float | None:
    """KV usage of one model version: `fraction`, checked against used / max when the page has both."""
    fraction = b.get("fraction")
    computed = b["used"] / b["max"] if b.get("max") and "used" in b else None
    where = f"model {key[0]!r} version {key[1]!r}"
    if fraction is not None and fraction > 1.0:
        raise ScrapeError(f"{where}: kv_cache_block_type fraction {fraction:g} is over 1")
    if fraction is not None and computed is not None and abs(fraction - computed) > FRACTION_TOLERANCE:
        raise ScrapeError(
            f"{where}: kv_cache_block_type fraction {fraction:g} disagrees with used / max = "
            f"{b['used']:g} / {b['max']:g} = {computed:.4f} on the same page"
        )
    return fraction if fraction is not None else computed


def parse(text: str, target: Target) -> list[Sample]:
    return build(parse_text(text, WANTED, MAXIMA), target)


def build(raw: Raw, target: Target, errors: dict[str, str] | None = None) -> list[Sample]:
    """The samples of the families read (`parse_text(text, WANTED, MAXIMA)`) -> catalog samples.  With `errors`
    (the exporter's isolating parse) a KV block family that cannot be trusted is dropped there, not raised."""
    blocks = _table(raw.get(BLOCKS), "kv_cache_block_type")
    reqs = _table(raw.get(REQUESTS), "request_type")
    keys = sorted(set(blocks) | set(reqs))
    if not keys:
        raise ScrapeError("no TensorRT-LLM families in the body (is this Triton's /metrics with the TRT-LLM backend?)")
    versions_of: dict[str, int] = {}
    for model, _ in keys:
        versions_of[model] = versions_of.get(model, 0) + 1
    out = Emitter()
    for key in keys:
        model, tv = key
        instance = target.name if versions_of[model] == 1 else f"{target.name}/v{tv}"
        labels = target.serving_labels(model or None, instance)
        b, r = blocks.get(key, {}), reqs.get(key, {})
        active = r.get("active")
        try:
            kv = usage(key, b)
        except ScrapeError as e:
            if errors is None:
                raise
            errors.setdefault(BLOCKS, str(e))
            kv = None
        out.add(KV_CACHE_USAGE_RATIO, labels, kv)
        out.add(REQUESTS_RUNNING, labels, active)
        out.add(REQUESTS_WAITING, labels, r.get("waiting"))
        out.add(BATCH_SATURATION_RATIO, labels, _saturation(active, r.get("max") or target.max_batch))
    return out.samples
