"""docs/quickstart-prometheus.md, played as its user: engines on loopback (the captured payloads of
tests/data/engines, counters growing with time: tests/alerting/fake_engines.py), the quickstart's fleet file with
their URLs, `infercast k8s prometheus` writing prometheus.yml and engines.yml, a real Prometheus (Debian's) loading
both, and every recording rule asserted against the values worked out by hand from the payloads.

Two departures from the page, both for time: the scrape and evaluation interval is 1 s (the page: 15 s), and the
rate window 15 s (the page: 5 m, hence the names' `rate5m`; here `rate15s`).  A rate over 5 minutes of a fresh
series is extrapolated from what it has, so the test would have to wait 5 minutes to compare exact numbers.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from infercast.alertrules.engines import names
from infercast.servers import ServerUnavailable, start_prometheus
from tests.alerting.fake_engines import DATA, FakeEngine
from tests.conftest import REPO

pytestmark = pytest.mark.servers

FLEET = REPO / "examples" / "quickstart-prometheus.yaml"
WINDOW = "15s"
WINDOW_S = 15.0
#: target name in the quickstart fleet file -> the payload served in its place
PAYLOADS = {
    "vllm-v4-0": "vllm.prom",  # chat-v4, data-parallel engines "0" and "1"
    "vllm-v3.5-0": "vllm-chat-v3.5.prom",
    "sglang-v4-0": "sglang.prom",
    "tgi-v4-0": "tgi.prom",
    "triton-0": "tensorrt-llm-triton.prom",  # chat-v4 and chat-v3.5 on one Triton
    "dcgm-node-17": "dcgm-exporter.prom",
}


def total(payload: str, metric: str) -> float:
    """The sum of every sample of `metric` in the payload (all its label sets)."""
    out = 0.0
    for line in (DATA / payload).read_text().splitlines():
        if line.startswith((f"{metric}{{", f"{metric} ")):
            out += float(line.rsplit(" ", 1)[1])
    return out


def expected() -> dict[str, dict[tuple[str, ...], float]]:
    """Recorded name -> {(pool, version) or (version,) or (pool,): value}, from the payloads' own numbers.

    The engines' counters grow by their payload value every 60 s (FakeEngine), so a counter's rate is its
    payload value / 60."""
    n = names(WINDOW)
    kv = {
        ("v4-main", "v4"): [0.9312, 0.9688],  # vllm:kv_cache_usage_perc, engines 0 and 1
        ("v3.5-fallback", "v3.5"): [0.5214],
        ("v4-sglang", "v4"): [0.8729],  # sglang:token_usage (tp_rank 0)
        ("v4-tgi", "v4"): [381120 / 407552],  # tgi_batch_current_max_tokens / tgi_batch_max_total_tokens
        ("trt", "v4"): [5857 / 6400],  # Triton chat-v4: used / max blocks
        ("trt", "v3.5"): [2598 / 6784],  # Triton chat-v3.5
    }
    batch = {
        ("v4-main", "v4"): [128 / 256, 134 / 256],  # running / the fleet file's max batch (v4's batcher)
        ("v3.5-fallback", "v3.5"): [84 / 128],
        ("v4-sglang", "v4"): [212 / 256],  # pools.v4-sglang.engines.max_batch
        ("v4-tgi", "v4"): [118 / 128],
        ("trt", "v4"): [131 / 256],  # Triton's own active / max
        ("trt", "v3.5"): [57 / 128],
    }
    qps = {
        ("v4-main", "v4"): total("vllm.prom", "vllm:request_success_total") / 60,
        ("v3.5-fallback", "v3.5"): total("vllm-chat-v3.5.prom", "vllm:request_success_total") / 60,
        ("v4-sglang", "v4"): total("sglang.prom", "sglang:num_requests_total") / 60,
        ("v4-tgi", "v4"): total("tgi.prom", "tgi_request_count") / 60,
        # Triton core's nv_inference_request_success has no _total suffix, so FakeEngine serves it unchanged: a
        # rate of 0, per model mapped to its version
        ("trt", "v4"): 0.0,
        ("trt", "v3.5"): 0.0,
    }
    fleet = sum(qps.values())
    by_version = {"v4": 0.0, "v3.5": 0.0}
    for (_, version), v in qps.items():
        by_version[version] += v
    return {
        n["max_batch"]: {
            ("v4-main",): 256,
            ("v3.5-fallback",): 128,
            ("v4-sglang",): 256,
            ("v4-tgi",): 128,
            ("trt",): 256,
        },
        n["kv_usage_avg"]: {k: sum(v) / len(v) for k, v in kv.items()},
        n["kv_usage_max"]: {k: max(v) for k, v in kv.items()},
        n["batch_saturation_avg"]: {k: sum(v) / len(v) for k, v in batch.items()},
        n["batch_saturation_max"]: {k: max(v) for k, v in batch.items()},
        n["requests_pool_rate"]: qps,
        n["requests_pool_share"]: {k: v / fleet for k, v in qps.items()},
        n["requests_version_share"]: {(ver,): v / fleet for ver, v in by_version.items()},
    }


def query(url: str, expr: str) -> list[dict]:
    r = requests.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10)
    r.raise_for_status()
    return r.json()["data"]["result"]


def keyed(result: list[dict], labels: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    return {tuple(s["metric"].get(lab, "") for lab in labels): float(s["value"][1]) for s in result}


def _key_labels(name: str) -> tuple[str, ...]:
    level = name.split(":", 1)[0]
    return {"pool": ("pool",), "version": ("version",)}.get(level, ("pool", "version"))


def mismatches(url: str) -> list[str]:
    bad = []
    for name, want in expected().items():
        got = keyed(query(url, name), _key_labels(name))
        if set(got) != set(want):
            bad.append(f"{name}: series {sorted(got)}, expected {sorted(want)}")
            continue
        for key, value in want.items():
            if got[key] != pytest.approx(value, rel=0.03, abs=1e-9):
                bad.append(f"{name}{key}: {got[key]:.6g}, expected {value:.6g}")
    return bad


def test_the_quickstart_on_a_real_prometheus(tmp_path: Path) -> None:
    engines = {target: FakeEngine(payload) for target, payload in PAYLOADS.items()}
    prom = None
    try:
        # the user's fleet file: the quickstart's, with their engines' URLs
        doc = yaml.safe_load(FLEET.read_text())
        for t in doc["targets"]:
            t["url"] = f"http://{engines[t['name']].address}/metrics"
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(yaml.safe_dump(doc, sort_keys=False))
        out = tmp_path / "prom"
        argv = [sys.executable, "-m", "infercast.cli", "k8s", "prometheus", f"--fleet={fleet}", f"--out={out}"]
        res = subprocess.run(
            [*argv, "--interval=1s", f"--rate-window={WINDOW}"], capture_output=True, text=True, timeout=120, cwd=REPO
        )
        assert res.returncode == 0, res.stderr
        config = (out / "prometheus.yml").read_text()
        assert "honor_labels" not in config.split("job_name: dcgm-exporter")[0], "engine jobs keep their own labels"
        try:
            prom = start_prometheus(
                config, rule_files={"engines.yml": (out / "engines.yml").read_text()}, workdir=tmp_path / "data"
            )
        except ServerUnavailable as e:
            pytest.skip(str(e))
        # every rate window full (a fresh series' rate is extrapolated from less), then the values settle
        time.sleep(WINDOW_S + 3)
        deadline = time.time() + 30
        bad = mismatches(prom.url)
        while bad and time.time() < deadline:
            time.sleep(1)
            bad = mismatches(prom.url)
        assert not bad, "\n".join(bad)

        # the engines' own labels are kept: vLLM's engine and model_name, Triton's model version (exported_version:
        # the target's version label wins, metric relabelling then maps the model to the fleet's version)
        inst = query(prom.url, names(WINDOW)["kv_usage"])
        assert len(inst) == 7
        vllm = sorted(s["metric"].get("engine", "") for s in inst if s["metric"]["pool"] == "v4-main")
        assert vllm == ["0", "1"]
        triton = {s["metric"]["model"]: s["metric"] for s in inst if s["metric"]["pool"] == "trt"}
        assert triton["chat-v3.5"]["version"] == "v3.5" and triton["chat-v3.5"]["exported_version"] == "1"
        # dcgm-exporter keeps the pod that uses each GPU (honor_labels on its job only)
        dcgm = query(prom.url, 'DCGM_FI_DEV_FB_USED{pod="vllm-chat-v4-6f9c8d7b5-x2k4q"}')
        assert len(dcgm) == 2
    finally:
        if prom is not None:
            prom.close()
        for e in engines.values():
            e.close()
