"""The deprecated forecast labels: `model` and `ml_forecast` ride on the same series as `forecaster` and `band` while
`predictor.legacy_forecast_labels` is on (the default), and are gone when it is off; the series count is the same
both ways, so a user's old queries keep matching without a doubled series."""

from __future__ import annotations

import threading
import time

import numpy as np
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from infercast.catalog import FORECAST_BANDS
from infercast.config import PredictorConfig, load_config
from infercast.predictors.base import Forecast
from infercast.predictors.cli import serve
from infercast.predictors.publish import (
    breach_eta_sample,
    exposition,
    forecast_samples,
    kv_forecast_samples_many,
    last_success_sample,
    skipped_sample,
)
from infercast.servers import free_port

FORMER_BAND = {"point": "yhat", "lower": "yhat_lower", "upper": "yhat_upper"}
RENAMED = {"model", "ml_forecast"}


def _fc(model: str) -> Forecast:
    t = 1000.0 + 15 * np.arange(1, 21)
    return Forecast(t, np.linspace(0.5, 0.7, 20), np.linspace(0.45, 0.6, 20), np.linspace(0.55, 0.8, 20), model=model)


def _samples():
    """A tick's worth of every forecast family: KV (both paths: per series and batched), traffic, the ETA, a skip
    marker and the last-success time."""
    return [
        *forecast_samples("kv", "v4-main", "v4", _fc("lstm_aci"), 300, "max"),
        *kv_forecast_samples_many(
            [("v4-long", "v4")], "lstm_aci", np.array([[0.5, 0.4, 0.6]]), 300, "mean", 0.75, np.array([np.inf])
        ),
        *forecast_samples("rps", "v4-main", "v4", _fc("prophet_anchored_aci"), 300),
        breach_eta_sample("v4-main", "v4", 0.75, 15.0, "max"),
        skipped_sample("v3.5-fallback", "v3.5", "kv", "stale"),
        last_success_sample("lstm_aci", 1000.0),
    ]


def _scraped(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for fam in text_string_to_metric_families(text) for s in fam.samples]


def _without_renamed(series: list[tuple[str, dict[str, str], float]]) -> list[tuple[str, dict[str, str], float]]:
    return [(n, {k: v for k, v in labels.items() if k not in RENAMED}, v) for n, labels, v in series]


def test_the_switch_is_on_by_default_and_a_fleet_file_can_turn_it_off(tmp_path, repo_root):
    assert PredictorConfig().legacy_forecast_labels is True
    data = yaml.safe_load((repo_root / "examples" / "flash-sale.yaml").read_text())
    assert load_config(repo_root / "examples" / "flash-sale.yaml").predictor.legacy_forecast_labels is True
    data.setdefault("predictor", {})["legacy_forecast_labels"] = False
    off = tmp_path / "fleet.yaml"
    off.write_text(yaml.safe_dump(data))
    assert load_config(off).predictor.legacy_forecast_labels is False


def test_with_the_switch_on_each_forecast_series_carries_both_names_and_no_series_is_added():
    on = _scraped(exposition(_samples(), legacy_labels=True))
    off = _scraped(exposition(_samples(), legacy_labels=False))
    assert len(on) == len(off) == len(_samples())  # one series per sample either way: nothing doubled
    assert _without_renamed(on) == off  # the same series, values and new labels; the old names are extra only
    forecasts = [(n, labels) for n, labels, _ in on if "band" in labels]
    assert len(forecasts) == 3 * len(FORECAST_BANDS)
    for name, labels in forecasts:
        assert labels["model"] == labels["forecaster"], name
        assert labels["ml_forecast"] == FORMER_BAND[labels["band"]], name
    (stamp,) = [labels for n, labels, _ in on if n.endswith("last_success_timestamp_seconds")]
    assert stamp == {"forecaster": "lstm_aci", "model": "lstm_aci"}
    # the families that never had the renamed labels do not gain them
    assert all(not RENAMED & labels.keys() for n, labels, _ in on if n.endswith(("eta_seconds", "skipped")))


def test_with_the_switch_off_no_series_carries_the_old_names():
    off = _scraped(exposition(_samples(), legacy_labels=False))
    assert off and all(not RENAMED & labels.keys() for _, labels, _ in off)
    bands = {labels["band"] for _, labels, _ in off if "band" in labels}
    assert bands == set(FORECAST_BANDS)


def _scrape_served(legacy: bool) -> str:
    """What Prometheus reads from the predictor's /metrics (`infercast.predictors.cli.serve`, the daemon's listener)
    when the switch is `legacy`."""

    class Loop:
        def tick(self, now, store):
            return _samples()

    class Clock:
        def now(self):
            return time.time()

    port, stop = free_port(), threading.Event()
    th = threading.Thread(target=serve, args=(Loop(), None, Clock(), f"127.0.0.1:{port}", 60.0, stop, legacy))
    th.start()
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                body = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
                if "infercast_forecast_kv_cache_usage_ratio{" in body:
                    return body
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        raise AssertionError("the predictor's listener served no forecast in 30 s")
    finally:
        stop.set()
        th.join(20)


def test_the_predictors_listener_publishes_old_names_only_when_the_fleet_file_says_so():
    on, off = _scraped(_scrape_served(True)), _scraped(_scrape_served(False))
    assert len(on) == len(off)
    assert any(labels.get("ml_forecast") == "yhat_upper" and labels["band"] == "upper" for _, labels, _ in on)
    assert all(not RENAMED & labels.keys() for _, labels, _ in off)
