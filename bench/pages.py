"""The flash sale's pages on a real Prometheus and Alertmanager: which alerts page, ticket or chat, when, and whether
any is inhibited while the pool refuses requests.  Issue 43's before and after, in one run of each.

    nice -n 10 .venv/bin/python bench/pages.py [--speed 5] [--before DIR] [--json OUT]

The stack is tests/alerting/stack.py's (the exporter over the flash-sale twin at `--speed`, Prometheus scraping it
every 0.5 s with the rules, Alertmanager with the routes, the predictor with the shipped LSTM), plus a *busy but
ineffective actuator*: a metrics endpoint (job `infercast-actuator`) whose `infercast_actuator_actions_total
{outcome="applied"}` counts one action per notification the actuator's receiver gets, while nothing in the twin
changes.  That is the issue's case: a pool that keeps refusing requests while an actuator acts.  Every duration of
the rules and of Alertmanager's routes (group_wait, group_interval, repeat_interval) is divided by the speed.

`--before DIR`: also replay with the rule files and alertmanager.yml in DIR first (another revision's generator:
`python -m infercast.alertrules.generate --fleet F --time-scale S --out DIR`, F with `predictor.horizon_seconds`
300/S and `stale_after_seconds` 120/S as the stack's).  Without `--json`, publishes docs/results/pages.json and the
`bench:pages:*` blocks of docs/alerting.md.

What it does not cover: Prometheus starts with the run, 5 simulated minutes before the sale, so the SLO alerts'
long windows (1 h, 6 h: 12 and 72 minutes of wall time at 5x) hold only the run itself, not an hour of calm before
it; `long_window_note` in the JSON estimates how much later the fast page would come with a full hour of calm.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from infercast.alertrules.alertmanager import Receivers, alertmanager_config  # noqa: E402
from infercast.catalog import ACTUATOR_ACTIONS_TOTAL, ROUTER_REQUESTS_TOTAL  # noqa: E402
from tests.alerting.stack import running_stack  # noqa: E402

WARMUP_SIM_S = 300.0  # the sale starts at 600 simulated seconds
END_SIM_S = 1200.0
REFUSED = "error|timeout|rejected|shed"
POLL_S = 0.5


class BusyActuator:
    """An actuator that applies an action for every notification its receiver gets, and changes nothing."""

    def __init__(self, pools: list[str]) -> None:
        self.applied = dict.fromkeys(pools, 0)
        self.seen = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = outer.metrics().encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "text/plain; version=0.0.4")
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # Prometheus gave up on a slow scrape (a loaded machine): its `up` says so

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.server.server_address[1]}"

    def metrics(self) -> str:
        lines = [f"# TYPE {ACTUATOR_ACTIONS_TOTAL} counter"]
        lines += [
            f'{ACTUATOR_ACTIONS_TOTAL}{{action="set_pool_weight",pool="{p}",outcome="applied"}} {n}'
            for p, n in self.applied.items()
        ]
        return "\n".join(lines) + "\n"

    def tick(self, notifications: list) -> None:
        for n in notifications[self.seen :]:
            if n.payload.get("receiver") == "infercast-actuator":
                for a in n.payload.get("alerts", []):
                    pool = a.get("labels", {}).get("pool")
                    if a.get("status") == "firing" and pool in self.applied:
                        self.applied[pool] += 1
        self.seen = len(notifications)

    def close(self) -> None:
        self.server.shutdown()


def scaled_routes(cfg: dict, speed: float) -> dict:
    """Alertmanager's timers divided by the twin's speed (at least 1 s), routes and inhibitions unchanged."""
    cfg = json.loads(json.dumps(cfg))

    def scale(route: dict) -> None:
        for key in ("group_wait", "group_interval", "repeat_interval"):
            if key in route:
                seconds = _seconds(route[key])
                route[key] = f"{max(1, round(seconds / speed)) if seconds else 0}s"
        for child in route.get("routes", []):
            scale(child)

    scale(cfg["route"])
    return cfg


def _seconds(text: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)", text))


def replay(label: str, speed: float, rules: dict[str, str] | None, am: dict) -> dict:
    doc = yaml.safe_load((ROOT / "examples" / "flash-sale.yaml").read_text())
    actuator = BusyActuator(list(doc["pools"]))
    inhibited: list[tuple[float, str, str]] = []
    try:
        with tempfile.TemporaryDirectory() as tmp, running_stack(
            Path(tmp), doc, speed, WARMUP_SIM_S, rules=rules, alertmanager=scaled_routes(am, speed),
            extra_jobs={"infercast-actuator": actuator.address},
        ) as stack:  # fmt: skip
            am_url = stack.servers[0].url
            end = stack.started + (END_SIM_S - WARMUP_SIM_S) / speed
            while time.time() < end:
                stack.check_alive()
                actuator.tick(stack.hook.received())
                try:
                    for a in requests.get(f"{am_url}/api/v2/alerts", timeout=5).json():
                        if a["status"]["inhibitedBy"]:
                            inhibited.append((time.time(), a["labels"]["alertname"], a["labels"].get("pool", "")))
                except requests.RequestException:
                    pass
                time.sleep(POLL_S)
            now = time.time()
            return _report(label, speed, stack, now, inhibited, actuator)
    finally:
        actuator.close()


def _report(label: str, speed: float, stack, now: float, inhibited: list, actuator: BusyActuator) -> dict:
    sim = stack.sim
    firing: dict[tuple[str, str], dict] = {}
    for m, t, _ in stack.query_range('ALERTS{alertstate="firing"}', stack.started, now, POLL_S):
        key = (m["alertname"], m.get("pool", ""))
        if key not in firing or t < firing[key]["t"]:
            firing[key] = {"t": t, "severity": m.get("severity", "")}
    notified: dict[tuple[str, str, str], float] = {}
    for n in stack.hook.received():
        receiver = n.payload.get("receiver", "")
        for a in n.payload.get("alerts", []):
            if a.get("status") != "firing":
                continue
            key = (a["labels"].get("alertname", ""), a["labels"].get("pool", ""), receiver)
            notified[key] = min(notified.get(key, n.received_at), n.received_at)
    # requests refused or failed per pool, per 2 wall seconds (10 simulated at 5x)
    window = f"{max(1, round(10 / speed))}s"
    refused = stack.query_range(
        f'sum by (pool) (increase({ROUTER_REQUESTS_TOTAL}{{outcome=~"{REFUSED}"}}[{window}])) > 0',
        stack.started,
        now,
        POLL_S,
    )
    refusing = {(m.get("pool", ""), round(t / POLL_S)) for m, t, _ in refused}
    first_refusal: dict[str, float] = {}
    for m, t, _ in refused:
        p = m.get("pool", "")
        first_refusal[p] = min(first_refusal.get(p, t), t)
    totals = stack.query_range(
        f'sum by (pool, outcome) (increase({ROUTER_REQUESTS_TOTAL}{{outcome!="retried"}}[1h]))', now - 1, now, 1
    )
    hidden: dict[tuple[str, str], dict] = {}
    for t, name, pool in inhibited:
        h = hidden.setdefault((name, pool), {"polls": 0, "while_refused": 0, "first_sim_s": round(sim(t), 1)})
        h["polls"] += 1
        if any((pool, round(t / POLL_S) + d) in refusing for d in (-2, -1, 0, 1)):
            h["while_refused"] += 1
    ended: dict[str, dict[str, float]] = {}
    for m, _, v in totals:
        ended.setdefault(m.get("pool", ""), {})[m.get("outcome", "")] = round(v)
    return {
        "label": label,
        "twin_speed": speed,
        "sim_end_s": round(sim(now), 1),
        "firing": sorted(
            (
                {"alert": a, "pool": p, "severity": f["severity"], "first_sim_s": round(sim(f["t"]), 1)}
                for (a, p), f in firing.items()
            ),
            key=lambda r: r["first_sim_s"],
        ),
        "notified": sorted(
            (
                {"alert": a, "pool": p, "receiver": r, "first_sim_s": round(sim(t), 1)}
                for (a, p, r), t in notified.items()
            ),
            key=lambda r: r["first_sim_s"],
        ),
        "first_refusal_sim_s": {p: round(sim(t), 1) for p, t in sorted(first_refusal.items())},
        "requests_ended": ended,
        "inhibited": [{"alert": a, "pool": p, **h} for (a, p), h in sorted(hidden.items())],
        "actions_applied": actuator.applied,
    }


def _am_doc(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--speed", type=float, default=5.0)
    p.add_argument("--before", type=Path, help="rule files and alertmanager.yml of the revision to compare with")
    p.add_argument("--json", type=Path, default=None, help="write here instead of publishing")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    runs = []
    if args.before:
        rules = {name: (args.before / name).read_text() for name in ("recording.yml", "alerts.yml")}
        runs.append(replay("before", args.speed, rules, _am_doc(args.before / "alertmanager.yml")))
        print(json.dumps(runs[-1]), flush=True)
    runs.append(replay("after", args.speed, None, alertmanager_config(Receivers())))
    print(json.dumps(runs[-1]), flush=True)
    result = {
        "runs": runs,
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "command": "nice -n 10 .venv/bin/python bench/pages.py --before DIR",
    }
    sys.path.insert(0, str(ROOT / "bench"))
    import results

    results.publish_or_write("pages", result, TABLES, args.json)
    return 0


KIND = {"pager": "page", "ticket": "ticket", "chat": "chat", "infercast-actuator": "actuator", "watchdog": "watchdog"}


def _kind(receiver: str) -> str:
    return next((k for prefix, k in KIND.items() if receiver.startswith(prefix)), receiver)


def render_timeline(result: dict) -> str:
    """Per alert and pool: when Prometheus first fired it, and what reached people (simulated seconds; the sale
    starts at 600), before and after."""
    runs = {r["label"]: r for r in result["runs"]}
    labels = [x for x in ("before", "after") if x in runs]
    keys: dict[tuple[str, str], None] = {}
    for r in runs.values():
        for f in r["firing"]:
            if f["alert"] != "InfercastWatchdog":
                keys[(f["alert"], f["pool"])] = None
    head = "| alert | pool | " + " | ".join(f"{x}: fired / reached" for x in labels) + " |"
    rows = [head, "|---|---|" + "---|" * len(labels)]

    def cell(r: dict, alert: str, pool: str) -> str:
        fired = next((f for f in r["firing"] if f["alert"] == alert and f["pool"] == pool), None)
        if fired is None:
            return "-"
        got = [n for n in r["notified"] if n["alert"] == alert and n["pool"] == pool]
        people = sorted(
            {f"{_kind(n['receiver'])} {n['first_sim_s']:.0f}" for n in got if _kind(n["receiver"]) != "actuator"}
        )
        hid = next((h for h in r["inhibited"] if h["alert"] == alert and h["pool"] == pool), None)
        text = f"{fired['severity']} {fired['first_sim_s']:.0f} / " + (", ".join(people) or "nobody")
        if hid:
            text += f" (inhibited from {hid['first_sim_s']:.0f})"
        return text

    order = sorted(keys, key=lambda k: min(f["first_sim_s"] for r in runs.values() for f in r["firing"]
                                           if (f["alert"], f["pool"]) == k))  # fmt: skip
    for alert, pool in order:
        rows.append(f"| `{alert}` | {pool or '-'} | " + " | ".join(cell(runs[x], alert, pool) for x in labels) + " |")
    rows.append("")
    for x in labels:
        r = runs[x]
        refused = ", ".join(f"{p} from {t:.0f} s" for p, t in r["first_refusal_sim_s"].items()) or "none"
        severity = {(f["alert"], f["pool"]): f["severity"] for f in r["firing"]}
        hidden_pages = sum(
            h["while_refused"] for h in r["inhibited"] if severity.get((h["alert"], h["pool"])) == "critical"
        )
        folded = sorted(
            {
                h["alert"]
                for h in r["inhibited"]
                if h["while_refused"] and severity.get((h["alert"], h["pool"])) != "critical"
            }
        )
        # the first page once a pool refused (a page before that, e.g. a starved scrape on a loaded machine, is not
        # about the sale)
        since = min(r["first_refusal_sim_s"].values(), default=0.0)
        harm = [n for n in r["notified"] if _kind(n["receiver"]) == "page" and n["first_sim_s"] >= since]
        first = min(harm, key=lambda n: n["first_sim_s"], default=None)
        first_text = "none" if first is None else f"`{first['alert']}` at {first['first_sim_s']:.0f} s"
        pages = sorted({n["alert"] for n in r["notified"] if _kind(n["receiver"]) == "page"})
        rows.append(
            f"- **{x}**: requests refused or failed: {refused}; first page after that: "
            f"{first_text}; all pages: "
            f"{', '.join(f'`{a}`' for a in pages) or 'none'}; "
            f"polls (every 0.5 s) with a page inhibited while its pool refused requests: **{hidden_pages}**"
            + (
                f"; warnings folded into that pool's page meanwhile: {', '.join(f'`{a}`' for a in folded)}"
                if folded
                else ""
            )
            + f"; actions the busy actuator applied: {sum(r['actions_applied'].values())}."
        )
    return "\n".join(rows)


TABLES = {"timeline": render_timeline}


if __name__ == "__main__":
    sys.exit(main())
