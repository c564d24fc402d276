"""`policy`, `guardrails` and `actuator`: what the control loop decides (the predictive policy), the bounds
around every decision, and the daemon that applies them (its mode, webhook and listen address).  Where its
actions go and who leads: `backends.py`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from .backends import Backend, EnvName, Leader, SingleLeader
from .base import (
    MAX_ACTUATOR_SECONDS,
    MAX_CHANGE_BUDGET_PER_HOUR,
    MAX_NODES_PER_POOL,
    PosFloat,
    Ratio,
    Strict,
    Tokens,
    _check_listen,
    _check_url,
)


class PolicyConfig(Strict):
    """The predictive policy (`actuators/policy.py`): when the upper band of a pool's KV forecast crosses
    `thresholds.kv_forecast_trigger` within the horizon, act a lead time ahead, in bounded steps, and relax one
    step at a time once the forecasts and the live figures are back under it."""

    prewarm_margin_seconds: Annotated[float, Field(ge=0.0)] = Field(
        30.0, description="start standby capacity this long more than a cold start before the forecast breach"
    )
    tighten_lead_seconds: PosFloat = Field(
        60.0, description="tighten admission when the forecast breach is this close (what is admitted must drain)"
    )
    context_steps: tuple[Tokens, ...] = Field(
        (16_000, 8_192), description="accepted prompt lengths, one step per decision (seed 000: 24k -> 16k -> 8k)"
    )
    tightened_memory_limit: Ratio = Field(0.75, description="memory admission threshold while tightened")
    tightened_normal_queue_seconds: Annotated[float, Field(ge=0.0)] = 1.0
    tightened_low_queue_seconds: Annotated[float, Field(ge=0.0)] = 0.0
    tightened_shared_rate_factor: Annotated[float, Field(gt=0.0, le=1.0)] = Field(
        1.0,
        description="once the pressed pools have no node left to start, the gateway's shared token bucket (normal and "
        "low work; urgent passes outside it) times this, where no stream has a quota lane of its own; 1 (the default) "
        "leaves it: turning away work that can wait for urgent goodput is the operator's call (docs/control.md)",
    )
    traffic_surge_factor: Annotated[float, Field(gt=1.0)] = Field(
        1.5, description="a traffic forecast whose upper band reaches this many times today's rate announces a peak"
    )
    target_kv: Ratio = Field(0.6, description="KV usage per node the pre-warmed replica count aims for")
    max_replicas_step: Annotated[int, Field(gt=0, le=MAX_NODES_PER_POOL)] = Field(
        4, description="at most this many replicas more per decision (HPA: 4 per 15 s)"
    )
    max_weight_shift: Ratio = Field(0.5, description="at most this share of a pool's weight moved per decision")
    hysteresis: Ratio = Field(0.05, description="relax only below the trigger minus this")
    relax_hold_seconds: Annotated[float, Field(ge=0.0)] = Field(
        60.0, description="forecasts and live figures must stay below the relax level this long before a step back"
    )


class GuardrailConfig(Strict):
    """Bounds around every decision of the actuator (`actuators/guardrails.py`)."""

    max_replicas_step: Annotated[int, Field(gt=0, le=MAX_NODES_PER_POOL)] = Field(
        4, description="at most this many replicas more or fewer per decision"
    )
    cooldown_seconds: Annotated[float, Field(ge=0.0)] = Field(
        60.0, description="one change per action kind and target in this long (rollbacks excepted)"
    )
    change_budget_per_hour: Annotated[int, Field(gt=0, le=MAX_CHANGE_BUDGET_PER_HOUR)] = Field(
        30, description="at most this many applied changes in any rolling hour"
    )
    verify_window_seconds: PosFloat = Field(
        60.0, description="check each action's effect this long after it (after the cold start for a scale-up)"
    )
    stale_after_seconds: PosFloat = Field(60.0, description="live figures older than this freeze the actuator")
    forecast_stale_after_seconds: PosFloat = Field(
        120.0, description="forecasts older than this (the forecaster down) freeze the actuator"
    )


class WebhookConfig(Strict):
    """Alertmanager's webhook into the actuator (served on `actuator.listen` beside /metrics)."""

    path: str = Field("/api/v1/alerts", pattern=r"^/[A-Za-z0-9/_.-]*$")
    token_env: EnvName = Field(
        "INFERCAST_ACTUATOR_TOKEN",
        description="environment variable holding the bearer token Alertmanager must send (unset: no auth, "
        "acceptable on loopback only)",
    )
    token_file: str | None = Field(
        None, min_length=1, description="a file holding that token (a mounted Secret); one source: not with token_env"
    )
    max_body_bytes: Annotated[int, Field(ge=1024, le=16 * 1024 * 1024)] = 4 * 1024 * 1024
    inbox_size: Annotated[int, Field(gt=0, le=10_000)] = Field(
        1000, description="alert events kept for the loop; the oldest are dropped when full"
    )
    dedup_seconds: Annotated[float, Field(ge=0.0, le=86_400.0)] = Field(
        300.0, description="an alert with the same fingerprint and status within this time is a duplicate"
    )
    alert_ttl_seconds: Annotated[float, Field(ge=60.0, le=86_400.0)] = Field(
        900.0,
        description="a firing alert not re-sent for this long is over (keep it above the actuator route's "
        "repeat_interval, 5m)",
    )


class ActuatorConfig(Strict):
    """The actuator daemon (`infercast actuator`): docs/actuator.md."""

    mode: Literal["advisory", "active"] = Field(
        "advisory", description="advisory: decide, log and publish, touch nothing (the default)"
    )
    backend: Backend | None = Field(None, description="where actions go; required to run the daemon")
    leader: Leader = SingleLeader()
    audit_db: str = Field("actuator-audit.db", min_length=1, description="SQLite audit trail (relative: to the cwd)")
    listen: str = Field("127.0.0.1:9402", description="host:port of /metrics and the webhook")
    webhook: WebhookConfig = WebhookConfig()
    prometheus_url: str | None = Field(None, description="live metrics (default: predictor.prometheus_url)")
    interval_seconds: Annotated[float, Field(gt=0.0, le=MAX_ACTUATOR_SECONDS)] = Field(
        15.0,
        description="how often the control loop runs on its own (live metrics, breakers, the newest forecasts); an "
        "alert the webhook accepts runs it at once as well",
    )
    misfire_grace_seconds: Annotated[float, Field(ge=1.0, le=MAX_ACTUATOR_SECONDS)] = Field(
        5.0, description="a loop run this late still runs; later ones are counted as missed"
    )
    apply_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    apply_backoff_seconds: Annotated[float, Field(gt=0.0, le=60.0)] = 0.2

    _listen = field_validator("listen")(lambda v: _check_listen(v))
    _prom = field_validator("prometheus_url")(lambda v: _check_url(v, ("http://", "https://")))
