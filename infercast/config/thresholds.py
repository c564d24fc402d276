"""`thresholds`: the policy numbers the user sets once and every part reads (the actuator's policy, the
predictor's breach forecasts, the alert rules, the dashboards, the exporter's health scores)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .base import PosFloat, PosInt, Ratio, Strict


class Thresholds(Strict):
    """Policy numbers from the seeds' incident reports: one place for every threshold."""

    kv_forecast_trigger: Ratio = 0.75
    kv_forecast_for_seconds: Annotated[float, Field(ge=0)] = Field(
        30.0,
        description="the predictive alert's `for:`: the upper band must stay over the trigger this long "
        "(30 s = three consecutive forecasts at the 15 s tick); chosen by bench/tune_alarm.py on unscored twin runs",
    )
    kv_forecast_hysteresis: Annotated[float, Field(ge=0, lt=0.5)] = Field(
        0.0,
        description="once firing, the predictive alert stays until the upper band is below the trigger minus this "
        "(0: bench/tune_alarm.py found 0.03 no better and 0.05 or more costing lead on the tuning runs)",
    )
    memory_breaker: Ratio = 0.80
    fragmentation_release: Ratio = 0.25
    fragmentation_warning: Ratio = 0.20
    fragmentation_green: Ratio = 0.15
    context_reject_tokens: PosInt = 24_000
    timeout_base_seconds: PosFloat = 0.2
    timeout_context_tokens: PosInt = 4_000
    timeout_qps_unit: PosFloat = 3_000.0
    timeout_max_load_factor: PosFloat = 3.0
    gpu_temperature_celsius: PosFloat = 85.0
    gpu_utilization_breaker: Ratio = 0.80
    queue_saturated: PosInt = 5
    # scoring of the health dimensions and avalanche risk (exporters/derive.py)
    allocation_failures_bad_per_request_second: PosFloat = Field(
        0.01, description="allocation failures per second per running request at which that dimension scores 0"
    )
    queue_bad_factor: PosFloat = Field(10.0, description="queue depth scores 0 at this many times queue_saturated")
    router_share_bad: Ratio = Field(0.05, description="share of timeouts, errors or degradations that scores 0")
    gpu_temperature_margin_celsius: PosFloat = Field(
        15.0, description="gpu_temperature starts losing points this far below gpu_temperature_celsius"
    )
    nodes_down_full_pressure: Ratio = Field(
        0.25, description="a pool with this share of its serving targets down is at full avalanche pressure"
    )
