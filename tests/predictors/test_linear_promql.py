"""predict_linear: our regression is PromQL's, checked against a real Prometheus on the same samples."""

from __future__ import annotations

import time

import numpy as np
import pytest
import requests

from infercast.predictors.base import History
from infercast.predictors.linear import PredictLinear, predict_linear, promql_linear_regression
from tests.predictors.conftest import openmetrics, start_backfilled


def test_regression_intercept_is_at_the_evaluation_time_not_the_last_sample():
    t = np.array([0.0, 10.0, 20.0])
    y = np.array([1.0, 2.0, 3.0])
    slope, intercept = promql_linear_regression(t, y, t_eval=25.0)
    assert slope == pytest.approx(0.1)
    assert intercept == pytest.approx(3.5)  # the line's value at t=25, where the query is evaluated
    assert promql_linear_regression(t, np.full(3, 4.0), 20.0) == (0.0, 4.0)  # constant range: slope 0


def test_forecaster_extends_a_ramp_exactly():
    t = np.arange(0, 1800, 15.0)
    h = History(t, 0.1 + 2e-4 * t)
    f = PredictLinear().forecast(h, 300)
    assert f.t[-1] == t[-1] + 300
    assert f.yhat[-1] == pytest.approx(0.1 + 2e-4 * (t[-1] + 300))


@pytest.mark.servers
def test_matches_prometheus_predict_linear(tmp_path):
    now = float(int(time.time()) // 15 * 15)
    rng = np.random.default_rng(3)
    ts = now - 3600 + 15 * np.arange(240)
    ys = 0.3 + 0.1 * np.sin(ts / 700) + rng.normal(0, 0.02, len(ts))
    lab = {"pool": "p", "version": "v4", "instance": "i"}
    text = openmetrics([("infercast_kv_cache_usage_ratio", "gauge", lab, list(zip(ts, ys, strict=True)))])
    with start_backfilled(tmp_path, text) as prom:
        # Evaluation times on a sample (the 15m range's left edge is then a sample too: closed interval in 2.x)
        # and between samples (the intercept is at the evaluation time).
        for t_eval in (ts[100], ts[180] + 7.0, ts[-1]):
            r = requests.get(
                f"{prom.url}/api/v1/query",
                params={
                    "query": "predict_linear(infercast_kv_cache_usage_ratio[15m], 300)",
                    "time": repr(float(t_eval)),
                },
                timeout=5,
            ).json()
            assert r["status"] == "success", r
            theirs = float(r["data"]["result"][0]["value"][1])
            # Prometheus stores sample times in ms; use the same times.
            ours = predict_linear(np.round(ts * 1000) / 1000, ys, t_eval, np.array([300.0]), 900.0)[0]
            assert ours == pytest.approx(theirs, rel=1e-9, abs=1e-12)
        # The forecaster's value at the horizon is that query evaluated at the last sample.
        f = PredictLinear().forecast(History(ts, ys), 300)
        r = requests.get(
            f"{prom.url}/api/v1/query",
            params={"query": "predict_linear(infercast_kv_cache_usage_ratio[15m], 300)", "time": repr(float(ts[-1]))},
            timeout=5,
        ).json()
        assert f.yhat[-1] == pytest.approx(float(r["data"]["result"][0]["value"][1]), rel=1e-9)
