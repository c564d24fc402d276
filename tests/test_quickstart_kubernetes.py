"""docs/quickstart-kubernetes.md, played as its user.  The fleet file and the overlay are read out of the page
itself (so the page and the test cannot drift), and every `infercast` command the page shows is parsed by the CLI.

No Kubernetes cluster and no Prometheus Operator run here, so the test plays the cluster's part:
- `infercast k8s build --fleet` on the page's fleet file, the page's overlay rendered by `kubectl kustomize`, and
  every object validated against Kubernetes' OpenAPI schemas and the CRD schemas (`infercast.tools.k8s.validate`);
- the engines are the captured vLLM payloads of tests/data/engines served on loopback (tests/alerting/
  fake_engines.py), each PodMonitor translated into a static scrape job that gives Prometheus the pod labels the
  Operator's service discovery would (`__meta_kubernetes_pod_label_*`) and runs the PodMonitor's own relabelings;
- a real Prometheus (Debian's) loads both generated PrometheusRules' groups as rule files, and scrapes the engines,
  the fleet exporter (`infercast exporter` on the page's fleet file, its targets pointed at the loopback engines) and
  the predictor (`infercast predictor`);
- the actuator (`infercast actuator --once`, advisory, the gateway backend) reads Prometheus and a loopback
  Kubernetes API answering with recorded objects (the user's HTTPRoute, HPA and Deployment: tests/data/k8s); what
  it proposes is then carried out against a recorded-request fake the way active mode would, and the objects it
  would leave behind are validated against the Gateway API's and Kubernetes' schemas.

Departures from the page, for time: scrapes and rule evaluations every 1 s (the page: 15 s), the predictor on a
1 s grid forecasting every second from 8 points (the page: the fleet file's 15 s defaults); rates over the
generated 5-minute window are extrapolated from the few seconds the test has, so only the gauges are compared
with exact values.
"""

from __future__ import annotations

import copy
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from infercast.actuators.actions import ScalePool, SetPoolWeight, parse_action
from infercast.actuators.admin import ActionRefused
from infercast.alertrules.engines import names
from infercast.alertrules.rules import KV_USAGE_MAX
from infercast.catalog import (
    FORECAST_KV_CACHE_USAGE_RATIO,
    KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    KV_CACHE_USAGE_RATIO,
    REQUESTS_RUNNING,
)
from infercast.config import GatewayBackend, load_config, parse_config
from infercast.servers import free_port, start_prometheus
from infercast.tools.cli import build_parser
from infercast.tools.k8s.scrape import meta_label
from infercast.tools.k8s.validate import kubectl, render, validate_objects
from tests.actuators.kube_replay import merged, recorded
from tests.alerting.fake_engines import FakeEngine
from tests.conftest import REPO

PAGE = REPO / "docs" / "quickstart-kubernetes.md"
CLI = [sys.executable, "-m", "infercast.tools.cli"]
#: pool -> the payload its engine pods serve here, and the labels those pods carry (the page's pod_labels)
ENGINES = {"v4-main": "vllm.prom", "v3.5-fallback": "vllm-chat-v3.5.prom"}
#: the fixtures' gauges: vllm:kv_cache_usage_perc per engine, vllm:num_requests_running per engine
KV = {("v4-main", "v4"): [0.9312, 0.9688], ("v3.5-fallback", "v3.5"): [0.5214]}
RUNNING = {("v4-main", "v4"): [128, 134], ("v3.5-fallback", "v3.5"): [84]}


# --- what the page says ----------------------------------------------------------------------------------------
def page_block(marker: str) -> str:
    """The fenced block right after `<!-- test: MARKER -->` in the page."""
    text = PAGE.read_text()
    m = re.search(rf"<!-- test: {re.escape(marker)} -->\s*```[a-z]*\n(.*?)```", text, re.S)
    assert m, f"{PAGE.name} has no block marked <!-- test: {marker} -->"
    return m.group(1)


#: the page's one-line switch (beside its fleet file) to the recording rules on the engines' own metrics
ENGINES_MODE = "metrics: {source: engines}\n"


def page_fleet_text(source: str = "exporter") -> str:
    """The page's fleet file; with `source="engines"`, with the page's engines-mode line added."""
    text = page_block("fleet")
    return text + ENGINES_MODE if source == "engines" else text


def page_fleet(source: str = "exporter") -> dict[str, Any]:
    return yaml.safe_load(page_fleet_text(source))


def page_commands() -> list[list[str]]:
    """Every `infercast ...` command line in the page's shell blocks (comments and continuations joined)."""
    out = []
    for block in re.findall(r"```sh\n(.*?)```", PAGE.read_text(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("#", 1)[0].strip()
            if line.startswith("infercast "):
                out.append(shlex.split(line)[1:])
    return out


def test_every_infercast_command_on_the_page_exists_with_its_options() -> None:
    commands = page_commands()
    assert {c[0] for c in commands} >= {"check", "k8s", "train"}, commands
    for argv in commands:
        try:
            build_parser(argv).parse_args(argv)
        except SystemExit:
            pytest.fail(f"the page shows `infercast {shlex.join(argv)}`, which the CLI refuses", pytrace=False)


def test_the_pages_fleet_file_passes_infercast_check(tmp_path: Path) -> None:
    fleet = tmp_path / "my-fleet.yaml"
    fleet.write_text(page_block("fleet"))
    res = subprocess.run(
        [*CLI, "check", f"--config={fleet}"], capture_output=True, text=True, timeout=120, cwd=REPO, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
    cfg = load_config(fleet)
    assert cfg.actuator.mode == "advisory", "the page's actuator starts advisory"
    assert isinstance(cfg.actuator.backend, GatewayBackend) and cfg.actuator.backend.httproute is not None


# --- k8s build --fleet, rendered and validated ------------------------------------------------------------------
def build(tmp_path: Path, source: str = "exporter") -> Path:
    """`infercast k8s build --fleet my-fleet.yaml --out my-infercast/base` and the page's overlay beside it."""
    fleet = tmp_path / "my-fleet.yaml"
    fleet.write_text(page_fleet_text(source))
    top = tmp_path / "my-infercast"
    res = subprocess.run(
        [*CLI, "k8s", "build", f"--fleet={fleet}", f"--out={top / 'base'}"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    (top / "overlay").mkdir()
    # the page's overlay, with the patch of step 6 (the trained model mounted into the predictor)
    overlay = yaml.safe_load(page_block("overlay")) | yaml.safe_load(page_block("overlay-model"))
    (top / "overlay" / "kustomization.yaml").write_text(yaml.safe_dump(overlay, sort_keys=False))
    return top


def objects(top: Path) -> list[dict[str, Any]]:
    """The overlay's objects as `kubectl kustomize` renders them; without kubectl, the base's and the engines
    Component's generated objects as written (no overlay patch, no ConfigMap generator: the fleet ConfigMap and the
    model mount are then not checked, and the test says so by the absence of the model volume)."""
    if kubectl() is not None:
        return render(top / "overlay")
    docs = []
    for f in sorted((top / "base").rglob("*.yaml")):
        if f.name not in ("kustomization.yaml", "fleet.yaml") and f.parent.name != "keda":
            docs += [d for d in yaml.safe_load_all(f.read_text()) if d]
    return docs


def test_k8s_build_with_the_pages_fleet_renders_and_every_object_validates(tmp_path: Path) -> None:
    objs = objects(build(tmp_path))
    report = validate_objects(objs, "quickstart overlay")
    assert report.errors == [] and report.unchecked == [], report.errors + report.unchecked
    assert len(report.checked) == len(objs), "every object is checked against a schema"
    if kubectl() is not None:  # the overlay's patch of step 6 applied by Kustomize
        pred = next(o for o in objs if o["kind"] == "StatefulSet" and o["metadata"]["name"] == "infercast-predictor")
        assert {"name": "model", "configMap": {"name": "infercast-model"}} in pred["spec"]["template"]["spec"][
            "volumes"
        ]
    kinds = {o["kind"] for o in objs}
    assert {"PodMonitor", "PrometheusRule", "ServiceMonitor", "StatefulSet", "ConfigMap", "Role"} <= kinds

    fleet = page_fleet()
    by = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    # the engines are found by the pod labels the page gives, in the engines' namespace
    for pool, p in fleet["pools"].items():
        pm = by[("PodMonitor", f"infercast-engines-{re.sub(r'[^a-z0-9-]', '-', pool)}")]
        assert pm["spec"]["selector"]["matchLabels"] == p["engines"]["pod_labels"]
        assert pm["metadata"]["namespace"] == "inference"
    # the fleet file's thresholds are what the alerts compare with and what the dashboards draw
    t = fleet["thresholds"]
    alerts = {
        r["alert"]: r["expr"]
        for g in by[("PrometheusRule", "infercast")]["spec"]["groups"]
        for r in g["rules"]
        if "alert" in r
    }
    assert alerts["InfercastKVCacheForecastBreach"].endswith(f"> {t['kv_forecast_trigger']:g}")
    assert alerts["InfercastKVCacheUsageHigh"].endswith(f"> {t['memory_breaker']:g}")
    overview = json.loads(by[("ConfigMap", "infercast-dashboard-fleet-overview")]["data"]["fleet-overview.json"])
    steps = [s.get("value") for p in overview["panels"] for s in _steps(p)]
    assert t["memory_breaker"] in steps and t["kv_forecast_trigger"] in steps, "the dashboards' bands"
    # the advisory actuator may get and patch only the route and the autoscaler the fleet file names
    role = by[("Role", "infercast-actuator-gateway")]
    backend = fleet["actuator"]["backend"]
    names_in_role = {n for r in role["rules"] for n in r.get("resourceNames", [])}
    assert names_in_role == {backend["httproute"]["name"], *(a["name"] for a in backend["autoscalers"].values())}
    # its audit trail on a volume of its own per replica, which outlives the pod
    act = by[("StatefulSet", "infercast-actuator")]
    (claim,) = act["spec"]["volumeClaimTemplates"]
    assert claim["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert claim["spec"]["resources"]["requests"]["storage"] == "1Gi"
    mounts = act["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": claim["metadata"]["name"], "mountPath": "/var/lib/infercast"} in mounts
    assert not any("emptyDir" in v for v in act["spec"]["template"]["spec"]["volumes"] if v["name"] == "audit")


def _steps(panel: dict[str, Any]) -> list[dict[str, Any]]:
    return (((panel.get("fieldConfig") or {}).get("defaults") or {}).get("thresholds") or {}).get("steps") or []


# --- the fleet on a real Prometheus --------------------------------------------------------------------------------
def static_job(pm: dict[str, Any], address: str, pod: dict[str, str], interval: str) -> dict[str, Any]:
    """A PodMonitor as a static scrape job, for a pod at `address` with labels `pod` (name, labels): what the
    Operator's Kubernetes service discovery would hand Prometheus, then the selector as keep rules, the
    `namespace`/`pod` target labels the Operator adds, and the PodMonitor's own relabelings, verbatim."""
    (ep,) = pm["spec"]["podMetricsEndpoints"]
    ns = pm["metadata"]["namespace"]
    meta = {meta_label(k): v for k, v in pod["labels"].items()}
    meta |= {"__meta_kubernetes_namespace": ns, "__meta_kubernetes_pod_name": pod["name"]}
    relabel: list[dict[str, Any]] = [
        {"source_labels": [meta_label(k)], "regex": re.escape(v), "action": "keep"}
        for k, v in pm["spec"]["selector"]["matchLabels"].items()
    ]
    relabel += [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    ]
    relabel += [_snake(r) for r in ep.get("relabelings", [])]
    job = {
        "job_name": f"podMonitor/{ns}/{pm['metadata']['name']}/0",
        "scrape_interval": interval,
        "metrics_path": ep["path"],
        "honor_labels": bool(ep.get("honorLabels", False)),
        "static_configs": [{"targets": [address], "labels": meta}],
        "relabel_configs": relabel,
    }
    if ep.get("metricRelabelings"):
        job["metric_relabel_configs"] = [_snake(r) for r in ep["metricRelabelings"]]
    return job


def _snake(r: dict[str, Any]) -> dict[str, Any]:
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {keys.get(k, k): v for k, v in r.items()}


class FakeKube:
    """A loopback Kubernetes API holding the user's objects by path (recorded shapes, tests/data/k8s).  Read-only,
    it refuses every write (an advisory actuator must only read); `writable`, it applies a PATCH as the API server
    applies a JSON merge patch and answers the object it leaves."""

    def __init__(self, objects: dict[str, dict[str, Any]], writable: bool = False) -> None:
        self.objects = copy.deepcopy(objects)
        self.seen: list[tuple[str, str]] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a: object) -> None:
                pass

            def _any(self) -> None:
                path = self.path.partition("?")[0]
                outer.seen.append((self.command, path))
                n = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(n)) if n else None
                obj = outer.objects.get(path)
                if obj is not None and self.command == "PATCH" and writable:
                    obj = outer.objects[path] = merged(obj, body)
                    obj["metadata"]["resourceVersion"] = str(int(obj["metadata"]["resourceVersion"]) + 1)
                elif self.command != "GET":
                    obj = None
                status = 200 if obj is not None else 404 if self.command == "GET" else 405
                data = json.dumps(obj if obj is not None else {"kind": "Status", "code": status}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def users_cluster(backend: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The user's objects, by API path: the HTTPRoute splitting traffic 900/100 over the pools' Services, the
    v4 pool's HPA and its Deployment (the recorded shapes, renamed and re-weighted to the page's fleet)."""
    ns = backend["namespace"]
    route = recorded("httproute-chat.json")
    route["metadata"] |= {"name": backend["httproute"]["name"], "namespace": ns}
    services = backend["httproute"]["backends"]
    weights = {services["v4-main"]: 900, services["v3.5-fallback"]: 100}
    rule = route["spec"]["rules"][0]
    rule["backendRefs"] = [
        {"group": "", "kind": "Service", "name": n, "port": 8000, "weight": w} for n, w in weights.items()
    ]
    route["spec"]["rules"] = [rule]
    hpa = recorded("hpa-chat-v4.json")
    hpa_name = backend["autoscalers"]["v4-main"]["name"]
    hpa["metadata"] |= {"name": hpa_name, "namespace": ns}
    dep = recorded("deployment-chat-v4.json")
    dep["metadata"] |= {"name": hpa["spec"]["scaleTargetRef"]["name"], "namespace": ns}
    return {
        f"/apis/gateway.networking.k8s.io/v1/namespaces/{ns}/httproutes/{route['metadata']['name']}": route,
        f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/{hpa_name}": hpa,
        f"/apis/apps/v1/namespaces/{ns}/deployments/{dep['metadata']['name']}": dep,
    }


def query(url: str, expr: str) -> list[dict[str, Any]]:
    r = requests.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10)
    r.raise_for_status()
    return r.json()["data"]["result"]


def keyed(result: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    return {(s["metric"].get("pool", ""), s["metric"].get("version", "")): float(s["value"][1]) for s in result}


def wait_for(what: str, check, timeout: float, logs) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(1)
    pytest.fail(f"{what} within {timeout:.0f} s; logs: {logs()}", pytrace=False)


def spawn(argv: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    out = open(log, "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen(
        argv, cwd=REPO, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **(env or {})}
    )


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        p.terminate()
        try:
            p.wait(timeout=15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=5)


@pytest.fixture
def engines() -> Iterator[dict[str, FakeEngine]]:
    running = {pool: FakeEngine(payload) for pool, payload in ENGINES.items()}
    yield running
    for e in running.values():
        e.close()


def the_users_fleet(
    tmp_path: Path, engines: dict[str, FakeEngine], kube_url: str, source: str = "exporter"
) -> tuple[dict[str, Any], Path]:
    """The page's fleet file as run here: the targets' URLs are the loopback engines', the actuator reaches the
    loopback API with a token (in the cluster: its service account) and keeps its audit in tmp_path, and the
    predictor works on a 1 s grid."""
    doc = page_fleet(source)
    for t in doc["targets"]:
        t["url"] = f"http://{engines[t['pool']].address}/metrics"
    doc["predictor"] = {
        **doc.get("predictor", {}),
        "step_seconds": 1.0,
        "history_seconds": 600.0,
        "forecast_interval_seconds": 1.0,
        "min_history_points": 8,
    }
    backend = doc["actuator"]["backend"]
    backend |= {"api_url": kube_url, "token_env": "QUICKSTART_K8S_TOKEN"}
    doc["actuator"] |= {"audit_db": str(tmp_path / "audit.db"), "listen": "127.0.0.1:0"}
    path = tmp_path / "my-fleet.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return doc, path


@pytest.mark.servers
@pytest.mark.parametrize("source", ["exporter", "engines"])
def test_the_quickstart_end_to_end_prometheus_forecasts_and_an_advisory_actuator(
    tmp_path: Path, engines: dict[str, FakeEngine], source: str
) -> None:
    # `engines`: the page's fleet file with its engines-mode line: the alerts, the predictor and the actuator read
    # the recording rules on the engines' own metrics (through the PodMonitors), the exporter runs reduced
    objs = objects(build(tmp_path, source))
    doc0 = page_fleet(source)
    cluster = users_cluster(doc0["actuator"]["backend"])
    kube = FakeKube(cluster)
    doc, fleet = the_users_fleet(tmp_path, engines, kube.url, source)
    procs: list[subprocess.Popen] = []
    prom = None

    def logs() -> dict[str, str]:
        return {p.name: p.read_text(errors="replace")[-1200:] for p in tmp_path.glob("*.log")}

    try:
        exporter_port, predictor_port = free_port(), free_port()
        procs.append(
            spawn(
                [*CLI, "exporter", f"--config={fleet}", f"--listen=127.0.0.1:{exporter_port}", "--no-nvml"],
                tmp_path / "exporter.log",
            )
        )
        # the PodMonitors' selection as static jobs: one pod per pool, labelled as the page says
        jobs = []
        for pm in (o for o in objs if o["kind"] == "PodMonitor"):
            pool = next((p for p in doc["pools"] if pm["metadata"]["name"].endswith(p.replace(".", "-"))), None)
            if pool is None:
                continue  # dcgm-exporter: no GPU here
            pod = {"name": f"vllm-{pool}-0", "labels": doc["pools"][pool]["engines"]["pod_labels"]}
            jobs.append(static_job(pm, engines[pool].address, pod, "1s"))
        # the ServiceMonitor's jobs (honorLabels: the exporter's own labels win), as under kube-prometheus-stack
        for job, port in (("infercast-exporter", exporter_port), ("infercast-predictor", predictor_port)):
            jobs.append({"job_name": job, "honor_labels": True, "static_configs": [{"targets": [f"127.0.0.1:{port}"]}]})
        rules = {
            f"{o['metadata']['name']}.yml": yaml.safe_dump({"groups": o["spec"]["groups"]}, sort_keys=False)
            for o in objs
            if o["kind"] == "PrometheusRule"
        }
        assert set(rules) == {"infercast.yml", "infercast-engines.yml"}
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": sorted(rules),
            "scrape_configs": jobs,
        }
        prom = start_prometheus(yaml.safe_dump(config, sort_keys=False), rule_files=rules, workdir=tmp_path / "prom")

        # 1. the engine rules, from the engines' own metrics through the PodMonitors' labels
        n = names("5m")
        want_max = {k: max(v) for k, v in KV.items()}
        got = wait_for(
            "the engine rules recorded every pool's fullest engine",
            lambda: (g := keyed(query(prom.url, n["kv_usage_max"]))) and set(g) == set(want_max) and g,
            60,
            logs,
        )
        assert got == pytest.approx(want_max), "pool_version:engine_kv_cache_usage:max = the fuller engine"
        avg = keyed(query(prom.url, n["kv_usage_avg"]))
        assert avg == pytest.approx({k: sum(v) / len(v) for k, v in KV.items()})
        max_batch = {("v4-main", "v4"): 256, ("v3.5-fallback", "v3.5"): 128}
        sat = keyed(query(prom.url, n["batch_saturation_max"]))
        assert sat == pytest.approx({k: max(v) / max_batch[k] for k, v in RUNNING.items()})
        inst = query(prom.url, n["kv_usage"])
        assert {s["metric"]["pod"] for s in inst} == {"vllm-v4-main-0", "vllm-v3.5-fallback-0"}
        assert sorted(s["metric"].get("engine", "") for s in inst if s["metric"]["pool"] == "v4-main") == ["0", "1"]
        if source == "exporter":  # the exporter's rules, which the alerts and the predictor read
            wait_for(
                "the exporter's KV rule recorded both pools",
                lambda: set(keyed(query(prom.url, KV_USAGE_MAX))) == set(want_max),
                60,
                logs,
            )
        else:  # nothing reads the exporter's copy, and it sends none: the engines' rules above are the figures
            wait_for(
                "the reduced exporter scraped",
                lambda: [s for s in query(prom.url, 'up{job="infercast-exporter"}') if s["value"][1] == "1"],
                60,
                logs,
            )
            time.sleep(2)  # a scrape of its page, not only the up series
            assert query(prom.url, KV_CACHE_USAGE_RATIO) == [], "the reduced exporter does not re-emit KV usage"
            assert query(prom.url, KV_USAGE_MAX) == [], "no rule records the exporter-path KV figure"
            assert query(prom.url, REQUESTS_RUNNING) == [], "nor running requests: the engine rule below has them"
            running = keyed(query(prom.url, f"sum by (pool, version) ({n['requests_running']})"))
            assert running == pytest.approx({k: sum(v) for k, v in RUNNING.items()})
            assert query(prom.url, f'{{job="infercast-exporter",__name__=~"{KV_BLOCK_ALLOCATION_FAILURES_TOTAL}"}}'), (
                "the exporter still sends what the engines do not give (block-allocation failures)"
            )

        # 2. the predictor's forecasts, read back through Prometheus
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
        upper = f'{FORECAST_KV_CACHE_USAGE_RATIO}{{band="upper",aggregate="max"}}'
        fc = wait_for(
            "the predictor's KV forecasts in Prometheus for both pools",
            lambda: (g := keyed(query(prom.url, upper))) and len(g) == 2 and g,
            120,
            logs,
        )
        assert fc[("v4-main", "v4")] > doc["thresholds"]["kv_forecast_trigger"], "v4 is forecast over the trigger"

        # 3. the advisory actuator: one tick on Prometheus and the user's objects
        # (in the cluster the built fleet file points it at prometheus-operated; here at the loopback one)
        doc["actuator"]["prometheus_url"] = prom.url
        fleet.write_text(yaml.safe_dump(doc, sort_keys=False))
        time.sleep(3)  # the newest forecasts scraped (the actuator refuses stale inputs)
        res = subprocess.run(
            [*CLI, "actuator", f"--config={fleet}", "--once"],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=REPO,
            env={**os.environ, "QUICKSTART_K8S_TOKEN": "sa-token"},
            check=False,
        )
        assert res.returncode == 0, res.stderr
        report = json.loads(res.stdout)
        assert not report.get("frozen"), report
        proposed = [a for a in report["actions"] if a["outcome"] == "advisory"]
        assert all(m == "GET" for m, _ in kube.seen), f"an advisory actuator only reads the cluster: {kube.seen}"
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for a in proposed:
            by_kind.setdefault(a["action"]["kind"], []).append(a["action"])
        # v4's fullest engine is at 0.97, forecast over the 0.8 trigger; v3.5's at 0.52: weight moves to v3.5 and
        # v4's floor goes up
        weights = {a["pool"]: a["weight"] for a in by_kind.get("set_pool_weight", [])}
        assert set(weights) == {"v4-main", "v3.5-fallback"}, f"a weight shift proposed: {report['actions']}"
        assert weights["v3.5-fallback"] > 0.1 and sum(weights.values()) == pytest.approx(1.0)
        floors = [a for a in by_kind.get("scale_pool", []) if a["pool"] == "v4-main"]
        assert len(floors) == 1, f"v4-main's floor raised: {report['actions']}"
        floor = floors[0]
    finally:
        for p in procs:
            stop(p)
        if prom is not None:
            prom.close()
        kube.close()

    # 4. what active mode would do with those proposals: the objects it would leave in the user's cluster
    route_path = next(p for p in cluster if "/httproutes/" in p)
    hpa_path = next(p for p in cluster if "/horizontalpodautoscalers/" in p)
    actions = [SetPoolWeight(p, w) for p, w in weights.items()] + [ScalePool("v4-main", floor["replicas"])]
    after = carry_out(doc0, cluster, actions)
    services = doc0["actuator"]["backend"]["httproute"]["backends"]
    route = after[route_path]
    got = {r["name"]: r["weight"] for r in route["spec"]["rules"][0]["backendRefs"]}
    assert got == {services[p]: round(w * 1000) for p, w in weights.items()}, "backendRef weights = weight x 1000"
    assert validated(route).startswith("Gateway API"), "the HTTPRoute an active actuator would leave"
    hpa = after[hpa_path]
    assert hpa["spec"]["minReplicas"] == floor["replicas"] > cluster[hpa_path]["spec"]["minReplicas"]
    assert hpa["spec"]["maxReplicas"] == cluster[hpa_path]["spec"]["maxReplicas"], "the ceiling is the owner's"
    assert "Kubernetes" in validated(hpa), "the HPA an active actuator would leave: only its floor moved"
    # what else it proposed (admission limits) has no object in a Gateway API cluster: the backend refuses it
    for kind, acts in by_kind.items():
        if kind not in ("set_pool_weight", "scale_pool", "prewarm_pool"):
            with pytest.raises(ActionRefused, match="needs a router backend"):
                carry_out(doc0, cluster, [parse_action(acts[0])])


def carry_out(doc: dict[str, Any], cluster: dict[str, dict[str, Any]], actions: list[Any]) -> dict[str, Any]:
    """`actions` through the page's gateway backend against a writable fake of the user's cluster: its objects
    after them (what `mode: active` would leave)."""
    from infercast.actuators.backends.gateway import GatewayAdmin

    kube = FakeKube(cluster, writable=True)
    try:
        os.environ["QUICKSTART_K8S_TOKEN"] = "sa-token"
        cfg = GatewayBackend.model_validate(
            {**doc["actuator"]["backend"], "api_url": kube.url, "token_env": "QUICKSTART_K8S_TOKEN"}
        )
        admin = GatewayAdmin.from_config(cfg, parse_config(doc))
        for a in actions:
            res = admin.apply(a)
            assert res.status == "applied", res
        assert [m for m, _ in kube.seen].count("PATCH") == len(actions)
        return kube.objects
    finally:
        os.environ.pop("QUICKSTART_K8S_TOKEN", None)
        kube.close()


def validated(obj: dict[str, Any]) -> str:
    report = validate_objects([obj], "quickstart", crds={})
    assert report.errors == [] and report.unchecked == [], report.errors + report.unchecked
    (checked,) = report.checked
    return checked.split(": ", 1)[1]


def test_the_audit_volume_size_and_class_are_build_options(tmp_path: Path) -> None:
    fleet = tmp_path / "my-fleet.yaml"
    fleet.write_text(page_block("fleet"))
    argv = [*CLI, "k8s", "build", f"--fleet={fleet}", f"--out={tmp_path / 'base'}"]
    res = subprocess.run(
        [*argv, "--audit-storage=5Gi", "--audit-storage-class=fast-ssd"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    act = next(d for d in yaml.safe_load_all((tmp_path / "base" / "actuator.yaml").read_text()) if d and
               d["kind"] == "StatefulSet")  # fmt: skip
    (claim,) = act["spec"]["volumeClaimTemplates"]
    assert claim["spec"] == {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": "5Gi"}},
        "storageClassName": "fast-ssd",
    }
    res = subprocess.run(
        [*argv, "--audit-storage=lots"], capture_output=True, text=True, timeout=300, cwd=REPO, check=False
    )
    assert res.returncode == 2 and "audit_storage must be a Kubernetes quantity such as 1Gi" in res.stderr
