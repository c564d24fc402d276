"""Serving latency: vLLM's own histograms (TTFT, TPOT, end to end) per version, and the load behind them."""

from __future__ import annotations

from collections.abc import Mapping

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row
from grafana_foundation_sdk.builders.timeseries import Panel as Timeseries
from grafana_foundation_sdk.models.dashboard import ThresholdsConfig

from . import queries as q
from .panels import Bands, DashboardSettings, Section, base, compose, share, stat, ts, variable

BY_VERSION = "per version (the fleet file maps vLLM's model_name to versions)"


def latency(s: DashboardSettings) -> Dashboard:
    return compose(
        base(
            "infercast-latency",
            "infercast / Serving latency (vLLM)",
            "Time to first token, time per output token and end-to-end latency from vLLM's own histograms, per "
            "version, with the load behind them.",
            variable("model_name", "Model", q.VAR_MODEL_NAME),
        ),
        _now(s),
        _ttft(s),
        _tpot(s),
        _end_to_end(s),
        _load(s),
    )


def _seconds(
    title: str,
    family: str,
    quantiles: tuple[float, ...],
    v: Mapping[str, str],
    *,
    description: str,
    thresholds: ThresholdsConfig | None = None,
    mean: bool = False,
) -> Timeseries:
    """A latency panel: the `quantiles` (and with `mean`, the mean) of one vLLM histogram per version, in seconds
    from 0."""
    queries = [q.latency_quantile(family, p, v) for p in quantiles]
    if mean:
        queries.append(q.latency_mean(family, v))
    return ts(title, *queries, description=description, unit="s", thresholds=thresholds)


def _now(s: DashboardSettings) -> Section:
    v = s.versions
    b = Bands.of(s)
    return [
        Row("Now"),
        stat(
            "Time to first token p99 (worst version)",
            q.latency_worst(q.VLLM_TTFT, 0.99, v),
            "s",
            b.ttft,
            description="The highest 99th percentile of time to first token over the selected models' versions; "
            f"red above the latency SLO's target ({s.slo.ttft_seconds:g} s).",
        ),
        stat(
            "Time per output token p99 (worst version)",
            q.latency_worst(q.VLLM_TPOT, 0.99, v),
            "s",
            description="The highest 99th percentile of time per output token (a request's decode time / its "
            "output tokens after the first).",
        ),
        stat(
            "End-to-end latency p99 (worst version)",
            q.latency_worst(q.VLLM_E2E, 0.99, v),
            "s",
            description="The highest 99th percentile of end-to-end request latency (queue, prefill, decode).",
        ),
        stat(
            "Requests finished per second",
            q.Q(f"sum({q.vllm_rate(q.VLLM_SUCCESS)})", "finished", instant=True),
            "reqps",
            description="Requests the selected engines finished per second, every finish reason.",
        ),
    ]


def _ttft(s: DashboardSettings) -> Section:
    v = s.versions
    b = Bands.of(s)
    return [
        Row("Time to first token (TTFT)"),
        _seconds(
            "Time to first token by version",
            q.VLLM_TTFT,
            (0.5, 0.9, 0.99),
            v,
            thresholds=b.ttft,
            description=f"p50, p90 and p99 of vLLM's time to first token {BY_VERSION}: queueing plus prefill. "
            f"Red line: the latency SLO's target ({s.slo.ttft_seconds:g} s; objective: {s.slo.latency:g} of "
            "requests within it).",
        ),
        _seconds(
            "Queue time by version",
            q.VLLM_QUEUE,
            (0.5, 0.99),
            v,
            description="p50 and p99 of the time requests waited to be scheduled (the queueing part of TTFT).",
        ),
    ]


def _tpot(s: DashboardSettings) -> Section:
    v = s.versions
    return [
        Row("Time per output token (TPOT)"),
        _seconds(
            "Time per output token by version",
            q.VLLM_TPOT,
            (0.5, 0.99),
            v,
            mean=True,
            description=f"p50, p99 and mean of each request's time per output token {BY_VERSION}.",
        ),
        _seconds(
            "Inter-token latency by version",
            q.VLLM_ITL,
            (0.5, 0.99),
            v,
            description="p50 and p99 of the gap between consecutive output tokens (every token, not per "
            "request): the stutter a streaming user sees.",
        ),
    ]


def _end_to_end(s: DashboardSettings) -> Section:
    v = s.versions
    return [
        Row("End to end"),
        _seconds(
            "End-to-end latency by version",
            q.VLLM_E2E,
            (0.5, 0.9, 0.99),
            v,
            description=f"p50, p90 and p99 of vLLM's end-to-end request latency {BY_VERSION}.",
        ),
        ts(
            "Prefill and decode time p99 by version",
            q.latency_quantile(q.VLLM_PREFILL, 0.99, v, what="prefill"),
            q.latency_quantile(q.VLLM_DECODE, 0.99, v, what="decode"),
            unit="s",
            description="p99 of the time requests spent in prefill and in decode: which phase the "
            "end-to-end latency comes from.",
        ),
    ]


def _load(s: DashboardSettings) -> Section:
    v = s.versions
    b = Bands.of(s)
    return [
        Row("Load"),
        ts(
            "Prompt and generation tokens per second by version",
            q.vllm_by_version(q.vllm_rate(q.VLLM_PROMPT_TOKENS), v, f"prompt {q.VERSION_LEGEND}"),
            q.vllm_by_version(q.vllm_rate(q.VLLM_GENERATION_TOKENS), v, f"generation {q.VERSION_LEGEND}"),
            unit="short",
            description="Tokens the engines prefilled (prompt) and generated per second, summed per version: the "
            "throughput behind the latencies.",
        ),
        ts(
            "Requests running and waiting by version",
            q.vllm_by_version(q.vllm_series(q.VLLM_RUNNING), v, f"running {q.VERSION_LEGEND}"),
            q.vllm_by_version(q.vllm_series(q.VLLM_WAITING), v, f"waiting {q.VERSION_LEGEND}"),
            unit="short",
            description="Requests in the engines' batches and waiting to be scheduled, summed per version.",
        ),
        share(
            "KV-cache usage by version (fullest engine)",
            q.vllm_by_version(q.vllm_series(q.VLLM_KV_USAGE), v, q.VERSION_LEGEND, agg="max"),
            thresholds=b.kv,
            description=f"vLLM's kv_cache_usage_perc of the fullest engine per version; lines at the predictive "
            f"trigger ({s.thresholds.kv_forecast_trigger:g}) and the memory breaker "
            f"({s.thresholds.memory_breaker:g}) from the fleet file.",
        ),
        ts(
            "Preemptions per second by version",
            q.vllm_by_version(q.vllm_rate(q.VLLM_PREEMPTIONS), v, q.VERSION_LEGEND),
            unit="ops",
            description="Requests vLLM preempted because a KV block could not be allocated: latency spikes follow.",
        ),
        ts(
            "Requests finished per second by version and reason",
            q.Q(
                f"sum by (model_name, version, finished_reason) ({q.versioned(q.vllm_rate(q.VLLM_SUCCESS), v)})",
                f"{q.VERSION_LEGEND} {{{{finished_reason}}}}",
            ),
            unit="reqps",
            description="Finished requests per second by why they finished (stop, length, abort, error).",
        ),
    ]
