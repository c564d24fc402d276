"""Engine-native scraping (issue 23 item 2): the fleet file's `pools.<pool>.engines`, the PodMonitors (checked against
the Prometheus Operator's CRD schemas, as `infercast k8s validate` checks), the plain scrape configs and the recording
rules on the engines' own metrics (promtool).  The rules' values on a real Prometheus:
tests/test_quickstart_prometheus.py."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import infercast.catalog as catalog
from infercast.alertrules.engines import RATE_WINDOW, engine_rule_file, engine_rules, names, pool_max_batch
from infercast.alertrules.generate import generated_files
from infercast.config import ConfigError, load_config, parse_config
from infercast.tools.k8s.build import BASE, ENGINES_DIR, base_files
from infercast.tools.k8s.scrape import ENGINE_PORTS, meta_label, pod_monitors, prometheus_config, scrape_configs
from infercast.tools.k8s.validate import NO_KUBECTL, kubectl, render, validate_objects
from tests.conftest import REPO

QUICKSTART = REPO / "examples" / "quickstart-prometheus.yaml"


def quickstart() -> dict:
    return yaml.safe_load(QUICKSTART.read_text())


def test_engines_default_and_refuse_unknown_keys() -> None:
    cfg = load_config(QUICKSTART)
    assert cfg.pools["v4-main"].engines.kind == "vllm"
    assert cfg.pools["v4-main"].engines.pod_labels is None
    assert cfg.pools["v4-sglang"].engines.max_batch == 256
    doc = quickstart()
    doc["pools"]["trt"]["engines"]["selector"] = {"app": "x"}
    with pytest.raises(ConfigError, match=r"pools.trt.engines.selector: unknown key"):
        parse_config(doc)
    doc = quickstart()
    doc["pools"]["trt"]["engines"]["kind"] = "ollama"
    with pytest.raises(ConfigError, match=r"pools.trt.engines.kind"):
        parse_config(doc)


def test_max_batch_comes_from_the_pool_then_a_target_then_the_batcher() -> None:
    doc = quickstart()
    doc["targets"][0]["max_batch"] = 300  # vllm-v4-0, in v4-main
    cfg = parse_config(doc)
    assert pool_max_batch(cfg, "v4-sglang") == 256  # engines.max_batch
    assert pool_max_batch(cfg, "v4-main") == 300  # the target's
    assert pool_max_batch(cfg, "v3.5-fallback") == 128  # v3.5's batcher


def test_rule_names_are_the_catalogs_and_follow_the_convention() -> None:
    n = names()
    assert set(n.values()) == {v for k, v in vars(catalog).items() if k.startswith("REC_ENGINE_")}
    for name in n.values():
        level, metric, ops = name.split(":")
        assert level and metric.startswith("engine_") and ops
    assert names("15s")["requests_pool_rate"] == "pool_version:engine_requests:rate15s"
    assert RATE_WINDOW == "5m" and n["requests_pool_rate"].endswith(":rate5m")
    with pytest.raises(ValueError, match="rate window"):
        names("5 minutes")


def test_rules_read_only_scraped_series_and_keep_the_engines_labels() -> None:
    rules = engine_rules(load_config(QUICKSTART))[0]["rules"]
    recorded = [r["record"] for r in rules]
    # one rule per name and label set (promtool's lint refuses duplicates)
    assert len([r for r in recorded if r != names()["max_batch"]]) == len(set(recorded)) - 1
    instance = [r["expr"] for r in rules if r["record"].startswith("instance:")]
    for expr in instance:
        assert expr.count('pool!=""') >= 4, expr  # every engine's selector
        assert "by (" not in expr  # no aggregation at the instance level: the engines' labels stay
    assert "honor" not in yaml.safe_dump(rules)
    triton = next(r["expr"] for r in rules if r["record"] == names()["kv_usage"])
    assert 'model=~"chat\\\\-v3\\\\.5|chat\\\\-v4"' in triton  # the fleet's models only, escaped for PromQL


def test_promtool_accepts_the_committed_and_a_custom_rule_file(tmp_path: Path) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: prometheus)")
    custom = tmp_path / "engines.yml"
    custom.write_text(yaml.safe_dump(engine_rule_file(load_config(QUICKSTART), "30s"), width=1000))
    for path in (REPO / "alertrules" / "rules" / "engines" / "engines.yml", custom):
        res = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr


def test_committed_rule_file_is_generated() -> None:
    files = generated_files()
    path = "alertrules/rules/engines/engines.yml"
    assert (REPO / path).read_text() == files[path]


def test_pod_monitors_map_pods_to_pool_and_version() -> None:
    cfg = load_config(QUICKSTART)
    pms = {pm["metadata"]["name"]: pm for pm in pod_monitors(cfg, "inference", "kube-prometheus-stack")}
    assert set(pms) == {
        f"infercast-engines-{p}" for p in ("v4-main", "v3-5-fallback", "v4-sglang", "v4-tgi", "trt")
    } | {"infercast-dcgm-exporter"}
    main = pms["infercast-engines-v4-main"]
    assert main["metadata"]["namespace"] == "inference"
    assert main["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert main["spec"]["selector"] == {"matchLabels": {"infercast.io/pool": "v4-main"}}
    ep = main["spec"]["podMetricsEndpoints"][0]
    assert ep["portNumber"] == ENGINE_PORTS["vllm"] and ep["path"] == "/metrics"
    assert "honorLabels" not in ep and "metricRelabelings" not in ep
    assert ep["relabelings"] == [
        {"targetLabel": "pool", "replacement": "v4-main"},
        {"targetLabel": "version", "replacement": "v4"},
        {
            "sourceLabels": ["__meta_kubernetes_pod_label_infercast_io_version"],
            "regex": "(.+)",
            "targetLabel": "version",
        },
    ]
    assert pms["infercast-engines-v4-sglang"]["spec"]["podMetricsEndpoints"][0]["portNumber"] == 30000
    trt = pms["infercast-engines-trt"]["spec"]["podMetricsEndpoints"][0]
    assert trt["portNumber"] == 8002
    assert {(r["regex"], r["replacement"]) for r in trt["metricRelabelings"]} == {
        ("chat\\-v4", "v4"),
        ("chat\\-v3\\.5", "v3.5"),
    }
    dcgm = pms["infercast-dcgm-exporter"]
    assert dcgm["metadata"]["namespace"] == "gpu-operator"
    assert dcgm["spec"]["podMetricsEndpoints"][0]["honorLabels"] is True
    assert meta_label("app.kubernetes.io/name") == "__meta_kubernetes_pod_label_app_kubernetes_io_name"


def test_pod_labels_and_a_named_port_from_the_fleet_file() -> None:
    doc = quickstart()
    doc["pools"]["v4-main"]["engines"] = {"pod_labels": {"app": "vllm", "model": "chat-v4"}, "port": "http"}
    pm = pod_monitors(parse_config(doc), "llm", "prom")[0]
    assert pm["spec"]["selector"]["matchLabels"] == {"app": "vllm", "model": "chat-v4"}
    ep = pm["spec"]["podMetricsEndpoints"][0]
    assert ep["port"] == "http" and "portNumber" not in ep
    doc["pools"]["v4-main"]["engines"] = {"pod_labels": {"app": "not a label value!"}}
    with pytest.raises(ConfigError, match="pod_labels"):
        pod_monitors(parse_config(doc), "llm", "prom")


def test_pod_monitors_are_valid_against_the_operator_crd_and_errors_are_caught() -> None:
    objs = pod_monitors(load_config(QUICKSTART), "inference", "kube-prometheus-stack")
    report = validate_objects(objs, "podmonitors", crds={})
    assert not report.errors, report.errors
    assert len(report.checked) == len(objs) and all("operator" in c for c in report.checked)
    bad = pod_monitors(load_config(QUICKSTART), "inference", "x")[0]
    bad["spec"]["podMetricsEndpoints"][0]["relabelings"][0]["replacment"] = "typo"
    bad["spec"]["podMetricsEndpoints"][0]["interval"] = "15 s"
    errors = "\n".join(validate_objects([bad], "bad", crds={}).errors)
    assert "replacment" in errors and "interval" in errors


def test_the_engines_component_is_generated_and_renders_in_an_overlay() -> None:
    files = base_files()
    comp = yaml.safe_load(files[f"{ENGINES_DIR}/kustomization.yaml"])
    assert comp["kind"] == "Component" and comp["resources"] == ["podmonitors.yaml", "prometheusrule.yaml"]
    assert not any(r.startswith(ENGINES_DIR) for r in yaml.safe_load(files["kustomization.yaml"])["resources"])
    rule = yaml.safe_load(files[f"{ENGINES_DIR}/prometheusrule.yaml"].split("\n", 2)[2])
    assert rule["spec"] == engine_rule_file(load_config(REPO / "examples" / "flash-sale.yaml"))
    for name, text in files.items():
        if name.startswith(ENGINES_DIR):
            assert (BASE / name).read_text() == text, f"{name} is stale: run infercast k8s build"
    if kubectl() is None:
        pytest.skip(NO_KUBECTL)
    overlay = BASE.parent / "_test_engines_overlay"
    overlay.mkdir()
    try:
        (overlay / "kustomization.yaml").write_text(
            yaml.safe_dump({"resources": ["../base"], "components": ["../base/engines"]})
        )
        objs = render(overlay)
    finally:
        shutil.rmtree(overlay)
    report = validate_objects(objs, "overlay+engines")
    assert not report.errors and not report.unchecked, report.errors + report.unchecked
    kinds = [o["kind"] for o in objs]
    assert kinds.count("PodMonitor") == 4 and kinds.count("PrometheusRule") == 2


def test_plain_scrape_configs_label_targets_with_pool_and_version() -> None:
    cfg = load_config(QUICKSTART)
    jobs = {j["job_name"]: j for j in scrape_configs(cfg)}
    assert set(jobs) == {
        "vllm-v4-main",
        "vllm-v3-5-fallback",
        "sglang-v4-sglang",
        "tgi-v4-tgi",
        "trtllm-trt",
        "dcgm-exporter",
    }
    v35 = jobs["vllm-v3-5-fallback"]
    assert v35["static_configs"] == [
        {"targets": ["10.0.0.21:8000"], "labels": {"pool": "v3.5-fallback", "version": "v3.5"}}
    ]
    assert v35["metrics_path"] == "/metrics" and v35["scheme"] == "http"
    assert not any("honor_labels" in j for n, j in jobs.items() if n != "dcgm-exporter")
    assert jobs["dcgm-exporter"]["honor_labels"] is True and "labels" not in jobs["dcgm-exporter"]["static_configs"][0]
    assert "metric_relabel_configs" in jobs["trtllm-trt"]
    whole = prometheus_config(cfg, interval="30s")
    assert whole["rule_files"] == ["engines.yml"] and whole["global"]["scrape_interval"] == "30s"


def test_a_target_without_pool_takes_its_versions_first_pool_and_one_without_either_is_refused() -> None:
    doc = quickstart()
    doc["targets"] = [{"name": "a", "kind": "vllm", "url": "https://h:9/m", "version": "v3.5"}]
    (job,) = scrape_configs(parse_config(doc))
    assert job["static_configs"][0]["labels"] == {"pool": "v3.5-fallback", "version": "v3.5"}
    assert (job["scheme"], job["metrics_path"]) == ("https", "/m")
    doc["targets"] = [{"name": "b", "kind": "sglang", "url": "http://h:30000/metrics"}]
    with pytest.raises(ConfigError, match=r"targets.0 \(b\): an engine target needs a pool or a version"):
        scrape_configs(parse_config(doc))


def test_the_cli_writes_a_config_promtool_accepts(tmp_path: Path) -> None:
    from infercast.tools.cli import main

    assert main(["k8s", "prometheus", f"--fleet={QUICKSTART}", f"--out={tmp_path}"]) == 0
    cfg = yaml.safe_load((tmp_path / "prometheus.yml").read_text())
    assert cfg["scrape_configs"] == scrape_configs(load_config(QUICKSTART))
    assert main(["k8s", "prometheus", f"--fleet={QUICKSTART}", f"--out={tmp_path}", "--rate-window=5 m"]) == 2
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed (Debian: prometheus)")
    res = subprocess.run(
        [promtool, "check", "config", str(tmp_path / "prometheus.yml")], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr
