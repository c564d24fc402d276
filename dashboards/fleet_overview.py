"""The fleet overview: where traffic goes, how full the KV caches are, how fast requests are served, and how
close the fleet is to an avalanche."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row

from . import queries as q
from .panels import (
    HEALTH_BANDS,
    RISK_BANDS,
    Bands,
    DashboardSettings,
    Section,
    base,
    compose,
    pool_version,
    share,
    stat,
    ts,
)


def fleet_overview(s: DashboardSettings) -> Dashboard:
    return compose(
        base(
            "infercast-fleet",
            "infercast / Fleet overview",
            "Where traffic goes, how full the KV caches are, how fast requests are served, and how close the fleet "
            "is to an avalanche.",
            *pool_version(),
        ),
        _now(s),
        _slos(s),
        _traffic(s),
        _latency(s),
        _kv_cache_and_risk(s),
        _degradations(s),
    )


def _now(s: DashboardSettings) -> Section:
    b = Bands.of(s)
    t = s.thresholds
    return [
        Row("Now"),
        stat(
            "Fleet KV-cache usage (fullest instance)",
            q.FLEET_KV,
            "percentunit",
            b.kv,
            description=f"KV-cache usage of the fullest instance of the selected pools: what the memory breaker "
            f"and InfercastKVCacheUsageHigh act on (a fleet mean stays green while one pool refuses). Orange "
            f"from {t.kv_forecast_trigger:g} (the predictive trigger), red from {t.memory_breaker:g} (the memory "
            "breaker): the fleet file's thresholds.",
        ),
        stat(
            "Worst avalanche risk",
            q.AVALANCHE_RISK_NOW,
            "none",
            RISK_BANDS,
            description="0-100: the highest risk, over the selected pools, that a failure cascades "
            "(its failover targets' headroom included).",
        ),
        stat(
            "Worst health score",
            q.HEALTH_WORST,
            "none",
            HEALTH_BANDS,
            description="0-100: the lowest health score of the selected pools and versions "
            "(the weakest dimensions are below).",
        ),
        stat(
            "Soonest forecast breach",
            q.BREACH_ETA_NOW,
            "s",
            description="Seconds until the soonest forecast upper band crosses its threshold; "
            "+Inf: no breach within the horizon.",
        ),
    ]


def _slos(s: DashboardSettings) -> Section:
    b = Bands.of(s)
    return [
        Row("What users get (SLOs)"),
        ts(
            "Failed requests per second by outcome",
            q.ERRORS_BY_OUTCOME,
            unit="reqps",
            description="Requests that did not end ok, per second, by outcome (error, timeout, rejected: the "
            "memory breaker or a full queue, shed: no pool could take it; retried: a failed attempt the client "
            "tries again).",
        ),
        ts(
            "Availability: requests failed (5m and 1h)",
            *q.slo_errors("availability"),
            unit="percentunit",
            thresholds=b.availability,
            description=f"Share of requests that ended in error, timeout, rejected or shed (the availability "
            f"SLI). Red line: the error budget of the {s.slo.availability:g} objective (the fleet file's slo:, "
            "a pool's own in its burn rate).",
        ),
        ts(
            "Availability burn rate",
            *q.slo_burn("availability"),
            unit="none",
            thresholds=b.burn,
            description=f"The failed share over the pool's error budget, over the pages' windows: the fast page "
            f"fires when 1h and 5m are both above {s.burn_fast:g} (red), the slow page when 6h and 30m are above "
            f"{s.burn_slow:g} (orange), the ticket above 1 (yellow).",
        ),
        ts(
            "Latency: first tokens over target (5m and 1h)",
            *q.slo_errors("latency"),
            unit="percentunit",
            thresholds=b.latency,
            description=f"Share of requests whose first token came after {s.slo.ttft_seconds:g} s (the latency "
            f"SLI, from the engines' TTFT buckets). Red line: the error budget of the {s.slo.latency:g} "
            "objective.",
        ),
        ts(
            "Latency burn rate",
            *q.slo_burn("latency"),
            unit="none",
            thresholds=b.burn,
            description=f"The late share over the pool's latency budget: fast page above {s.burn_fast:g} on 1h "
            f"and 5m (red), slow page above {s.burn_slow:g} on 6h and 30m (orange), ticket above 1 (yellow).",
        ),
        ts(
            "Engines up and down by pool",
            q.ENGINES_UP,
            q.ENGINES_DOWN,
            unit="short",
            description="Engines answering their scrape per pool (Prometheus' own scrape of the engines, or the "
            "exporter's engine targets); InfercastEnginesDown pages at half of a pool down.",
        ),
    ]


def _traffic(s: DashboardSettings) -> Section:
    return [
        Row("Traffic"),
        share(
            "Request share per version",
            q.REQUEST_SHARE,
            description="Each version's share of the router's requests (5-minute rate): where traffic goes, "
            "and how much has failed over.",
        ),
        ts(
            "Requests per second by pool and version",
            q.REQUEST_RATE,
            unit="reqps",
            description="Requests the router handled per second (5-minute rate), every outcome.",
        ),
    ]


def _latency(s: DashboardSettings) -> Section:
    b = Bands.of(s)
    return [
        Row("Latency (vLLM)"),
        ts(
            "Time to first token p99 by version",
            q.latency_quantile(q.VLLM_TTFT, 0.99, s.versions, q.SCOPE),
            unit="s",
            thresholds=b.ttft,
            description="99th percentile of vLLM's time to first token, per version (the fleet file maps "
            "model names to versions), over every engine in the cluster and namespace; red line: the latency "
            f"SLO's target ({s.slo.ttft_seconds:g} s). The Serving latency dashboard has the rest.",
        ),
        ts(
            "End-to-end latency p99 by version",
            q.latency_quantile(q.VLLM_E2E, 0.99, s.versions, q.SCOPE),
            unit="s",
            description="99th percentile of vLLM's end-to-end request latency (queue, prefill and decode), "
            "per version.",
        ),
    ]


def _kv_cache_and_risk(s: DashboardSettings) -> Section:
    b = Bands.of(s)
    t = s.thresholds
    return [
        Row("KV cache and risk"),
        share(
            "KV-cache usage by pool and version",
            q.KV_BY_POOL,
            q.KV_MAX_BY_POOL,
            q.FLEET_KV_MEAN,
            thresholds=b.kv,
            description=f"Mean and fullest instance per pool and version, and the fleet's mean over every "
            f"instance. Orange line: the predictive trigger "
            f"({t.kv_forecast_trigger:g}); red: the memory breaker ({t.memory_breaker:g}), from the fleet file.",
        ),
        ts(
            "Avalanche risk by pool",
            q.AVALANCHE_RISK,
            unit="none",
            thresholds=RISK_BANDS,
            hi=100,
            description="0-100 risk that a failure in the pool cascades (headroom of its failover targets included).",
        ),
        ts(
            "Health score",
            q.HEALTH_SCORE,
            unit="none",
            thresholds=HEALTH_BANDS,
            hi=100,
            description="0-100 health per pool and version, composed of the dimensions beside.",
        ),
        stat(
            "Weakest health dimensions",
            q.HEALTH_DIMENSIONS,
            "none",
            HEALTH_BANDS,
            width=12,
            description="The five lowest-scoring health dimensions now (0-100), over the selected pools.",
        ),
    ]


def _degradations(s: DashboardSettings) -> Section:
    return [
        Row("Degradations"),
        ts(
            "Degradations by reason",
            q.DEGRADATIONS_BY_REASON,
            unit="ops",
            description="Requests the router degraded to another version per second (5-minute rate), by why.",
        ),
        ts(
            "Degradation paths",
            q.DEGRADATIONS_BY_PATH,
            unit="ops",
            description="Degradations per second from one version to another (5-minute rate).",
        ),
    ]
