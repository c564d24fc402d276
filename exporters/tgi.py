"""Hugging Face TGI (router `/metrics`) to the catalog.

TGI has no model label, so every series takes the target's `version` (and pool) from the fleet file.
Usage is the token budget the running batch holds: `tgi_batch_current_max_tokens / tgi_batch_max_total_tokens`
(the v3 backend derives `max_batch_total_tokens` from the KV memory left after the weights, so this is the share
of the KV budget reserved).  Batch saturation needs `targets[].max_batch` (TGI's `--max-batch-size` is not
exported).  TGI exports no fragmentation, no allocation failures (`tgi_request_failure{err="overloaded"}` is a
full queue, not a KV block) and no prefix-cache counters: those stay absent.
"""

from __future__ import annotations

from infercast.catalog import BATCH_SATURATION_RATIO, KV_CACHE_USAGE_RATIO, REQUESTS_RUNNING, REQUESTS_WAITING
from infercast.exporters.base import Emitter, Raw, Sample, ScrapeError, Target, parse_text
from infercast.exporters.base import saturation as _saturation

QUEUE = "tgi_queue_size"
BATCH = "tgi_batch_current_size"
BATCH_TOKENS = "tgi_batch_current_max_tokens"
MAX_TOKENS = "tgi_batch_max_total_tokens"
WANTED = frozenset((QUEUE, BATCH, BATCH_TOKENS, MAX_TOKENS))
MAXIMA: dict[str, float] = {}
#: the families a TGI page must have
EXPECTED = ((QUEUE,), (BATCH,), (BATCH_TOKENS,), (MAX_TOKENS,))


def _one(raw: dict, name: str) -> float | None:
    rows = raw.get(name)
    return sum(v for _, v in rows) if rows else None


def parse(text: str, target: Target) -> list[Sample]:
    return build(parse_text(text, WANTED, MAXIMA), target)


def build(raw: Raw, target: Target) -> list[Sample]:
    """The samples of the families read (`parse_text(text, WANTED, MAXIMA)`) -> catalog samples."""
    if QUEUE not in raw and BATCH not in raw:
        raise ScrapeError("no TGI families in the body (is this a TGI router /metrics endpoint?)")
    labels = target.serving_labels(None, target.name)
    running = _one(raw, BATCH)
    tokens, budget = _one(raw, BATCH_TOKENS), _one(raw, MAX_TOKENS)
    out = Emitter()
    out.add(KV_CACHE_USAGE_RATIO, labels, tokens / budget if tokens is not None and budget else None)
    out.add(REQUESTS_RUNNING, labels, running)
    out.add(REQUESTS_WAITING, labels, _one(raw, QUEUE))
    out.add(BATCH_SATURATION_RATIO, labels, _saturation(running, target.max_batch))
    return out.samples
