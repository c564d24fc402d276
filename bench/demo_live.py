"""The demo's live arm as a user runs it: `deploy/local-stack.sh --no-services --time-scale S`, then `infercast demo
--prometheus http://127.0.0.1:9090 --alertmanager http://127.0.0.1:9093 --speed S` on the flash sale.

    .venv/bin/python bench/demo_live.py [--speed 5] [--no-publish]

Publishes docs/results/demo-live.json and the `bench:demo-live:run` block of docs/demo.md: the demo's wall time and
its live arm's, the page Alertmanager delivered and its lead, beside the same forecasts evaluated in memory (the
baseline measured in the same run) and the in-memory demo's figures for the same arm.  Uses the local stack's fixed
ports (9090, 9093, 9095; the demo's 9400-9402): nothing else may hold them.
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from demo import PY, timed  # noqa: E402 (after the sys.path set-up)

PROMETHEUS, ALERTMANAGER = "http://127.0.0.1:9090", "http://127.0.0.1:9093"


def _ready(url: str, path: str, stack: subprocess.Popen, deadline_s: float = 60.0) -> None:
    deadline = time.time() + deadline_s
    while time.time() < deadline:
        if stack.poll() is not None:
            raise SystemExit(f"bench/demo_live.py: deploy/local_stack.py exited ({stack.returncode})")
        try:
            if requests.get(url + path, timeout=2).ok:
                return
        except requests.RequestException:
            pass
        time.sleep(0.5)
    raise SystemExit(f"bench/demo_live.py: {url} not ready within {deadline_s:g} s")


def run(speed: float) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        stack = subprocess.Popen(
            [str(PY), "deploy/local_stack.py", "--no-services", "--time-scale", f"{speed:g}", "--dir", tmp + "/stack"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _ready(PROMETHEUS, "/-/ready", stack)
            _ready(ALERTMANAGER, "/-/ready", stack)
            cmd = [str(PY), "-m", "infercast.tools.cli", "demo", "--prometheus", PROMETHEUS,
                   "--alertmanager", ALERTMANAGER, "--speed", f"{speed:g}", "--out", tmp + "/demo", "--json",
                   "--no-progress"]  # fmt: skip
            wall, r = timed(cmd)
        finally:
            stack.send_signal(signal.SIGTERM)
            stack.wait(timeout=60)
    s = json.loads(r.stdout)
    return {"speed": speed, "demo_wall_s": round(wall, 1), "summary": s}


def table_run(result: dict) -> str:
    s = result["summary"]
    live, arm = s["live"], s["arms"]["predictive"]
    page = live["page"]
    computed = live.get("page_computed_seconds")
    lead = arm["alert_lead_seconds"]
    if lead is None or computed is None:
        return (
            f"The live arm was not paged: {page.get('none_because', 'no page')}. {s['version']}; `bench/demo_live.py`."
        )
    avalanche = s["avalanche_seconds"]
    where = f" (pool `{page['labels'].get('pool')}`)" if page.get("labels") else ""
    return (
        f"`infercast demo --prometheus {live['prometheus']} --alertmanager {live['alertmanager']} --speed "
        f"{live['speed']:g}` against `deploy/local-stack.sh --no-services --time-scale {live['speed']:g}` (Prometheus "
        f"{live['prometheus_version']}, Alertmanager {live['alertmanager_version']}), five arms on the flash sale: "
        f"{result['demo_wall_s']:.0f} s, {live['wall_seconds']:.0f} s of it the live arm. "
        f"`{page.get('alertname', 'no page')}`{where} fired at {page.get('fired_sim_seconds')} simulated s and "
        f"reached the demo's webhook at {page.get('delivered_sim_seconds')} s: a lead of {lead:.0f} s over the "
        f"unprotected fleet's crossing at {avalanche:.0f} s (the same forecasts evaluated in memory page at "
        f"{computed:.0f} s: {avalanche - computed:.0f} s). The twin was at most {live['behind_seconds']:g} simulated "
        f"s behind the wall clock; `predictive (live)`: {arm['oom_events']} OOM, {arm['goodput_rps']:.1f} goodput "
        f"req/s. {s['version']}; `bench/demo_live.py`."
    )


TABLES = {"run": table_run}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--speed", type=float, default=5.0)
    p.add_argument("--no-publish", action="store_true")
    a = p.parse_args()
    result = run(a.speed)
    print(table_run(result))
    if not a.no_publish:
        from results import publish

        print("published", publish("demo-live", result, TABLES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
