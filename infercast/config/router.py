"""`router`: the twin router's and the gateway's own settings (health checks, retries, priority classes, the
static breaker, the token bucket)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from .base import PosFloat, PosInt, Ratio, Rps, Strict, _check_priority_shares


class RetryPolicy(Strict):
    max_attempts: PosInt = 3
    backoff_seconds: PosFloat = 1.0
    backoff_multiplier: Annotated[float, Field(ge=1.0)] = 2.0


class RouterConfig(Strict):
    cold_start_seconds: PosFloat = 90.0
    health_check_interval_seconds: PosFloat = 5.0
    health_check_failures: PosInt = 3
    breaker_latency_seconds: PosFloat = Field(0.2, description="static breaker: the seed's global 200 ms")
    retry: RetryPolicy = RetryPolicy()
    priority_shares: dict[str, Ratio] = Field(
        default_factory=lambda: {"urgent": 0.2, "normal": 0.6, "low": 0.2},
        description="share of traffic per priority class",
    )
    client_timeout_seconds: PosFloat = 30.0
    rate_limit_rps: Rps | None = Field(None, description="token-bucket admission at the router (None = off)")
    rate_limit_burst: Rps | None = Field(None, description="token-bucket depth (defaults to one second of rate)")
    rate_limit_queue_seconds: Annotated[float, Field(ge=0.0)] = Field(
        0.0, description="requests over the rate wait at the gateway up to this long before a 429 (0 = reject at once)"
    )
    breaker_window_seconds: PosFloat = 10.0
    breaker_open_seconds: PosFloat = 30.0
    breaker_error_ratio: Ratio = 0.5
    breaker_min_requests: PosInt = 20
    slo_seconds: dict[str, PosFloat] = Field(
        default_factory=lambda: {"urgent": 1.0, "normal": 5.0, "low": 30.0},
        description="time-to-first-token objective per priority (goodput counts requests within it)",
    )

    @field_validator("priority_shares")
    @classmethod
    def _shares(cls, v: dict[str, float]) -> dict[str, float]:
        return _check_priority_shares(v)
