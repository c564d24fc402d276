"""The docker-compose stack without Docker: Prometheus and Alertmanager from the Debian packages, the alert-log
webhook, the infercast exporter and predictor, all on 127.0.0.1 (deploy/local-stack.sh runs this).

Ports as in docker-compose.yml: Prometheus 9090, Alertmanager 9093, alert-log 9095, exporter 9400, predictor 9401.
The twin runs in real time by default (`--twin-speed 1`, the speed every duration of the predictor and the rules
assumes): the flash sale's calm phase lasts its 10 minutes, the predictor forecasts from its 20th sample (5
minutes), and the sale's calendar event is moved onto the wall clock (`infercast.wallclock`) in a copy of the fleet
file the predictor reads (`.stack/fleet.yaml`), so the predictive page arrives before the surge.  Grafana is not
started (no Grafana server can be installed on these machines); point one at :9090 and run
`infercast dashboards push`.  Ctrl-C or SIGTERM stops everything this script started.

`--no-services` starts only Prometheus, Alertmanager and the alert-log: the servers `infercast demo --prometheus
http://127.0.0.1:9090 --alertmanager http://127.0.0.1:9093` runs its live arm through (it serves the exporter on
:9400 and the forecasts on :9401 itself, and takes Alertmanager's notifications on the actuator's :9402).  With
`--time-scale S` those servers are set up for `infercast demo --speed S`: the rules generated for S (every `for:`
divided by S) and Prometheus scraping and evaluating every 15/S s (one simulated 15 s step).
"""

from __future__ import annotations

import argparse
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # run as a file: make the repository's packages importable

from infercast.alertrules.webhook import WebhookRecorder  # noqa: E402
from infercast.servers import ServerFailed, ServerUnavailable, start_alertmanager, start_prometheus  # noqa: E402
from infercast.wallclock import events_on_wall_clock  # noqa: E402

RULES = ("recording.yml", "alerts.yml")


def prometheus_config(time_scale: float = 1.0) -> str:
    cfg = yaml.safe_load((REPO / "deploy" / "prometheus.local.yml").read_text())
    cfg["rule_files"] = list(RULES)  # written beside the config by start_prometheus
    if time_scale != 1.0:  # one simulated 15 s step, in whole milliseconds (Prometheus durations are integers)
        every = f"{round(15000 / time_scale)}ms"
        cfg["global"].update(scrape_interval=every, evaluation_interval=every, scrape_timeout=every)
    return yaml.safe_dump(cfg, sort_keys=False)


def rules(time_scale: float) -> dict[str, str]:
    """The rule files, generated with every `for:` divided by the scale (at 1, the committed files' text)."""
    from infercast.alertrules.generate import dump
    from infercast.alertrules.rules import rule_files
    from infercast.alertrules.settings import AlertSettings

    return {n: dump(doc) for n, doc in rule_files(AlertSettings().scaled(time_scale)).items()}


def wall_clock_fleet(config: Path, out: Path, t0: float, speed: float) -> Path:
    """The fleet file with its scenario-second events on the wall clock of a twin started at `t0` (for the
    predictor, which reads Prometheus' Unix time); written to `out`."""
    doc = yaml.safe_load(config.read_text())
    doc["events"] = events_on_wall_clock(doc.get("events") or [], t0, 0.0, speed)
    out.write_text(yaml.safe_dump(doc, sort_keys=False))
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="deploy/local-stack.sh", description=__doc__.splitlines()[0])
    p.add_argument("--config", type=Path, default=REPO / "examples" / "flash-sale.yaml", help="fleet file")
    p.add_argument("--dir", type=Path, default=REPO / ".stack", help="working directory (data, logs)")
    p.add_argument(
        "--twin-speed",
        type=float,
        default=1.0,
        help="passed to the exporter (default 1: real time, which the predictor's and the rules' durations assume)",
    )
    p.add_argument("--no-services", action="store_true", help="start only Prometheus, Alertmanager and alert-log")
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="with --no-services: rules and scrape intervals for `infercast demo --speed S` (default 1: real time)",
    )
    args = p.parse_args(argv)
    if not args.config.is_file():
        p.error(f"--config {args.config}: no such file")
    if args.time_scale != 1.0 and not (args.no_services and args.time_scale > 0):
        p.error("--time-scale S (> 0) sets the servers up for `infercast demo --speed S`: use it with --no-services")
    args.dir.mkdir(parents=True, exist_ok=True)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())

    started: list = []
    procs: list[subprocess.Popen] = []
    log = open(args.dir / "alert-log.jsonl", "a", encoding="utf-8")  # noqa: SIM115 - closed at the end
    try:
        hook = WebhookRecorder("127.0.0.1", 9095, out=log).serve()
        started.append(hook)
        prom = start_prometheus(
            prometheus_config(args.time_scale),
            rule_files=rules(args.time_scale),
            port=9090,
            workdir=args.dir / "prometheus",
        )
        started.append(prom)
        am_dir = args.dir / "alertmanager"
        shutil.copytree(REPO / "alertrules" / "templates", am_dir / "templates", dirs_exist_ok=True)
        am = start_alertmanager((REPO / "alertrules" / "alertmanager.yml").read_text(), port=9093, workdir=am_dir)
        started.append(am)
        if not args.no_services:
            infercast = [sys.executable, "-m", "infercast.tools.cli"]
            predictor_fleet = wall_clock_fleet(args.config, args.dir / "fleet.yaml", time.time(), args.twin_speed)
            services = {
                "exporter": [
                    *infercast, "exporter", f"--config={args.config}", "--listen=127.0.0.1:9400",
                    f"--twin-speed={args.twin_speed}", "--no-nvml",
                ],
                "predictor": [
                    *infercast, "predictor", f"--config={predictor_fleet}", f"--prometheus={prom.url}",
                    "--listen=127.0.0.1:9401",
                ],
            }  # fmt: skip
            for name, argv_ in services.items():
                out = open(args.dir / f"{name}.log", "ab")  # noqa: SIM115 - handed to the child
                procs.append(subprocess.Popen(argv_, cwd=REPO, stdout=out, stderr=subprocess.STDOUT))
        print(
            f"infercast local stack: Prometheus {prom.url}, Alertmanager {am.url}, alert-log {hook.url} "
            f"(notifications in {args.dir / 'alert-log.jsonl'}); logs in {args.dir}. Ctrl-C stops.",
            flush=True,
        )
        while not stop.wait(1.0):
            for proc in procs:
                if proc.poll() is not None:
                    print(f"a service exited with {proc.returncode}: see the logs in {args.dir}", file=sys.stderr)
                    procs.remove(proc)
                    break
    except (ServerUnavailable, ServerFailed) as e:
        print(f"local-stack: {e}", file=sys.stderr)
        return 1
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
        for s in reversed(started):
            s.close()
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
