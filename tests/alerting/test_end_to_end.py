"""End to end with real servers: the predictive alert reaches a webhook through Alertmanager before KV usage
actually crosses 0.75.

Started on loopback: `infercast exporter` over the twin's flash-sale scenario, Prometheus (the generated rules),
Alertmanager (the generated routes), `infercast predictor`, and a webhook receiver.  Time is accelerated honestly:
the twin runs `--twin-speed S`, and every duration of the stack is divided by the same S (the predictor's horizon,
step, history and staleness; the rules' `for:` and forecast horizon label), so the stack sees the incident as it
would at real speed, S times faster.  Prometheus scrapes and evaluates, and the predictor forecasts, every
half second (at S = 5: every 2.5 simulated seconds, faster than production's 15 s).

What it does not cover: the twin may fall behind real time while it simulates the surge (the exporter advances it
by wall time x S on a thread); the report states the twin's simulated time at each event where the exporter
publishes it, and otherwise converts wall seconds with S.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from alertrules.alertmanager import Receivers, alertmanager_config
from alertrules.rules import rule_files
from alertrules.settings import AlertSettings
from alertrules.webhook import WebhookRecorder
from infercast.servers import (
    ServerUnavailable,
    free_port,
    prometheus_config,
    start_alertmanager,
    start_prometheus,
)

from .conftest import ALERTRULES
from .stack import fleet_file, require_services, spawn, stop

SPEED = float(os.environ.get("INFERCAST_E2E_SPEED", "5"))
WARMUP_SIM_S = 480.0  # the flash sale starts at 600 simulated seconds
TRIGGER = 0.75
POOL = "v4-main"
REPORT = Path(os.environ.get("INFERCAST_E2E_REPORT", "")) if os.environ.get("INFERCAST_E2E_REPORT") else None


def scaled_fleet(tmp: Path, speed: float) -> Path:
    """The flash-sale fleet with every predictor duration divided by `speed` (forecasts every wall second)."""
    return fleet_file(
        tmp,
        horizon_seconds=300 / speed,
        step_seconds=15 / speed,
        history_seconds=3600 / speed,
        refit_interval_seconds=1800 / speed,
        stale_after_seconds=120 / speed,
        forecast_interval_seconds=0.5,
        min_history_points=8,
    )


def first_crossing(prom_url: str, expr: str, start: float, end: float, threshold: float) -> float | None:
    r = requests.get(
        f"{prom_url}/api/v1/query_range",
        params={"query": expr, "start": start, "end": end, "step": 0.5},
        timeout=10,
    )
    r.raise_for_status()
    times = [float(t) for s in r.json()["data"]["result"] for t, v in s["values"] if float(v) > threshold]
    return min(times) if times else None


@pytest.mark.servers
@pytest.mark.slow
def test_predictive_alert_reaches_the_receiver_before_kv_crosses_the_trigger(tmp_path):
    require_services()
    if shutil.which("promtool") is None and not Path("/usr/bin/promtool").exists():
        pytest.skip("Prometheus is not installed")

    fleet = scaled_fleet(tmp_path, SPEED)
    hook = WebhookRecorder().serve()
    procs: list[subprocess.Popen] = []
    servers = []
    try:
        am_dir = tmp_path / "am"
        shutil.copytree(ALERTRULES / "templates", am_dir / "templates")
        receivers = Receivers(
            actuator_url=f"{hook.url}/actuator", pager_url=f"{hook.url}/pager", chat_url=f"{hook.url}/chat"
        )
        am = start_alertmanager(yaml.safe_dump(alertmanager_config(receivers)), workdir=am_dir)
        servers.append(am)

        exporter_port, predictor_port = free_port(), free_port()
        cli = [sys.executable, "-m", "infercast.cli"]
        procs.append(
            spawn(
                [
                    *cli, "exporter", f"--config={fleet}", f"--listen=127.0.0.1:{exporter_port}", "--no-nvml",
                    f"--twin-speed={SPEED}", f"--twin-warmup-seconds={WARMUP_SIM_S}",
                ],
                tmp_path / "exporter.log",
            )
        )  # fmt: skip
        settings = AlertSettings(forecast_horizon_seconds=round(300 / SPEED), forecast_stale_seconds=120 / SPEED)
        rules = {name: yaml.safe_dump(doc, sort_keys=False) for name, doc in rule_files(settings.scaled(SPEED)).items()}
        config = prometheus_config(
            {"infercast-exporter": f"127.0.0.1:{exporter_port}", "infercast-predictor": f"127.0.0.1:{predictor_port}"},
            interval="500ms",
            rule_files=("recording.yml", "alerts.yml"),
            alertmanager=f"127.0.0.1:{am.port}",
        )
        prom = start_prometheus(config, rule_files=rules, workdir=tmp_path / "prom")
        servers.append(prom)
        started = time.time()
        procs.append(
            spawn(
                [*cli, "predictor", f"--config={fleet}", f"--prometheus={prom.url}",
                 f"--listen=127.0.0.1:{predictor_port}"],
                tmp_path / "predictor.log",
            )
        )  # fmt: skip

        usage = f'avg by (pool, version) (infercast_kv_cache_usage_ratio{{pool="{POOL}"}})'
        fullest = f'max by (pool, version) (infercast_kv_cache_usage_ratio{{pool="{POOL}"}})'
        deadline = started + 240
        crossed = reactive = None
        while time.time() < deadline:
            for p in procs:
                assert p.poll() is None, f"a service exited: {[x.name for x in tmp_path.glob('*.log')]}"
            crossed = first_crossing(prom.url, usage, started, time.time(), TRIGGER)
            # also wait (a little) for the reactive alert, to report the lead over it
            reactive = hook.first("InfercastKVCacheUsageHigh", "infercast-actuator")
            if crossed is not None and (reactive is not None or time.time() > crossed + 15):
                break
            time.sleep(1)
        note = hook.first("InfercastKVCacheForecastBreach", "infercast-actuator")
        logs = {p.name: p.read_text(errors="replace")[-1500:] for p in tmp_path.glob("*.log")}
        assert crossed is not None, f"KV usage of {POOL} never crossed {TRIGGER} within 240 s; logs: {logs}"
        assert note is not None, f"the predictive alert never reached the webhook; logs: {logs}"
        # the reactive alert (memory breaker), as the actuator route received it: people's pager route waits its
        # 30 s group_wait on top (not scaled), so its arrival says more about Alertmanager than about the rules
        reactive = hook.first("InfercastKVCacheUsageHigh", "infercast-actuator")
        crossed_fullest = first_crossing(prom.url, fullest, started, time.time(), TRIGGER)
        upper = f'max(infercast_forecast_kv_cache_usage_ratio{{pool="{POOL}",ml_forecast="yhat_upper"}})'
        forecast_crossed = first_crossing(prom.url, upper, started, time.time(), TRIGGER)
        surge = first_crossing(prom.url, usage, started, time.time(), 0.55)
        lead_wall = crossed - note.received_at
        report = {
            "twin_speed": SPEED,
            "alert_received_wall_s_after_start": round(note.received_at - started, 2),
            "pool_mean_kv_crossed_0.75_wall_s_after_start": round(crossed - started, 2),
            "pool_mean_kv_above_0.55_wall_s_after_start": round(surge - started, 2) if surge else None,
            "forecast_upper_crossed_0.75_wall_s_after_start": (
                round(forecast_crossed - started, 2) if forecast_crossed else None
            ),
            "lead_wall_s": round(lead_wall, 2),
            "lead_simulated_s": round(lead_wall * SPEED, 1),
            "reactive_alert_wall_s_after_start": round(reactive.received_at - started, 2) if reactive else None,
            "lead_over_reactive_alert_simulated_s": (
                round((reactive.received_at - note.received_at) * SPEED, 1) if reactive else None
            ),
            "lead_vs_fullest_instance_simulated_s": (
                round((crossed_fullest - note.received_at) * SPEED, 1) if crossed_fullest else None
            ),
            "alert_labels": next(
                a["labels"]
                for a in note.payload["alerts"]
                if a["labels"]["alertname"] == "InfercastKVCacheForecastBreach"
            ),
        }
        print(json.dumps(report, indent=2))
        if REPORT is not None:
            REPORT.write_text(json.dumps(report, indent=2) + "\n")
        assert note.received_at < crossed, f"the predictive page came {-lead_wall:.1f} wall s after the crossing"
    except ServerUnavailable as e:
        pytest.skip(str(e))
    finally:
        for p in procs:
            stop(p)
        for s in reversed(servers):
            s.close()
        hook.close()
