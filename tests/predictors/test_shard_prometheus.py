"""Two sharded predictor processes against one real Prometheus on loopback, then one of them killed.

Prometheus scrapes a stand-in exporter (KV usage of 12 pool/version groups) and both `infercast predictor
--shard I/2` processes, evaluates the real rules (`for:` durations scaled 60x) and, as a referee, labels every
series it scrapes from the predictors with its own `hashmod` of (pool, version) (`expected_shard`).  Shown:
- each process publishes only its shard's groups, exactly the ones Prometheus' hashmod gives it; the two sets are
  disjoint and their union is the whole fleet, in the raw series and in the recording rule the alerts read;
- when shard 1 is killed, its series go stale at the next failed scrape (absent, never a frozen value), and
  `InfercastForecastMissing` fires for exactly its groups, while `InfercastForecastsStale` stays quiet (the
  surviving replica keeps the per-forecaster timestamp fresh) -- which is why the per-pool alert exists.
"""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests
import yaml

from infercast.alertrules.generate import dump
from infercast.alertrules.rules import rule_files
from infercast.alertrules.settings import AlertSettings
from infercast.predictors.shard import shard_of
from infercast.servers import ServerUnavailable, free_port, start_prometheus

pytestmark = [pytest.mark.servers, pytest.mark.slow]

GROUPS = [(f"pool-{i:02d}", "v4" if i % 3 else "v3.5") for i in range(12)]


def _exporter() -> ThreadingHTTPServer:
    body = "".join(
        f'infercast_kv_cache_usage_ratio{{pool="{p}",version="{v}",instance="{p}-0"}} {0.4 + 0.01 * i}\n'
        for i, (p, v) in enumerate(GROUPS)
    ).encode()

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a: object) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def _prometheus_config(exporter: str, predictors: list[str]) -> str:
    cfg = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["recording.yml", "alerts.yml"],
        "scrape_configs": [
            {"job_name": "infercast-exporter", "honor_labels": True, "static_configs": [{"targets": [exporter]}]},
            {
                "job_name": "infercast-predictor",
                "honor_labels": True,
                "static_configs": [{"targets": predictors}],
                # the referee: Prometheus' own hashmod of (pool, version), as its target sharding would compute it
                "metric_relabel_configs": [
                    {
                        "source_labels": ["pool", "version"],
                        "action": "hashmod",
                        "modulus": 2,
                        "target_label": "expected_shard",
                    }
                ],
            },
        ],
    }
    return yaml.safe_dump(cfg, sort_keys=False)


def _query(url: str, q: str) -> list[dict]:
    r = requests.get(f"{url}/api/v1/query", params={"query": q}, timeout=5)
    r.raise_for_status()
    return r.json()["data"]["result"]


def _wait(fn, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        with contextlib.suppress(requests.RequestException):
            ok, last = fn()
            if ok:
                return last
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}; last seen: {last}")


FORECASTS = 'infercast_forecast_kv_cache_usage_ratio{band="point"}'


def test_two_shards_split_the_fleet_and_a_dead_one_is_caught_per_pool(tmp_path, repo_root):
    exporter = _exporter()
    ports = [free_port(), free_port()]
    targets = [f"127.0.0.1:{p}" for p in ports]
    rules = {name: dump(doc) for name, doc in rule_files(AlertSettings().scaled(60)).items()}
    try:
        prom = start_prometheus(
            _prometheus_config(f"127.0.0.1:{exporter.server_address[1]}", targets), rule_files=rules, workdir=tmp_path
        )
    except ServerUnavailable as e:
        exporter.shutdown()
        pytest.skip(str(e))
    fleet = yaml.safe_load((repo_root / "examples" / "flash-sale.yaml").read_text())
    fleet["predictor"] = {
        "prometheus_url": prom.url,
        "step_seconds": 1,
        "history_seconds": 60,
        "min_history_points": 5,
        "forecast_interval_seconds": 1,
        "stale_after_seconds": 30,
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(fleet))
    cli = [sys.executable, "-m", "infercast.tools.cli", "predictor", "--config", str(path)]
    procs = [
        subprocess.Popen(
            [*cli, "--listen", targets[i], "--shard", f"{i}/2"],
            cwd=repo_root,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for i in range(2)
    ]
    try:

        def by_instance():
            seen: dict[str, set[tuple[str, str]]] = {t: set() for t in targets}
            for r in _query(prom.url, FORECASTS):
                m = r["metric"]
                seen[m["instance"]].add((m["pool"], m["version"]))
                # Prometheus' hashmod puts this series in the shard of the process that published it
                assert int(m["expected_shard"]) == targets.index(m["instance"]), m
            return sum(len(s) for s in seen.values()) == len(GROUPS), seen

        seen = _wait(by_instance, 120, "both shards' forecasts in Prometheus")
        a, b = seen[targets[0]], seen[targets[1]]
        assert a and b and not (a & b) and a | b == set(GROUPS)
        assert a == {g for g in GROUPS if shard_of(*g, 2) == 0}

        # what the alert rules read sees the union (once the recording rule's next evaluation has run)
        def rules_see_the_union():
            upper = _query(prom.url, "pool_version:infercast_forecast_kv_cache_usage_ratio:max_yhat_upper")
            got = {(r["metric"]["pool"], r["metric"]["version"]) for r in upper}
            return got == set(GROUPS), got

        _wait(rules_see_the_union, 30, "the recording rule to see both shards")

        procs[1].send_signal(signal.SIGKILL)  # shard 1 dies without a word
        procs[1].wait(timeout=10)

        def only_shard_0():
            left = {(r["metric"]["pool"], r["metric"]["version"]) for r in _query(prom.url, FORECASTS)}
            return left == a, left

        _wait(only_shard_0, 30, "shard 1's forecasts to go stale")

        def missing_fires():
            firing = {
                (r["metric"]["pool"], r["metric"]["version"])
                for r in _query(prom.url, 'ALERTS{alertname="InfercastForecastMissing",alertstate="firing"}')
            }
            return firing == b, firing

        _wait(missing_fires, 60, "InfercastForecastMissing for exactly shard 1's groups")
        assert _query(prom.url, 'ALERTS{alertname="InfercastForecastsStale"}') == []
        down = _query(prom.url, 'up{job="infercast-predictor"}')
        assert {r["metric"]["instance"]: r["value"][1] for r in down} == {targets[0]: "1", targets[1]: "0"}
        # gone within the 30 s wait above, far inside Prometheus' 5 min lookback: the staleness marker removed
        # them, not the lookback running out (how soon is Prometheus' scrape timing, not asserted)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        prom.close()
        exporter.shutdown()
