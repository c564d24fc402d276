"""KV-cache health: fragmentation, block-allocation failures, batch saturation and memory efficiency per model
version."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row

from . import queries as q
from .panels import Bands, DashboardSettings, Section, base, compose, pool_version, share, stat, ts


def kv_cache_health(s: DashboardSettings) -> Dashboard:
    return compose(
        base(
            "infercast-kv-cache",
            "infercast / KV-cache health",
            "Fragmentation, block-allocation failures, batch saturation and memory efficiency per model version.",
            *pool_version(),
        ),
        _fragmentation(s),
        _allocation(s),
        _batching_and_memory(s),
    )


def _fragmentation(s: DashboardSettings) -> Section:
    b = Bands.of(s)
    t = s.thresholds
    return [
        Row("Fragmentation"),
        stat(
            "Worst fragmentation",
            q.FRAGMENTATION_NOW,
            "percentunit",
            b.frag,
            description=f"The highest pool mean of the share of allocated KV capacity that holds no token: what "
            f"InfercastKVCacheFragmentationHigh reads (orange from {t.fragmentation_warning:g}).",
        ),
        ts(
            "Fragmentation by pool and version",
            q.FRAGMENTATION,
            unit="percentunit",
            thresholds=b.frag,
            description=f"The pool's mean, what InfercastKVCacheFragmentationHigh reads (orange from "
            f"{t.fragmentation_warning:g}; red from {t.fragmentation_release:g}, the full-instance alert's "
            "threshold): the fleet file's thresholds.",
            width=18,
        ),
        ts(
            "Fragmentation of full instances",
            q.FRAGMENTATION_FULL,
            unit="percentunit",
            thresholds=b.frag,
            description=f"The worst instance among those at KV usage {t.kv_forecast_trigger:g} or more, what "
            f"InfercastKVCacheFragmentationCritical reads (red from {t.fragmentation_release:g}); empty while "
            "no instance is that full.",
        ),
        ts(
            "Fragmentation by instance",
            q.FRAGMENTATION_BY_INSTANCE,
            unit="percentunit",
            thresholds=b.frag,
            description="Allocated KV capacity that holds no token / allocated KV capacity, per instance.",
        ),
        ts(
            "KV-cache usage by instance",
            q.KV_USAGE_BY_INSTANCE,
            unit="percentunit",
            thresholds=b.kv,
            description=f"KV-cache usage per instance; lines at the predictive trigger "
            f"({t.kv_forecast_trigger:g}) and the memory breaker ({t.memory_breaker:g}).",
        ),
    ]


def _allocation(s: DashboardSettings) -> Section:
    return [
        Row("Allocation"),
        ts(
            "Block-allocation failures (5m rate)",
            q.ALLOCATION_FAILURES,
            unit="ops",
            description="KV blocks that could not be allocated per second (vLLM: preemptions), per pool and version.",
        ),
        ts(
            "Block-allocation failures by instance",
            q.ALLOCATION_FAILURES_BY_INSTANCE,
            unit="ops",
            description="The same per instance: one instance failing alone is a node problem, all of them a "
            "load problem.",
        ),
    ]


def _batching_and_memory(s: DashboardSettings) -> Section:
    b = Bands.of(s)
    return [
        Row("Batching and memory"),
        share(
            "Batch saturation (running / maximum batch size)",
            q.BATCH_SATURATION,
            thresholds=b.batch,
            description="Requests running / the maximum batch size, averaged over a pool's instances: how full "
            f"the batches are, not how efficient. Red at {s.batch_pinned_ratio:g} (pinned: requests queue "
            "behind full batches; InfercastBatchSaturated).",
        ),
        ts(
            "Requests running and waiting",
            q.REQUESTS_RUNNING,
            q.REQUESTS_WAITING,
            unit="short",
            description="Requests in the engines' batches and waiting to be scheduled, per pool and version.",
        ),
        share(
            "Memory efficiency",
            q.MEMORY_EFFICIENCY,
            description="Memory holding live tokens and weights / memory allocated, mean per pool and version.",
        ),
        share(
            "Prefix-cache hit ratio",
            q.PREFIX_HIT,
            description="Prefix-cache hits / queries over the last window, mean per pool and version.",
        ),
    ]
