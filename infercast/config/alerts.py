"""`slo` and `alerting`: the service-level objectives the burn-rate alerts read, and what the generated alerts
link to (alertrules/ reads these; docs/alerting.md)."""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, field_validator

from .base import Strict

#: the burn rates of the SLO alerts (the SRE workbook's multi-window, multi-burn-rate alerts, a 30-day budget):
#: fast page 14.4x over 1 h and 5 m (2% of the budget in an hour), slow page 6x over 6 h and 30 m (5% in six hours),
#: ticket 1x over the slow windows (the budget spent as fast as it accrues)
SLO_BURN_FAST, SLO_BURN_SLOW, SLO_BURN_TICKET = 14.4, 6.0, 1.0
#: vLLM's time-to-first-token histogram buckets (vllm/v1/metrics/loggers.py, the same as the twin's exposition):
#: the latency SLI counts the requests in the bucket at the target, so a target must be one of its bounds
TTFT_BUCKET_BOUNDS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip


def _check_objective(v: float | None, key: str) -> float | None:
    # the fast page fires at an error ratio of 14.4 x the budget: an objective whose budget times 14.4 is 100% or
    # more could never page
    if v is not None and not (1.0 - 1.0 / SLO_BURN_FAST) < v < 1.0:
        raise ValueError(
            f"{key} objective {v} must be above {1.0 - 1.0 / SLO_BURN_FAST:.4f} and below 1 (the fast page fires "
            f"at {SLO_BURN_FAST:g} x the error budget)"
        )
    return v


def _check_ttft(v: float | None) -> float | None:
    if v is not None and v not in TTFT_BUCKET_BOUNDS:
        raise ValueError(
            f"ttft_seconds {v} is not a bucket bound of the engines' time-to-first-token histogram "
            f"(one of {', '.join(f'{b:g}' for b in TTFT_BUCKET_BOUNDS)})"
        )
    return v


class PoolObjectives(Strict):
    """One pool's objectives; what is left out is the fleet's (`slo:`)."""

    availability: float | None = Field(None, description="share of requests that must end well")
    latency: float | None = Field(None, description="share of requests whose first token must come within ttft")
    ttft_seconds: float | None = Field(None, description="the latency target: a bound of the TTFT histogram")

    @field_validator("availability", "latency")
    @classmethod
    def _objective(cls, v: float | None, info: Any) -> float | None:
        return _check_objective(v, info.field_name)

    @field_validator("ttft_seconds")
    @classmethod
    def _ttft(cls, v: float | None) -> float | None:
        return _check_ttft(v)


class SloConfig(Strict):
    """Service-level objectives per pool (and so per model version), read by the SLO burn-rate alerts.

    Availability: the share of requests that end `ok` (not error, timeout, rejected or shed) among every request
    that ended, from the router's `infercast_router_requests_total` (or, with `metrics.source: engines`, the
    engines' finished-reason counters: abort and error are bad).  Latency: the share of requests whose time to first
    token is within `ttft_seconds`, from the engines' TTFT histogram buckets."""

    availability: float = Field(0.99, description="share of requests that must end well (30-day budget)")
    latency: float = Field(0.95, description="share of requests whose first token must come within ttft_seconds")
    ttft_seconds: float = Field(2.5, description="the latency target: a bound of the engines' TTFT histogram")
    pools: dict[str, PoolObjectives] = Field(default_factory=dict, description="per-pool objectives")

    @field_validator("availability", "latency")
    @classmethod
    def _objective(cls, v: float, info: Any) -> float:
        _check_objective(v, info.field_name)
        return v

    @field_validator("ttft_seconds")
    @classmethod
    def _ttft(cls, v: float) -> float:
        _check_ttft(v)
        return v

    def of(self, pool: str) -> tuple[float, float, float]:
        """The pool's (availability, latency, ttft_seconds): its own where set, else the fleet's."""
        p = self.pools.get(pool, PoolObjectives())
        return (
            self.availability if p.availability is None else p.availability,
            self.latency if p.latency is None else p.latency,
            self.ttft_seconds if p.ttft_seconds is None else p.ttft_seconds,
        )


class AlertingConfig(Strict):
    """What the generated alerts link to."""

    runbook_base_url: str | None = Field(
        None,
        description="where the runbooks are published (https://...): every alert's runbook_url is <base>/<Alert>.md; "
        "unset: $INFERCAST_RUNBOOK_BASE_URL, else the runbooks' path in the package (not a link a pager opens)",
    )

    @field_validator("runbook_base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", v):
            raise ValueError(f"runbook_base_url must be an http(s) URL a pager can open, got {v!r}")
        return v.rstrip("/") if v else v
