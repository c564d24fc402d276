"""Forecasts: what the predictors expect 5 minutes ahead, with their bands, breach ETAs, freshness and error."""

from __future__ import annotations

from grafana_foundation_sdk.builders.dashboard import Dashboard, Row

from . import queries as q
from .panels import Bands, DashboardSettings, Section, base, compose, pool_version, share, stat, ts


def forecasts(s: DashboardSettings) -> Dashboard:
    return compose(
        base(
            "infercast-forecasts",
            "infercast / Forecasts",
            "What the predictors expect 5 minutes ahead, with their bands, breach ETAs, freshness and error.",
            *pool_version(),
        ),
        _kv_cache_usage(s),
        _traffic(s),
        _forecast_quality(s),
    )


def _kv_cache_usage(s: DashboardSettings) -> Section:
    b = Bands.of(s)
    t = s.thresholds
    return [
        Row("KV-cache usage"),
        share(
            "KV-cache usage: actual and forecast 5 minutes ahead (band)",
            q.ACTUAL_KV,
            q.FORECAST_KV,
            q.FORECAST_KV_LOWER,
            q.FORECAST_KV_UPPER,
            thresholds=b.kv,
            width=24,
            description="The fullest instance now, and the forecast for now + horizon with its band; the "
            f"predictive alert fires on the upper band over {t.kv_forecast_trigger:g} (orange line).",
        ),
        stat(
            "Soonest breach",
            q.BREACH_ETA_NOW,
            "s",
            width=6,
            description="Seconds until the soonest forecast upper band crosses its threshold; +Inf: none within "
            "the horizon.",
        ),
        ts(
            "Breach ETA by pool and version",
            q.BREACH_ETA,
            unit="s",
            width=18,
            description="Seconds until each forecast upper band crosses the threshold it names "
            "(no line: not within the horizon).",
        ),
    ]


def _traffic(s: DashboardSettings) -> Section:
    return [
        Row("Traffic"),
        ts(
            "Requests per second: actual and forecast",
            q.ACTUAL_RPS,
            q.FORECAST_RPS,
            q.FORECAST_RPS_UPPER,
            unit="reqps",
            description="The router's request rate now and the forecast for now + horizon with its upper band.",
        ),
    ]


def _forecast_quality(s: DashboardSettings) -> Section:
    return [
        Row("Forecast quality"),
        ts(
            "Forecast age by forecaster",
            q.FORECAST_AGE,
            unit="s",
            width=8,
            description="Seconds since each forecaster's last successful round; InfercastForecastsStale pages "
            "when it grows past the predictor's staleness limit.",
        ),
        stat(
            "Skipped forecasts by reason",
            q.FORECAST_SKIPS,
            "none",
            width=4,
            description="Series with no forecast published now, by why (too little history, gaps, a source down...).",
        ),
        ts(
            "Live backtest: mean absolute error by forecaster",
            q.BACKTEST_MAE,
            unit="percentunit",
            description="Each forecaster's point forecast from one horizon ago against the KV usage that followed.",
        ),
    ]
