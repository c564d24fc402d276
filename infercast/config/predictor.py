"""`predictor` and `events`: the forecaster's service settings and the calendar it is told of."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .base import PosFloat, PosInt, Ratio, Rps, Strict


class Event(Strict):
    """A calendar event for the traffic forecaster (promotions, version upgrades)."""

    name: str
    kind: Literal["promotion", "upgrade", "holiday", "maintenance"] = "promotion"
    start: str = Field(description="ISO time or seconds from the trace start, e.g. '2024-11-11T00:00:00' or '600'")
    end: str
    lower_window_seconds: Annotated[float, Field(ge=0)] = 0.0
    upper_window_seconds: Annotated[float, Field(ge=0)] = 0.0
    expected_rps: Rps | None = Field(
        None,
        description="the requests per second the organisers expect at the event's peak, fleet-wide: the traffic "
        "forecast reads it before the event (spread over the pools as today's traffic is) and the `scheduled` arm "
        "pre-scales for it (unset: it takes every spare node)",
    )


class PredictorConfig(Strict):
    listen: str = "127.0.0.1:9401"
    prometheus_url: str | None = None
    horizon_seconds: PosFloat = 300.0
    step_seconds: PosFloat = 15.0
    history_seconds: PosFloat = 6 * 3600.0
    refit_interval_seconds: PosFloat = 1800.0
    forecast_interval_seconds: PosFloat = 15.0
    band: tuple[Ratio, Ratio] = (0.1, 0.9)
    min_history_points: PosInt = 20
    stale_after_seconds: PosFloat = 120.0
    model_file: str | None = None
    time_scale: PosFloat = Field(
        1.0,
        description="simulated seconds per wall second of the fleet it watches: 1 in production; a stack over a twin "
        "run faster than real time (`--twin-speed S`) sets S, and the durations here are then wall seconds, so the "
        "LSTM, trained in the fleet's own time, reads its history at S times its step "
        "(`infercast.predictors.timescale`)",
    )
    band_adaptation: Annotated[float, Field(ge=0)] = Field(
        0.05, description="adaptive conformal step (log-width per forecast) of the online band calibration; 0 = off"
    )
    event_onset_seconds: Annotated[float, Field(ge=0)] = Field(
        30.0,
        description="a calendar event never seen before may fill the KV cache from this long after it starts: "
        "the KV upper band is the ceiling from then for one horizon (predictors/calendar.py)",
    )
    traffic_bound_factor: Annotated[float, Field(gt=1)] = Field(
        1.5, description="traffic forecasts never exceed this times the highest rate in the history"
    )
    torch_threads: PosInt = Field(
        1,
        description="torch's CPU threads in `infercast predictor` (the LSTM's batched pass): 1, because the tick's "
        "pass is small matrix work that a second thread barely speeds up on 2 cores, while torch's default (one per "
        "core) fights the rest of the process and the machine's other jobs for them (docs/lstm.md)",
    )
    legacy_forecast_labels: bool = Field(
        True,
        description="deprecated, removed in the next release with the labels it keeps: also label every forecast "
        "series with its former names, model (= forecaster) and ml_forecast (= band, as yhat, yhat_lower, "
        "yhat_upper), on the same series, so queries and alerts written against them keep matching; false: the new "
        "labels only (everything infercast ships reads only those; docs/predictors.md, Deprecated labels)",
    )
