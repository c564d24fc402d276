"""How fast the actuator's I/O is: webhook to inbox, decision to action through each backend, webhook to action.

    nice -n 10 .venv/bin/python bench/actuator.py [-n 200] [--publish]

Each path is timed `-n` times, alternating with its baseline (a shared machine's fsync and scheduling costs swing
by 10x within seconds; alternating lets both sides see the same moments), and printed as p50/p99 in ms and as a
ratio against that baseline, which does the least the same path could do:

- **webhook -> inbox**: one Alertmanager notification POSTed to the actuator's webhook (bearer token, payload
  validated, deduplicated, queued) / a bare `requests.post` of the same body to a no-op route of the same server;
- **apply** through a backend, and **decision -> action** (the audit trail's `record_decision` + the apply with
  its idempotency key + `mark_applied`, SQLite WAL with synchronous=FULL): HTTP to the twin's router admin API /
  a bare `requests.post` to the twin's own `/pools/<pool>/weight`; Redis (one Lua script: replay check, fencing
  check, HSET, revision, PUBLISH) / a bare `HSET`; the file (flock, read, validate, temp file + fsync + rename +
  directory fsync) / a bare write + fsync + rename of the same bytes;
- **webhook -> action**: a POSTed alert until the daemon's alert loop (woken by the webhook, on its scheduler) has
  drained it and applied an action to the twin over HTTP / the same bare `requests.post`.

The goal (issue 9) is decision-to-action and webhook-to-action within 1 s; no test asserts a time, this records
them.  A small loop in this file stands in for the control loop (it decides nothing of its own: one fixed action
per alert).  `--publish` writes docs/results/actuator.json and the marked table in docs/actuator.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import requests

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.results import publish  # noqa: E402
from infercast.actuators.actions import SetPoolWeight  # noqa: E402
from infercast.actuators.admin import Result, apply_with_retries  # noqa: E402
from infercast.actuators.audit import Audit  # noqa: E402
from infercast.actuators.backends.file import FileAdmin  # noqa: E402
from infercast.actuators.backends.redis import RedisAdmin  # noqa: E402
from infercast.actuators.backends.router_http import HttpAdmin  # noqa: E402
from infercast.actuators.daemon import Daemon  # noqa: E402
from infercast.actuators.leader import SingleReplica  # noqa: E402
from infercast.actuators.stamp import Stamp, stamped  # noqa: E402
from infercast.actuators.tick import ActionOutcome, TickContext, TickReport  # noqa: E402
from infercast.actuators.webhook import Inbox, WebhookReceiver  # noqa: E402
from infercast.config import load_config  # noqa: E402
from infercast.httpserve import HttpService, Response, Route  # noqa: E402
from infercast.servers import start_redis  # noqa: E402
from infercast.simulator.twin.admin import TwinAdmin  # noqa: E402
from infercast.simulator.twin.fleet import build_fleet  # noqa: E402
from infercast.simulator.twin.surfaces import TwinServer  # noqa: E402

TOKEN = "bench-token"
GOAL_MS = 1000.0


def paired(fn: Callable[[int], None], base: Callable[[int], None], n: int, warmup: int = 5) -> tuple[list, list]:
    """`n` timings (ms) of `fn` and of its baseline, taken alternately: on a shared machine the cost of an fsync or
    a context switch swings by 10x from one second to the next, and a ratio means something only when both sides
    saw the same moments."""
    for i in range(warmup):
        fn(-1 - i)
        base(-1 - i)
    got: list[float] = []
    ref: list[float] = []
    for i in range(n):
        for f, out in ((fn, got), (base, ref)) if i % 2 == 0 else ((base, ref), (fn, got)):
            t0 = time.perf_counter()
            f(i)
            out.append((time.perf_counter() - t0) * 1000.0)
    return got, ref


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def row(path: str, got: list[float], baseline: str, base: list[float]) -> dict:
    p50, p99, b50, b99 = pct(got, 0.5), pct(got, 0.99), pct(base, 0.5), pct(base, 0.99)
    return {
        "path": path,
        "p50_ms": round(p50, 3),
        "p99_ms": round(p99, 3),
        "baseline": baseline,
        "baseline_p50_ms": round(b50, 3),
        "baseline_p99_ms": round(b99, 3),
        "ratio_p50": round(p50 / b50, 2),
        "ratio_p99": round(p99 / b99, 2),
        "within_goal": p99 <= GOAL_MS,
    }


def notification(fp: str) -> dict:
    labels = {"alertname": "InfercastKVCacheForecastBreach", "pool": "v4-main", "version": "v4", "actuator": "notify"}
    return {
        "version": "4",
        "status": "firing",
        "receiver": "infercast-actuator",
        "alerts": [{"status": "firing", "labels": labels, "annotations": {}, "fingerprint": fp}],
    }


def bench_webhook(n: int) -> list[dict]:
    inbox = Inbox(maxlen=100_000)
    hook = WebhookReceiver(inbox)
    noop = Route("POST", "/noop", lambda _: Response.json({"ok": True}), mutates=True)
    http = HttpService([hook.route(), noop], name="bench", token=TOKEN).start()
    s = requests.Session()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        bare = lambda i: s.post(f"{http.url}/noop", json=notification(f"b{i}"), headers=auth, timeout=5)  # noqa: E731

        def post(i: int) -> None:
            r = s.post(f"{http.url}/api/v1/alerts", json=notification(f"f{i}"), headers=auth, timeout=5)
            assert r.json()["accepted"] == 1

        got, base = paired(post, bare, n)
    finally:
        http.close()
    return [row("webhook -> inbox", got, "bare POST, no-op route, same server", base)]


def decide_and_apply(audit: Audit, admin, i: int, pool: str = "v4-main") -> None:
    action = SetPoolWeight(pool, 0.5 + (i % 2) / 10)
    key = f"bench-{admin.name}-{i}-{time.monotonic_ns()}"
    decision = audit.record_decision(time.time(), key, action, {"reason": "bench"})
    res = apply_with_retries(stamped(admin, Stamp(key, 1)), action)
    assert res.status == "applied", res.detail
    audit.mark_applied(decision, res, time.time())


def bench_backends(n: int, tmp: Path) -> list[dict]:
    rows = []
    cfg = load_config(REPO / "examples" / "flash-sale.yaml")
    fleet = build_fleet(cfg)
    twin = TwinServer(fleet, token=TOKEN).start()
    s = requests.Session()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    audit = Audit(tmp / "audit.db")
    try:
        bare = lambda i: s.post(f"{twin.url}/pools/v4-main/weight", json={"weight": 0.5}, headers=auth)  # noqa: E731
        admin = HttpAdmin(twin.url, TOKEN)
        got, base = paired(lambda i: admin.apply(SetPoolWeight("v4-main", 0.5), stamp=Stamp(f"h{i}", 1)), bare, n)
        rows.append(
            row("apply: HTTP (twin's router admin API)", got, "bare POST to the twin's /pools/<p>/weight", base)
        )
        got, base = paired(lambda i: decide_and_apply(audit, admin, i), bare, n)
        rows.append(row("decision -> action: HTTP", got, "bare POST to the twin's /pools/<p>/weight", base))
    finally:
        twin.stop()

    redis = start_redis(workdir=tmp / "redis")
    try:
        radmin = RedisAdmin.from_url(f"redis://127.0.0.1:{redis.port}/0", prefix="bench")
        radmin.seed(TwinAdmin(fleet).observe())
        r = radmin.r
        bare = lambda i: r.hset("bench:pool:v4-main", "weight", "0.5")  # noqa: E731
        got, base = paired(lambda i: radmin.apply(SetPoolWeight("v4-main", 0.5), stamp=Stamp(f"r{i}", 1)), bare, n)
        rows.append(row("apply: Redis (Lua: checks, HSET, PUBLISH)", got, "bare HSET", base))
        got, base = paired(lambda i: decide_and_apply(audit, radmin, i), bare, n)
        rows.append(row("decision -> action: Redis", got, "bare HSET", base))
    finally:
        redis.close()

    def audit_only(i: int) -> None:
        action = SetPoolWeight("v4-main", 0.5)
        decision = audit.record_decision(time.time(), f"audit-{i}-{time.monotonic_ns()}", action, {"reason": "b"})
        audit.mark_applied(decision, Result("applied", previous=action), time.time())

    fadmin = FileAdmin(tmp / "router.yaml", cfg)
    fadmin.apply(SetPoolWeight("v4-main", 0.5))
    data = (tmp / "router.yaml").read_bytes()

    def bare_write(i: int) -> None:
        tmpf = tmp / ".bare.tmp"
        with open(tmpf, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmpf, tmp / "bare.yaml")

    got, base = paired(audit_only, bare_write, n)
    rows.insert(
        0, row("audit: record + answer (SQLite WAL, synchronous=FULL)", got, "bare write + fsync + rename", base)
    )
    got, base = paired(lambda i: fadmin.apply(SetPoolWeight("v4-main", 0.5), stamp=Stamp(f"f{i}", 1)), bare_write, n)
    rows.append(row("apply: file (flock, validate, atomic replace)", got, "bare write + fsync + rename", base))
    got, base = paired(lambda i: decide_and_apply(audit, fadmin, i), bare_write, n)
    rows.append(row("decision -> action: file", got, "bare write + fsync + rename", base))
    audit.close()
    return rows


class AlertToAction:
    """Stands in for the control loop in this bench only: each alert event -> one fixed action, applied."""

    def __init__(self, inbox: Inbox, admin, audit: Audit) -> None:
        self.inbox, self.admin, self.audit = inbox, admin, audit
        self.done: dict[str, float] = {}
        self.cond = threading.Condition()

    def __call__(self, now: float, ctx: TickContext) -> TickReport:
        outcomes = []
        for ev in self.inbox.drain():
            decide_and_apply(self.audit, self.admin, len(self.done))
            with self.cond:
                self.done[ev.fingerprint] = time.perf_counter()
                self.cond.notify_all()
            outcomes.append(ActionOutcome(SetPoolWeight("v4-main", 0.5), "applied", "alert", now, time.time()))
        return TickReport(tuple(outcomes))


def bench_webhook_to_action(n: int, tmp: Path) -> list[dict]:
    fleet = build_fleet(load_config(REPO / "examples" / "flash-sale.yaml"))
    twin = TwinServer(fleet, token=TOKEN).start()
    inbox = Inbox(maxlen=100_000)
    audit = Audit(tmp / "audit-w2a.db")
    loop = AlertToAction(inbox, HttpAdmin(twin.url, TOKEN), audit)
    daemon = Daemon(
        loop, SingleReplica(), mode="active", fast_interval=3600, predictive_interval=3600,
        webhook=WebhookReceiver(inbox), token=TOKEN,
    ).start(first_run=False)  # fmt: skip
    s = requests.Session()
    auth = {"Authorization": f"Bearer {TOKEN}"}
    try:
        bare = lambda i: s.post(f"{twin.url}/pools/v4-main/weight", json={"weight": 0.5}, headers=auth)  # noqa: E731

        def alert_until_applied(i: int) -> None:
            fp = f"w{i}"
            s.post(f"{daemon.url}/api/v1/alerts", json=notification(fp), headers=auth, timeout=5)
            with loop.cond:
                assert loop.cond.wait_for(lambda: fp in loop.done, timeout=10), "no action within 10 s"

        got, base = paired(alert_until_applied, bare, n)
    finally:
        daemon.stop()
        twin.stop()
        audit.close()
    return [row("webhook -> action (daemon, alert loop, HTTP)", got, "bare POST to the twin's /pools/<p>/weight", base)]


def render(result: dict) -> str:
    head = (
        "| path | p50 ms | p99 ms | baseline (same run) | baseline p50 / p99 ms | ratio p50 | ratio p99 |\n"
        "|---|---:|---:|---|---:|---:|---:|\n"
    )
    lines = [
        f"| {r['path']} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | {r['baseline']} | "
        f"{r['baseline_p50_ms']:.2f} / {r['baseline_p99_ms']:.2f} | {r['ratio_p50']:.1f} | {r['ratio_p99']:.1f} |"
        for r in result["rows"]
    ]
    return head + "\n".join(lines) + f"\n\n{result['n']} runs each; {result['machine']}.\n"


TABLES = {"latency": render}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("-n", type=int, default=200, help="timed runs per path (default 200)")
    p.add_argument("--publish", action="store_true", help="write docs/results/actuator.json and the docs table")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-actuator-") as d:
        tmp = Path(d)
        rows = bench_webhook(args.n) + bench_backends(args.n, tmp) + bench_webhook_to_action(args.n, tmp)
    result = {
        "n": args.n,
        "machine": f"{os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}, shared with "
        "other jobs",
        "goal_ms": GOAL_MS,
        "rows": rows,
    }
    print(render(result))
    worst = max(r["p99_ms"] for r in rows if "->" in r["path"])
    print(f"worst p99 of decision/webhook -> action: {worst:.1f} ms (goal {GOAL_MS:.0f} ms)")
    print(f"median ratio to the bare baselines: {statistics.median(r['ratio_p50'] for r in rows):.1f}x")
    if args.publish:
        print(publish("actuator", result, TABLES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
