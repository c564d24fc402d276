"""docs/quickstart-prometheus.md, played as its user: engines on loopback (the captured payloads of
tests/data/engines, counters growing with time: tests/alerting/fake_engines.py), the quickstart's fleet file with
their URLs (`metrics.source: engines`), `infercast k8s prometheus` writing prometheus.yml, engines.yml and the
engines-mode recording.yml and alerts.yml, a real Prometheus (Debian's) loading them, and every engine recording
rule asserted against the values worked out by hand from the payloads.  Then the rest of the page's stack, real
processes: `infercast exporter` (reduced: only what the engines do not give) and `infercast predictor` scraped by
that Prometheus without honor_labels; the predictor's forecasts read through the engine rules; the alerts firing on
the engines' own KV usage; every dashboard panel that reads an engine rule returning data.

Departures from the page, for time: the scrape and evaluation interval is 1 s (the page: 15 s), the rate window
15 s (the fleet file's `metrics.rate_window`; the page: 5 m, hence the names' `rate5m`; here `rate15s`: a rate over
5 minutes of a fresh series is extrapolated from what it has, so the test would have to wait 5 minutes to compare
exact numbers), and the predictor on a 1 s grid over 30 s of history.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests
import yaml

from infercast.alertrules.engines import names
from infercast.catalog import (
    FORECAST_KV_CACHE_USAGE_RATIO,
    FORECAST_REQUESTS_PER_SECOND,
    KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    KV_CACHE_USAGE_RATIO,
    REQUESTS_RUNNING,
)
from infercast.config import load_config
from infercast.dashboards.build import DASHBOARDS, DashboardSettings, render
from infercast.servers import ServerUnavailable, free_port, start_prometheus
from tests.alerting.fake_engines import DATA, FakeEngine
from tests.alerting.test_dashboards import panel_targets, substitute
from tests.conftest import REPO
from tests.test_quickstart_kubernetes import CLI, spawn, stop, wait_for
from tests.test_quickstart_kubernetes import keyed as by_group

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
    procs: list[subprocess.Popen] = []
    prom = None

    def logs() -> dict[str, str]:
        return {p.name: p.read_text(errors="replace")[-1500:] for p in tmp_path.glob("*.log")}

    try:
        # the user's fleet file: the quickstart's, with their engines' URLs
        doc = yaml.safe_load(FLEET.read_text())
        assert doc["metrics"]["source"] == "engines", "the page's fleet reads the engines' own metrics"
        for t in doc["targets"]:
            t["url"] = f"http://{engines[t['name']].address}/metrics"
        doc["metrics"]["rate_window"] = WINDOW
        doc["predictor"] = {
            "step_seconds": 1.0,
            "history_seconds": 30.0,
            "forecast_interval_seconds": 1.0,
            "min_history_points": 8,
            "refit_interval_seconds": 5.0,  # how often `auto` looks again whether the rules cover the history
        }
        fleet = tmp_path / "fleet.yaml"
        fleet.write_text(yaml.safe_dump(doc, sort_keys=False))
        out = tmp_path / "prom"
        argv = [*CLI, "k8s", "prometheus", f"--fleet={fleet}", f"--out={out}", "--interval=1s"]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=REPO)
        assert res.returncode == 0, res.stderr
        written = {"engines.yml", "recording.yml", "alerts.yml"}
        assert {p.name for p in out.iterdir()} == {"prometheus.yml", *written}
        config = yaml.safe_load((out / "prometheus.yml").read_text())
        assert set(config["rule_files"]) == written
        text = (out / "prometheus.yml").read_text()
        assert "honor_labels" not in text.split("job_name: dcgm-exporter")[0], "engine jobs keep their own labels"

        # the rest of the stack: the exporter (reduced) and the predictor, scraped as any service, no honor_labels
        exporter_port, predictor_port = free_port(), free_port()
        procs.append(
            spawn(
                [*CLI, "exporter", f"--config={fleet}", f"--listen=127.0.0.1:{exporter_port}"],
                tmp_path / "exporter.log",
            )
        )
        for job, port in (("infercast-exporter", exporter_port), ("infercast-predictor", predictor_port)):
            config["scrape_configs"].append({"job_name": job, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]})
        try:
            prom = start_prometheus(
                yaml.safe_dump(config, sort_keys=False),
                rule_files={n: (out / n).read_text() for n in written},
                workdir=tmp_path / "data",
            )
        except ServerUnavailable as e:
            pytest.skip(str(e))
        procs.append(
            spawn(
                [
                    *CLI,
                    "predictor",
                    f"--config={fleet}",
                    f"--prometheus={prom.url}",
                    f"--listen=127.0.0.1:{predictor_port}",
                ],
                tmp_path / "predictor.log",
            )
        )

        # 1. the engine rules: every rate window full (a fresh series' rate is extrapolated from less), then settled
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

        # 2. the exporter, reduced: no KV usage or running requests of its own (the engine rules record them); what
        # it still emits is under the engine's address, which Prometheus keeps as exported_instance (no honor_labels)
        kept = wait_for(
            "the reduced exporter's series in Prometheus",
            lambda: query(prom.url, f'{KV_BLOCK_ALLOCATION_FAILURES_TOTAL}{{job="infercast-exporter",pool="v4-main"}}'),
            60,
            logs,
        )
        assert query(prom.url, KV_CACHE_USAGE_RATIO) == [] and query(prom.url, REQUESTS_RUNNING) == []
        v4_engine = urlsplit(doc["targets"][0]["url"]).netloc
        assert {s["metric"].get("exported_instance") for s in kept} == {v4_engine}
        assert {s["metric"]["instance"] for s in inst if s["metric"]["pool"] == "v4-main"} == {v4_engine}

        # 3. the alerts, on the engines' own KV usage: the fullest engine over the 0.80 breaker pages
        firing = wait_for(
            "InfercastKVCacheUsageHigh firing on the engines' KV usage",
            lambda: by_group(query(prom.url, 'ALERTS{alertname="InfercastKVCacheUsageHigh",alertstate="firing"}')),
            60,
            logs,
        )
        # v4-main 0.9688, SGLang 0.8729, TGI 0.935, Triton chat-v4 0.915; v3.5 (0.52, 0.38) stays quiet
        assert set(firing) == {("v4-main", "v4"), ("v4-sglang", "v4"), ("v4-tgi", "v4"), ("trt", "v4")}

        # 4. the predictor: its history read through the engine rules, forecasts for every pool and version
        upper = f'{FORECAST_KV_CACHE_USAGE_RATIO}{{band="upper",aggregate="max"}}'
        want = {k for k in expected()[names(WINDOW)["kv_usage_max"]]}
        fc = wait_for(
            "the predictor's KV forecasts in Prometheus for every pool",
            lambda: (g := by_group(query(prom.url, upper))) and set(g) == want and g,
            120,
            logs,
        )
        assert fc[("v4-main", "v4")] > doc.get("thresholds", {}).get("kv_forecast_trigger", 0.75)
        rps = by_group(query(prom.url, f'{FORECAST_REQUESTS_PER_SECOND}{{band="point"}}'))
        assert {k for k, v in rps.items() if v > 0} >= {("v4-main", "v4"), ("v4-sglang", "v4"), ("v4-tgi", "v4")}
        log = wait_for(
            "the predictor reading KV usage from the engine rules",
            lambda: (t := (tmp_path / "predictor.log").read_text()) and names(WINDOW)["kv_usage_max"] in t and t,
            60,
            logs,
        )
        assert KV_CACHE_USAGE_RATIO not in log, "the predictor never reads the exporter's KV series"

        # 5. the dashboards built from this fleet file: every panel that reads an engine rule has data
        settings = DashboardSettings.from_fleet(load_config(fleet))
        checked = 0
        for name in DASHBOARDS:
            for _, target in panel_targets(json.loads(render(name, settings))):
                expr = target["expr"]
                if ":engine_" not in expr or " offset " in expr:
                    continue  # (the forecast error panel compares with forecasts made 5 minutes ago)
                assert query(prom.url, substitute(expr)), f"{name}: no data for {expr}"
                checked += 1
        assert checked >= 8
    finally:
        for p in procs:
            stop(p)
        if prom is not None:
            prom.close()
        for e in engines.values():
            e.close()
