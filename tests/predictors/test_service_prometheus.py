"""The predictor service against a real Prometheus on loopback (history backfilled with promtool)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time

import pytest
import requests
import yaml

from infercast.clock import WallClock
from infercast.config import load_config
from infercast.predictors import registry
from infercast.predictors.cli import serve
from infercast.predictors.service import PredictorLoop
from infercast.servers import free_port
from infercast.store.prometheus import PrometheusStore
from tests.predictors.conftest import openmetrics, start_backfilled

pytestmark = pytest.mark.servers


def _history(now: float) -> str:
    series = []
    ts = [now - 3600 + 15 * i for i in range(241)]  # up to the last scrape, at now
    for inst in ("n1", "n2"):
        lab = {"pool": "v4-main", "version": "v4", "instance": inst}
        series.append(
            ("infercast_kv_cache_usage_ratio", "gauge", lab, [(t, 0.3 + 0.4 * (t - ts[0]) / 3600) for t in ts])
        )
        clab = {**lab, "priority": "normal", "outcome": "ok"}
        series.append(("infercast_router_requests_total", "counter", clab, [(t, 40.0 * (t - ts[0])) for t in ts]))
    return openmetrics(series)


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    now = float(int(time.time()) // 15 * 15)
    with start_backfilled(tmp_path_factory.mktemp("prom"), _history(now)) as p:
        yield p, now


def _fleet_file(tmp_path, repo_root, url: str, listen: str = "127.0.0.1:0"):
    data = yaml.safe_load((repo_root / "examples" / "flash-sale.yaml").read_text())
    data["predictor"] = {
        "prometheus_url": url,
        "listen": listen,
        "history_seconds": 3600,
        "min_history_points": 20,
        "forecast_interval_seconds": 1,
        # The backfilled history ends when the module starts; a loaded machine must not make it "stale".
        "stale_after_seconds": 900,
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_tick_reads_prometheus_and_forecasts_every_pool(prom, tmp_path, repo_root):
    p, now = prom
    cfg = load_config(_fleet_file(tmp_path, repo_root, p.url))
    loop = PredictorLoop.from_config(cfg, rps_model="kalman", load_lstm=False)
    out = loop.tick(now, PrometheusStore(p.url, timeout_seconds=5))
    kv = {s.label_dict["band"]: s.value for s in out if s.name == "infercast_forecast_kv_cache_usage_ratio"}
    assert kv["point"] == pytest.approx(0.7 + 0.4 * 300 / 3600, abs=0.02)
    rps = {s.label_dict["band"]: s.value for s in out if s.name == "infercast_forecast_requests_per_second"}
    assert rps["point"] == pytest.approx(80.0, rel=0.02)  # two instances at 40 req/s each


def test_predictor_once_prints_the_forecast_metrics(prom, tmp_path, repo_root):
    p, _ = prom
    path = _fleet_file(tmp_path, repo_root, p.url)
    r = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "predictor", "--config", str(path), "--once"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=repo_root,
    )
    assert r.returncode == 0, r.stderr
    # KV by the shipped LSTM when its file loads (part B's), else by the fallback baseline.  The fleet file leaves
    # predictor.legacy_forecast_labels at its default (on): each series also carries the deprecated model and
    # ml_forecast labels (the exposition sorts label names).
    kv_model = "lstm_aci" if registry.load_lstm()[0] is not None else registry.BEST_BASELINE["kv"] + "_aci"
    for aggregate in ("mean", "max"):  # the pool's mean and its fullest instance
        assert (
            f'infercast_forecast_kv_cache_usage_ratio{{aggregate="{aggregate}",band="point",forecaster="{kv_model}",'
            f'horizon="300s",ml_forecast="yhat",model="{kv_model}"'
        ) in r.stdout
    assert (
        'infercast_forecast_requests_per_second{band="point",forecaster="combined_aci",horizon="300s",'
        'ml_forecast="yhat",model="combined_aci"' in r.stdout
    )
    assert (
        'infercast_forecast_breach_eta_seconds{aggregate="max",pool="v4-main",threshold="0.75",version="v4"}'
        in r.stdout
    )


def test_predictor_without_prometheus_url_says_what_to_set(tmp_path, repo_root):
    data = yaml.safe_load((repo_root / "examples" / "flash-sale.yaml").read_text())
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(data))
    r = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "predictor", "--config", str(path), "--once"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=repo_root,
    )
    assert r.returncode == 2
    assert "predictor.prometheus_url is not set" in r.stderr


def test_service_serves_forecasts_over_http_and_stops_on_request(prom, tmp_path, repo_root):
    p, _ = prom
    port = free_port()
    cfg = load_config(_fleet_file(tmp_path, repo_root, p.url))
    loop = PredictorLoop.from_config(cfg, rps_model="kalman", load_lstm=False)
    stop = threading.Event()
    th = threading.Thread(
        target=serve, args=(loop, PrometheusStore(p.url, 5), WallClock(), f"127.0.0.1:{port}", 1.0, stop)
    )
    th.start()
    try:
        body = ""
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and "infercast_forecast_kv_cache_usage_ratio{" not in body:
            with contextlib.suppress(requests.ConnectionError):
                body = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
            time.sleep(0.2)
        assert (
            'infercast_forecast_kv_cache_usage_ratio{aggregate="max",band="point",forecaster="kalman_aci",horizon="300s"'
            in body
        )
        assert 'infercast_forecast_last_success_timestamp_seconds{forecaster="kalman_aci"}' in body
        assert "ml_forecast=" not in body  # serve() without legacy_labels: the new labels only
    finally:
        stop.set()
        th.join(timeout=20)
    assert not th.is_alive()


def test_service_with_prometheus_down_serves_the_reason_and_stops_on_sigterm(tmp_path, repo_root):
    import signal

    port = free_port()
    path = _fleet_file(tmp_path, repo_root, f"http://127.0.0.1:{free_port()}", listen=f"127.0.0.1:{port}")
    proc = subprocess.Popen(
        [sys.executable, "-m", "infercast.tools.cli", "predictor", "--config", str(path)],
        cwd=repo_root,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        body = ""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and "source_down" not in body:
            with contextlib.suppress(requests.ConnectionError):
                body = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=30).text
            time.sleep(0.3)
        # Nothing known yet about any pool: one marker per series, with empty pool/version.
        assert 'infercast_forecast_skipped{pool="",reason="source_down",series="kv",version=""} 1.0' in body
        assert "infercast_forecast_kv_cache_usage_ratio{" not in body
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 0
    assert "cannot connect to Prometheus" in proc.stderr.read()
