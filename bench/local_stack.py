"""`bash deploy/local-stack.sh` as shipped, measured: does the predictive page come before the first v4 instance
crosses 0.75, and does the calm phase page anyone?

    nice -n 10 .venv/bin/python bench/local_stack.py [--minutes 13] [--json OUT]

Starts the script (its default ports: Prometheus 9090, Alertmanager 9093, alert-log 9095, exporter 9400,
predictor 9401, so nothing else may hold them), lets it run `--minutes` of real time (the sale starts at 10), then
reads from its Prometheus: when `InfercastKVCacheForecastBreach` first fired, when the first forecast was
published, when the first v4 instance crossed 0.75, and which alerts fired before the sale; and from its alert-log,
which notifications reached the receivers.  Publishes docs/results/local-stack.json (`bench:local-stack:*`).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from infercast.catalog import FORECAST_KV_CACHE_USAGE_RATIO, KV_CACHE_USAGE_RATIO  # noqa: E402

PROM = "http://127.0.0.1:9090"
SALE_S = 600.0


PORTS = (9090, 9093, 9095, 9400, 9401)


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def _range(expr: str, start: float, end: float) -> list[tuple[dict, float, float]]:
    r = requests.get(
        f"{PROM}/api/v1/query_range", params={"query": expr, "start": start, "end": end, "step": 5}, timeout=20
    )
    r.raise_for_status()
    return [(s["metric"], float(t), float(v)) for s in r.json()["data"]["result"] for t, v in s["values"]]


def _first(rows: list[tuple[dict, float, float]], pred=lambda v: True) -> float | None:
    times = [t for _, t, v in rows if pred(v)]
    return min(times) if times else None


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=13.0)
    p.add_argument("--json", type=Path, default=None, help="write here instead of publishing")
    args = p.parse_args(argv)
    busy = [port for port in PORTS if _listening(port)]
    if busy:
        raise SystemExit(f"ports {busy} are taken: another stack runs here; its exporter would be measured instead")
    with tempfile.TemporaryDirectory() as tmp:
        started = time.time()
        out = open(Path(tmp) / "local-stack.out", "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen(
            ["bash", "deploy/local-stack.sh", "--dir", tmp],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            while time.time() < started + args.minutes * 60:
                if proc.poll() is not None:
                    raise SystemExit(f"deploy/local-stack.sh exited with {proc.returncode}")
                said = (Path(tmp) / "local-stack.out").read_text(errors="replace")
                if "a service exited" in said:
                    logs = {p.name: p.read_text(errors="replace")[-800:] for p in Path(tmp).glob("*.log")}
                    raise SystemExit(f"a service of the stack exited: {said[-400:]} {logs}")
                time.sleep(5)
            end = time.time()
            fullest = f'max({KV_CACHE_USAGE_RATIO}{{pool="v4-main"}})'
            first_forecast = _first(_range(f'count({FORECAST_KV_CACHE_USAGE_RATIO}{{aggregate="max"}})', started, end))
            crossed = _first(_range(fullest, started, end), lambda v: v > 0.75)
            firing = _range('ALERTS{alertstate="firing"}', started, end)
            page = _first([x for x in firing if x[0].get("alertname") == "InfercastKVCacheForecastBreach"])
            reactive = _first([x for x in firing if x[0].get("alertname") == "InfercastKVCacheUsageHigh"])
            exporter_up = _first(_range('up{job="infercast-exporter"}', started, end), lambda v: v == 1)
            twin0 = exporter_up or started
            # the Watchdog (a dead man's switch) always fires: not an alert about the fleet
            calm_alerts = sorted(
                {m["alertname"] for m, t, _ in firing if t < twin0 + SALE_S and m["alertname"] != "InfercastWatchdog"}
            )
            log = Path(tmp) / "alert-log.jsonl"
            notes = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=60)
            out.close()

    def rel(t: float | None) -> float | None:
        return None if t is None else round(t - twin0, 1)

    result = {
        "command": "bash deploy/local-stack.sh (as shipped), measured by bench/local_stack.py",
        "minutes": args.minutes,
        "first_forecast_s": rel(first_forecast),
        "sale_starts_s": SALE_S,
        "predictive_page_fired_s": rel(page),
        "first_instance_crossed_s": rel(crossed),
        "threshold_alert_fired_s": rel(reactive),
        "lead_vs_first_instance_s": None if page is None or crossed is None else round(crossed - page, 1),
        "alerts_firing_before_the_sale": calm_alerts,
        "notifications": [
            {"receiver": n.get("receiver"), "alerts": sorted({a.get("alertname", "") for a in n.get("alerts", [])})}
            for n in notes
            if n.get("receiver") != "watchdog"  # the dead man's switch, every minute
        ],
    }
    print(json.dumps(result, indent=2))
    from bench import results

    results.publish_or_write("local-stack", result, TABLES, args.json)
    return 0


def render_run(r: dict) -> str:
    def s(v):
        return "-" if v is None else f"{v:.0f} s"

    rows = [
        "| event (seconds after the twin started) | when |",
        "|---|---:|",
        f"| first forecast published | {s(r['first_forecast_s'])} |",
        f"| predictive page fired (`InfercastKVCacheForecastBreach`) | {s(r['predictive_page_fired_s'])} |",
        f"| the flash sale starts | {s(r['sale_starts_s'])} |",
        f"| first v4 instance over 0.75 | {s(r['first_instance_crossed_s'])} |",
        f"| threshold alert fired (`InfercastKVCacheUsageHigh`) | {s(r['threshold_alert_fired_s'])} |",
        "",
        f"Lead of the predictive page over the first instance's crossing: **{s(r['lead_vs_first_instance_s'])}**. "
        f"Alerts firing before the sale: {', '.join(r['alerts_firing_before_the_sale']) or 'none'}. Notifications: "
        + (
            "; ".join(f"{n['receiver']}: {', '.join(n['alerts'])}" for n in r["notifications"][:8])
            if r["notifications"]
            else "none"
        )
        + ".",
    ]
    return "\n".join(rows)


TABLES = {"run": render_run}


if __name__ == "__main__":
    sys.exit(main())
