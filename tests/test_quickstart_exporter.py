"""docs/quickstart-exporter.md, played as its user (issue 38 item 7: one page per path, the default exporter mode on a
plain Prometheus): engines on loopback serving the captured payloads of tests/data/engines (counters growing with
time: tests/alerting/fake_engines.py), the page's fleet file with their URLs, its `infercast check`, its exporter
command as written (no NVML flag: this host has no GPU), the rules generated from the fleet file, the page's
Prometheus configuration on a real Prometheus (Debian's).  What the user must see: KV usage and batch saturation from
the fleet file's maximum batch, no invented router series, no NVML target and no `InfercastTargetDown`, and
`InfercastKVCacheUsageHigh` for the full pool only.

Departures from the page, for time: scrape and evaluation every second, the rules generated with `--time-scale 60`.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import requests
import yaml

from infercast.catalog import (
    BATCH_SATURATION_RATIO,
    DEGRADATIONS_TOTAL,
    KV_CACHE_USAGE_RATIO,
    ROUTER_REQUESTS_TOTAL,
    TARGET_UP,
)
from infercast.exporters.nvml import find_gpus
from infercast.servers import ServerUnavailable, free_port, start_prometheus
from tests.alerting.fake_engines import FakeEngine
from tests.conftest import REPO
from tests.test_quickstart_kubernetes import CLI, stop, wait_for
from tests.test_quickstart_kubernetes import keyed as by_group

pytestmark = pytest.mark.servers

PAGE = REPO / "docs" / "quickstart-exporter.md"
#: target name in the page's fleet file -> the payload served in its place
PAYLOADS = {"vllm-v4-0": "vllm.prom", "vllm-v3.5-0": "vllm-chat-v3.5.prom", "dcgm-node-17": "dcgm-exporter.prom"}


def page_block(marker: str) -> str:
    """The fenced block right after `<!-- test: MARKER -->` in the page."""
    m = re.search(rf"<!-- test: {re.escape(marker)} -->\s*```[a-z]*\n(.*?)```", PAGE.read_text(), re.S)
    assert m, f"{PAGE.name} has no block marked <!-- test: {marker} -->"
    return m.group(1)


def query(url: str, expr: str) -> list[dict]:
    r = requests.get(f"{url}/api/v1/query", params={"query": expr}, timeout=30)
    r.raise_for_status()
    return r.json()["data"]["result"]


def command(marker: str) -> list[str]:
    """The page's one command in that block, as argv after `infercast`."""
    (line,) = [ln.split("#")[0].strip() for ln in page_block(marker).splitlines() if ln.startswith("infercast ")]
    return shlex.split(line)[1:]


#: the commands run in the user's directory (where my-fleet.yaml is), with this checkout's infercast
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def spawn(argv: list[str], cwd: Path, log: Path) -> subprocess.Popen:
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env=ENV)


def test_the_exporter_quickstart_on_a_real_prometheus(tmp_path: Path) -> None:
    engines = {target: FakeEngine(payload) for target, payload in PAYLOADS.items()}
    procs: list[subprocess.Popen] = []
    prom = None

    def logs() -> dict[str, str]:
        return {p.name: p.read_text(errors="replace")[-1500:] for p in tmp_path.glob("*.log")}

    try:
        # 1. the page's fleet file, its engines' URLs replaced by the fixtures'; the page's check passes on it
        doc = yaml.safe_load(page_block("fleet"))
        assert "metrics" not in doc, "the page's path is the default, metrics.source: exporter"
        for t in doc["targets"]:
            t["url"] = f"http://{engines[t['name']].address}/metrics"
        fleet = tmp_path / "my-fleet.yaml"
        fleet.write_text(yaml.safe_dump(doc, sort_keys=False))
        argv = command("check")
        assert argv == ["check", "--config", "my-fleet.yaml"]
        res = subprocess.run([*CLI, *argv], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=ENV)
        assert res.returncode == 0, res.stdout + res.stderr
        assert "my-fleet.yaml -> alerts.yml" in res.stdout  # the rules this fleet builds, not the shipped ones

        # 2. the page's exporter command, as written but for the port
        argv = command("exporter")
        assert "--nvml" not in argv and "--no-nvml" not in argv
        port = free_port()
        argv = [a if not a.startswith("0.0.0.0:") else f"127.0.0.1:{port}" for a in argv]
        procs.append(spawn([*CLI, *argv], tmp_path, tmp_path / "exporter.log"))
        # the rules from the fleet file (the page's command, `for:` durations scaled for the test's time)
        out = tmp_path / "infercast"
        gen = [*CLI[:-1], "infercast.alertrules.generate", f"--fleet={fleet}", f"--out={out}", "--time-scale=60"]
        res = subprocess.run(gen, capture_output=True, text=True, timeout=120, cwd=tmp_path, env=ENV)
        assert res.returncode == 0, res.stderr

        # 3. the page's Prometheus configuration: its job and rule files, at the test's interval
        config = yaml.safe_load(page_block("prometheus"))
        config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
        names = [Path(f).name for f in config["rule_files"]]
        assert names == ["recording.yml", "alerts.yml"]
        config["rule_files"] = names
        (job,) = config["scrape_configs"]
        assert job["job_name"] == "infercast-exporter" and job["honor_labels"] is True
        job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
        try:
            prom = start_prometheus(
                yaml.safe_dump(config, sort_keys=False),
                rule_files={n: (out / n).read_text() for n in names},
                workdir=tmp_path / "data",
            )
        except ServerUnavailable as e:
            pytest.skip(str(e))

        # 4. what the page says is there
        kv = wait_for(
            "the exporter's KV usage in Prometheus",
            lambda: {s["metric"]["instance"]: float(s["value"][1]) for s in query(prom.url, KV_CACHE_USAGE_RATIO)},
            120,
            logs,
        )
        assert kv == {"vllm-v4-0/0": 0.9312, "vllm-v4-0/1": 0.9688, "vllm-v3.5-0": 0.5214}
        # batch saturation from the fleet file's maximum batch: vLLM's default 256, the pool's engines.max_batch
        sat = {s["metric"]["instance"]: float(s["value"][1]) for s in query(prom.url, BATCH_SATURATION_RATIO)}
        assert sat == {"vllm-v4-0/0": 128 / 256, "vllm-v4-0/1": 134 / 256, "vllm-v3.5-0": 84 / 128}
        # no invented traffic, no NVML target on a host without GPUs
        assert query(prom.url, ROUTER_REQUESTS_TOTAL) == [] and query(prom.url, DEGRADATIONS_TOTAL) == []
        up = {s["metric"]["target"]: float(s["value"][1]) for s in query(prom.url, TARGET_UP)}
        assert up == {"vllm-v4-0": 1.0, "vllm-v3.5-0": 1.0, "dcgm-node-17": 1.0} or find_gpus()[0] > 0, up
        # the alert, for the full pool only
        firing = wait_for(
            "InfercastKVCacheUsageHigh firing",
            lambda: by_group(query(prom.url, 'ALERTS{alertname="InfercastKVCacheUsageHigh",alertstate="firing"}')),
            120,
            logs,
        )
        assert set(firing) == {("v4-main", "v4")}
        time.sleep(5)  # InfercastTargetDown's for: (2 m / 60) has passed several times over
        assert query(prom.url, 'ALERTS{alertname="InfercastTargetDown"}') == [], logs()
    finally:
        for p in procs:
            stop(p)
        if prom is not None:
            prom.close()
        for e in engines.values():
            e.close()
