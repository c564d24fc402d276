"""Test-only helpers to run the real infercast services (exporter over the twin, predictor) as subprocesses."""

from __future__ import annotations

import copy
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from infercast.alertrules.webhook import WebhookRecorder
from infercast.config import PredictorConfig
from infercast.wallclock import Paced, events_on_wall_clock

from .conftest import REPO

CLI = [sys.executable, "-m", "infercast.tools.cli"]


def services_problem() -> str | None:
    """None when the exporter serves KV series from the twin, else why not.

    A test that needs the services *fails* with this reason (`require_services`): the exporter and predictor are
    infercast's own, so their being broken is infercast's fault, never a reason to skip (the end-to-end and panel
    tests both used to skip when the twin emitted nothing).
    """
    argv = [*CLI, "exporter", "--config", str(REPO / "examples" / "flash-sale.yaml")]
    try:
        res = subprocess.run(
            [*argv, "--once", "--no-nvml", "--twin-warmup-seconds", "30"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return "infercast exporter --once did not finish within 120 s"
    if res.returncode != 0:
        return f"infercast exporter --once failed: {res.stderr.strip().splitlines()[-1:]}"
    if "infercast_kv_cache_usage_ratio{" not in res.stdout:
        return "infercast exporter serves no infercast_kv_cache_usage_ratio from the twin yet"
    try:
        import infercast.predictors.cli  # noqa: F401
    except ImportError as e:
        return f"infercast predictor is not importable: {e}"
    return None


def require_services() -> None:
    """Fail the calling test, with the reason, unless the exporter and predictor services work."""
    problem = services_problem()
    if problem:
        pytest.fail(f"the exporter and predictor services over the twin do not work: {problem}", pytrace=False)


def fleet_file(tmp: Path, **predictor: float) -> Path:
    """examples/flash-sale.yaml with the given `predictor:` settings, written to `tmp/fleet.yaml`."""
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    doc["predictor"] = {**doc.get("predictor", {}), **predictor}
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def spawn(argv: list[str], log: Path) -> subprocess.Popen:
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)


@dataclass
class Stack:
    """The real stack on loopback: Alertmanager (routes to `hook`), Prometheus (rules scaled to the twin's speed),
    the exporter over the twin, and (unless left out) the predictor.  `started` is the wall time the twin began
    running at `warmup` simulated seconds."""

    tmp: Path
    speed: float
    warmup: float
    hook: WebhookRecorder
    prom: Any
    started: float
    procs: list[subprocess.Popen] = field(default_factory=list)
    servers: list[Any] = field(default_factory=list)

    def sim(self, wall: float) -> float:
        """The twin's simulated time at wall time `wall` (its clock runs `speed` times faster)."""
        return Paced(self.started, self.warmup, self.speed).sim(wall)

    def logs(self) -> dict[str, str]:
        return {p.name: p.read_text(errors="replace")[-1500:] for p in self.tmp.glob("*.log")}

    def check_alive(self) -> None:
        for p in self.procs:
            assert p.poll() is None, f"a service exited: {self.logs()}"

    def query_range(self, expr: str, start: float, end: float, step: float = 0.5) -> list[tuple[dict, float, float]]:
        r = requests.get(
            f"{self.prom.url}/api/v1/query_range",
            params={"query": expr, "start": start, "end": end, "step": step},
            timeout=10,
        )
        r.raise_for_status()
        return [(s["metric"], float(t), float(v)) for s in r.json()["data"]["result"] for t, v in s["values"]]

    def first_crossing(self, expr: str, threshold: float, start: float | None = None) -> float | None:
        times = [t for _, t, v in self.query_range(expr, start or self.started, time.time()) if v > threshold]
        return min(times) if times else None


def scaled_fleet(tmp: Path, speed: float, doc: dict, started: float, warmup: float, **predictor: float) -> Path:
    """`doc` (a parsed fleet file) for the predictor: every predictor duration divided by `speed` (forecasts every
    half wall second), and the calendar moved onto the wall clock of a twin at `warmup` s from `started`."""
    doc = copy.deepcopy(doc)
    doc["predictor"] = {
        **doc.get("predictor", {}),
        "horizon_seconds": 300 / speed,
        "step_seconds": 15 / speed,
        "history_seconds": 3600 / speed,
        "refit_interval_seconds": 1800 / speed,
        "stale_after_seconds": 120 / speed,
        "event_onset_seconds": PredictorConfig().event_onset_seconds / speed,
        "forecast_interval_seconds": 0.5,
        "min_history_points": 8,
        "time_scale": speed,  # the shipped LSTM reads the fleet in its own time (predictors/timescale.py)
        **predictor,
    }
    doc["events"] = events_on_wall_clock(doc.get("events") or [], started, warmup, speed)
    path = tmp / "predictor-fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def hooked(am_config: dict, hook_url: str) -> dict:
    """`am_config` (an Alertmanager config) with every webhook sent to `hook_url`, keeping each URL's path (so a
    set of files generated for another place, as another revision's generator writes them, reaches the test's
    recorder: the receiver's name is in every notification)."""
    from urllib.parse import urlsplit

    cfg = copy.deepcopy(am_config)
    for receiver in cfg.get("receivers", []):
        for hook in receiver.get("webhook_configs", []):
            hook["url"] = hook_url + urlsplit(hook["url"]).path
    return cfg


@contextmanager
def running_stack(
    tmp: Path,
    doc: dict,
    speed: float,
    warmup: float,
    predictor: bool = True,
    *,
    rules: dict[str, str] | None = None,
    alertmanager: dict | None = None,
    extra_jobs: dict[str, str] | None = None,
) -> Iterator[Stack]:
    """Start the stack over the fleet `doc` (parsed YAML) at twin speed `speed` from `warmup` simulated seconds.

    `rules` (file name -> text) and `alertmanager` (a config; its webhooks are sent to the recorder by `hooked`)
    replace the ones the current generator builds (bench/pages.py replays another revision's); `extra_jobs` are
    more scrape jobs (job -> host:port)."""
    from infercast.alertrules.alertmanager import Receivers, alertmanager_config
    from infercast.alertrules.rules import rule_files
    from infercast.alertrules.settings import AlertSettings
    from infercast.servers import free_port, prometheus_config, start_alertmanager, start_prometheus

    from .conftest import ALERTRULES

    hook = WebhookRecorder().serve()
    procs: list[subprocess.Popen] = []
    servers: list[Any] = []
    try:
        am_dir = tmp / "am"
        shutil.copytree(ALERTRULES / "templates", am_dir / "templates")
        receivers = Receivers(
            actuator_url=f"{hook.url}/actuator",
            pager_url=f"{hook.url}/pager",
            chat_url=f"{hook.url}/chat",
            ticket_url=f"{hook.url}/ticket",
            watchdog_url=f"{hook.url}/watchdog",
        )
        am_doc = hooked(alertmanager, hook.url) if alertmanager is not None else alertmanager_config(receivers)
        am = start_alertmanager(yaml.safe_dump(am_doc), workdir=am_dir)
        servers.append(am)
        fleet = tmp / "fleet.yaml"
        fleet.write_text(yaml.safe_dump(doc, sort_keys=False))
        exporter_port, predictor_port = free_port(), free_port()
        settings = AlertSettings(forecast_horizon_seconds=round(300 / speed), forecast_stale_seconds=120 / speed)
        if rules is None:
            rules = {name: yaml.safe_dump(d, sort_keys=False) for name, d in rule_files(settings.scaled(speed)).items()}
        jobs = {"infercast-exporter": f"127.0.0.1:{exporter_port}", **(extra_jobs or {})}
        if predictor:
            jobs["infercast-predictor"] = f"127.0.0.1:{predictor_port}"
        config = prometheus_config(jobs, interval="500ms", rule_files=tuple(rules), alertmanager=f"127.0.0.1:{am.port}")
        prom = start_prometheus(config, rule_files=rules, workdir=tmp / "prom")
        servers.append(prom)
        procs.append(
            spawn(
                [
                    *CLI, "exporter", f"--config={fleet}", f"--listen=127.0.0.1:{exporter_port}", "--no-nvml",
                    f"--twin-speed={speed}", f"--twin-warmup-seconds={warmup}",
                ],
                tmp / "exporter.log",
            )
        )  # fmt: skip
        started = _serving(f"http://127.0.0.1:{exporter_port}/metrics", procs[0], tmp / "exporter.log")
        if predictor:
            pf = scaled_fleet(tmp, speed, doc, started, warmup)
            procs.append(
                spawn(
                    [*CLI, "predictor", f"--config={pf}", f"--prometheus={prom.url}",
                     f"--listen=127.0.0.1:{predictor_port}"],
                    tmp / "predictor.log",
                )
            )  # fmt: skip
        yield Stack(tmp, speed, warmup, hook, prom, started, procs, servers)
    finally:
        for p in procs:
            stop(p)
        for s in reversed(servers):
            s.close()
        hook.close()


def _serving(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> float:
    """Wait for the exporter's first answer; the wall time its twin started (it starts just before serving)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert proc.poll() is None, f"the exporter exited: {log.read_text(errors='replace')[-1500:]}"
        try:
            if requests.get(url, timeout=2).ok:
                return time.time()
        except requests.RequestException:
            pass
        time.sleep(0.2)
    raise AssertionError(f"the exporter did not serve within {timeout:g} s")
