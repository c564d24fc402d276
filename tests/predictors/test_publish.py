"""Forecasts as metrics: the exact exposition a scrape returns, and what is refused."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from infercast.predictors.base import Forecast
from infercast.predictors.publish import (
    LatestSamples,
    breach_eta_sample,
    exposition,
    forecast_samples,
    sample,
    skipped_sample,
)


def _fc():
    t = 1000.0 + 15 * np.arange(1, 21)
    return Forecast(t, np.linspace(0.5, 0.7, 20), np.linspace(0.45, 0.6, 20), np.linspace(0.55, 0.8, 20), model="lstm")


def test_exposition_of_a_kv_forecast_and_its_eta():
    fc = _fc()
    samples = [*forecast_samples("kv", "v4-main", "v4", fc, 300), breach_eta_sample("v4-main", "v4", 0.75, 15.0)]
    text = exposition(samples)
    assert text.splitlines() == [
        "# HELP infercast_forecast_breach_eta_seconds Seconds until the forecast upper band crosses the threshold "
        "(+Inf if not within the horizon), per aggregate.",
        "# TYPE infercast_forecast_breach_eta_seconds gauge",
        'infercast_forecast_breach_eta_seconds{aggregate="mean",pool="v4-main",threshold="0.75",version="v4"} 15.0',
        "# HELP infercast_forecast_kv_cache_usage_ratio Forecast of KV-cache usage at the horizon: of the pool's mean "
        "(aggregate=mean) or its fullest instance (max); band=point, lower or upper. Deprecated: until the next "
        "release the same series also carries model (= forecaster) and ml_forecast (= band: yhat, yhat_lower, "
        "yhat_upper) unless predictor.legacy_forecast_labels is false.",
        "# TYPE infercast_forecast_kv_cache_usage_ratio gauge",
        'infercast_forecast_kv_cache_usage_ratio{aggregate="mean",band="point",forecaster="lstm",horizon="300s",'
        'pool="v4-main",version="v4"} 0.7',
        'infercast_forecast_kv_cache_usage_ratio{aggregate="mean",band="lower",forecaster="lstm",horizon="300s",'
        'pool="v4-main",version="v4"} 0.6',
        'infercast_forecast_kv_cache_usage_ratio{aggregate="mean",band="upper",forecaster="lstm",horizon="300s",'
        'pool="v4-main",version="v4"} 0.8',
    ]
    assert fc.breach_eta(0.75, 1000.0) == 255.0  # the upper band first reaches 0.75 at its 17th point


def test_wrong_labels_and_unknown_reasons_are_refused():
    with pytest.raises(ValueError, match="takes labels"):
        sample("infercast_forecast_breach_eta_seconds", 1.0, pool="p")
    with pytest.raises(ValueError, match="reason='tired'"):
        skipped_sample("p", "v4", "kv", "tired")
    with pytest.raises(KeyError, match="not in the infercast metric catalog"):
        sample("infercast_forecast_banana", 1.0)


def test_collector_serves_the_latest_snapshot_only():
    reg = CollectorRegistry()
    latest = LatestSamples()
    reg.register(latest)
    latest.set([skipped_sample("p", "v4", "kv", "stale")])
    assert b'infercast_forecast_skipped{pool="p",reason="stale",series="kv",version="v4"} 1.0' in generate_latest(reg)
    latest.set(forecast_samples("kv", "p", "v4", _fc(), 300))
    body = generate_latest(reg)
    assert b"infercast_forecast_skipped" not in body  # recovered: the skip marker is gone, not left at a stale 1
    assert b'band="point"' in body


def test_forecasts_written_back_to_the_memory_store_read_like_any_series():
    from infercast.predictors.publish import write_to
    from infercast.store.memory import MemoryStore

    st = MemoryStore()
    write_to(st, forecast_samples("kv", "v4-main", "v4", _fc(), 300), 1000.0)
    (s,) = st.query_range("infercast_forecast_kv_cache_usage_ratio", {"band": "upper"}, 1000, 1000, 15)
    assert s.labels == {
        "pool": "v4-main",
        "version": "v4",
        "forecaster": "lstm",
        "horizon": "300s",
        "band": "upper",
        "aggregate": "mean",
    }
    assert s.v.tolist() == [0.8]
