"""Start the whole lab on loopback, and stop everything it started (on success, failure or Ctrl-C).

    engines (vLLM, tiny model) <- HAProxy (the proxy the actuator drives) <- the load
       ^ scraped by Prometheus (engines mode: infercast's engine, recording and alert rules)
       ^ scraped by infercast's exporter (what the engines do not give), itself scraped by Prometheus
    infercast's predictor reads Prometheus, serves its forecasts, scraped by Prometheus
    Prometheus -> Alertmanager -> the lab's webhook (the page), read by the lab's control loop

The fleet file the predictor, exporter and rules read is written by `lab_fleet` (one pool, `lab`, of N engines of
version `tiny`; the predictor's and the alert's durations shortened for a run of minutes: docs/lab.md).
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from infercast.servers import Server, free_port, start_alertmanager, start_prometheus, which
from infercast.simulator.lab.engines import (
    ENGINES_DIR,
    MODEL_NAME,
    EngineShape,
    Process,
    spawn,
    start_engine,
    wait_ready,
)
from infercast.simulator.lab.proxy import haproxy_config

POOL = "lab"
VERSION = "tiny"
#: the file that marks a directory as the lab's own (the only kind it deletes)
LAB_MARK = ".infercast-lab"


class LabDirError(RuntimeError):
    """--dir names a directory the lab did not make."""


@dataclass(frozen=True)
class LabSettings:
    engines: int = 2
    shape: EngineShape = field(default_factory=EngineShape)
    #: Prometheus' scrape and evaluation interval, seconds
    scrape_seconds: int = 2
    #: `predictor.time_scale`: lab seconds per second of the model's own time.  1 (the default) leaves the LSTM, trained
    #: at a 15 s step, refused at the lab's 2 s and the Kalman fallback forecasting; 5 with a 3 s step and a 6 s
    #: `for:` runs the deployed LSTM on production's durations / 5 (docs/lab.md, "The deployed LSTM in the lab")
    time_scale: float = 1.0
    #: the predictor's horizon and step, and the predictive alert's `for:`, seconds (docs/lab.md)
    horizon_seconds: int = 60
    step_seconds: int = 2
    min_history_points: int = 10
    forecast_for_seconds: int = 4
    rate_window: str = "30s"


def lab_fleet(s: LabSettings, engine_ports: dict[str, int]) -> dict[str, Any]:
    """The lab's fleet file: engines mode, one pool of the engines, the predictor at the lab's pace."""
    return {
        "name": "lab",
        "metrics": {"source": "engines", "rate_window": s.rate_window},
        "versions": {VERSION: {"model": {"name": MODEL_NAME}}},
        "pools": {
            POOL: {"version": VERSION, "nodes": len(engine_ports), "engines": {"max_batch": s.shape.max_num_seqs}}
        },
        "targets": [
            {"name": name, "kind": "vllm", "url": f"http://127.0.0.1:{port}/metrics", "pool": POOL}
            for name, port in engine_ports.items()
        ],
        "predictor": {
            "horizon_seconds": s.horizon_seconds,
            "step_seconds": s.step_seconds,
            "forecast_interval_seconds": s.step_seconds,
            "min_history_points": s.min_history_points,
            "stale_after_seconds": 10 * s.step_seconds,
            "refit_interval_seconds": 60,
            "time_scale": s.time_scale,
        },
        "thresholds": {"kv_forecast_for_seconds": s.forecast_for_seconds},
    }


def prometheus_config(engine_ports: dict[str, int], every_s: int, rule_files: tuple[str, ...]) -> dict[str, Any]:
    """Prometheus in engines mode: one job scraping the engines with their pool and version as target labels (what
    `infercast k8s prometheus` writes for a plain Prometheus), the rules beside it."""
    return {
        "global": {"scrape_interval": f"{every_s}s", "evaluation_interval": f"{every_s}s"},
        "rule_files": list(rule_files),
        "scrape_configs": [
            {
                "job_name": "vllm-lab",
                "static_configs": [
                    {
                        "targets": [f"127.0.0.1:{p}" for p in engine_ports.values()],
                        "labels": {"pool": POOL, "version": VERSION},
                    }
                ],
            }
        ],
    }


def alertmanager_config(webhook_url: str) -> str:
    """Every alert to the lab's webhook, at once (group_wait 0) and again on every change within a second."""
    return yaml.safe_dump(
        {
            "route": {
                "receiver": "lab",
                "group_by": ["alertname", "pool"],
                "group_wait": "0s",
                "group_interval": "1s",
                "repeat_interval": "1h",
            },
            "receivers": [{"name": "lab", "webhook_configs": [{"url": webhook_url, "send_resolved": True}]}],
        },
        sort_keys=False,
    )


@dataclass
class Lab:
    """What `start_lab` started; `close()` stops all of it, the last started first."""

    workdir: Path
    settings: LabSettings
    engine_urls: dict[str, str] = field(default_factory=dict)
    proxy_url: str = ""
    proxy_socket: Path = Path()
    prometheus_url: str = ""
    alertmanager_url: str = ""
    exporter_url: str = ""
    predictor_url: str = ""
    fleet_path: Path = Path()
    webhook: Any = None
    _procs: list[Process] = field(default_factory=list)
    _servers: list[Server] = field(default_factory=list)

    def close(self) -> None:
        for p in reversed(self._procs):
            with contextlib.suppress(Exception):
                p.stop()
        for s in reversed(self._servers):
            with contextlib.suppress(Exception):
                s.close()
        if self.webhook is not None:
            with contextlib.suppress(Exception):
                self.webhook.close()
        self._procs.clear()
        self._servers.clear()

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def check_alive(self) -> None:
        """RuntimeError naming the first process that died (with its log's end)."""
        for p in self._procs:
            if not p.alive():
                raise RuntimeError(f"{p.name} exited with {p.proc.returncode}:\n{p.log()}")


def start_lab(s: LabSettings, workdir: Path, engines_dir: Path = ENGINES_DIR, log=print) -> Lab:
    """Start every part; on any failure stop what was started and raise."""
    from infercast.alertrules.engines import engine_rule_file
    from infercast.alertrules.rules import rule_files
    from infercast.alertrules.settings import AlertSettings
    from infercast.alertrules.webhook import WebhookRecorder
    from infercast.config import parse_config

    workdir = workdir.resolve()  # the servers run in their own directories
    if workdir.exists() and any(workdir.iterdir()):
        # a previous lab's directory is replaced; anything else is never deleted
        if not (workdir / LAB_MARK).is_file():
            raise LabDirError(
                f"{workdir} is not empty and not a lab's directory (no {LAB_MARK}): give --dir an empty or new one"
            )
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / LAB_MARK).write_text("a directory `infercast lab` made; it deletes and remakes it on its next start\n")
    lab = Lab(workdir, s)
    try:
        haproxy = which("haproxy")
        ports = {f"engine-{i}": free_port() for i in range(s.engines)}
        started = {}
        for name, port in ports.items():
            p = start_engine(name, port, workdir / name, s.shape, engines_dir)
            lab._procs.append(p)
            lab.engine_urls[name] = f"http://127.0.0.1:{port}"
            started[name] = (p, lab.engine_urls[name])
        doc = lab_fleet(s, ports)
        cfg = parse_config(doc)
        lab.fleet_path = workdir / "fleet.yaml"
        lab.fleet_path.write_text(yaml.safe_dump(doc, sort_keys=False))

        # The servers that do not need the engines start while they load.
        lab.webhook = WebhookRecorder("127.0.0.1", 0, token=None).serve()
        am = start_alertmanager(alertmanager_config(f"{lab.webhook.url}/lab"), workdir=workdir / "alertmanager")
        lab._servers.append(am)
        lab.alertmanager_url = am.url
        exporter_port, predictor_port = free_port(), free_port()
        lab.exporter_url = f"http://127.0.0.1:{exporter_port}"
        lab.predictor_url = f"http://127.0.0.1:{predictor_port}"
        settings = AlertSettings.from_fleet(cfg)
        rules = {"engines.yml": engine_rule_file(cfg), **rule_files(settings)}
        prom_doc = prometheus_config(ports, s.scrape_seconds, tuple(rules))
        prom_doc["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [am.url.removeprefix("http://")]}]}]}
        for job, port in (("infercast-exporter", exporter_port), ("infercast-predictor", predictor_port)):
            prom_doc["scrape_configs"].append(
                {"job_name": job, "honor_labels": True, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]}
            )
        prom = start_prometheus(
            yaml.safe_dump(prom_doc, sort_keys=False),
            rule_files={n: yaml.safe_dump(d, sort_keys=False, width=1000) for n, d in rules.items()},
            workdir=workdir / "prometheus",
        )
        lab._servers.append(prom)
        lab.prometheus_url = prom.url
        infercast = [sys.executable, "-m", "infercast.tools.cli"]
        lab._procs.append(
            spawn("exporter", [*infercast, "exporter", f"--config={lab.fleet_path}",
                               f"--listen=127.0.0.1:{exporter_port}", "--no-nvml"], workdir / "exporter")
        )  # fmt: skip
        lab._procs.append(
            spawn("predictor", [*infercast, "predictor", f"--config={lab.fleet_path}", f"--prometheus={prom.url}",
                                f"--listen=127.0.0.1:{predictor_port}"], workdir / "predictor")
        )  # fmt: skip
        t0 = time.monotonic()
        log(f"lab: waiting for {s.engines} vLLM engines to load (about a minute each on 2 cores)...")
        wait_ready(started)
        log(f"lab: engines ready in {time.monotonic() - t0:.0f}s")
        proxy_port = free_port()
        lab.proxy_socket = workdir / "haproxy" / "admin.sock"
        lab.proxy_socket.parent.mkdir()
        cfg_path = workdir / "haproxy" / "haproxy.cfg"
        cfg_path.write_text(haproxy_config(proxy_port, ports, lab.proxy_socket))
        hp = spawn("haproxy", [haproxy, "-f", str(cfg_path), "-db"], workdir / "haproxy")
        lab._procs.append(hp)
        lab.proxy_url = f"http://127.0.0.1:{proxy_port}"
        deadline = time.monotonic() + 15
        while not lab.proxy_socket.exists():
            if not hp.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"haproxy did not start:\n{hp.log()}")
            time.sleep(0.1)
        lab.check_alive()
    except BaseException:
        lab.close()
        raise
    return lab
