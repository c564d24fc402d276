"""docker-compose.yml: valid against the Compose Specification's JSON schema, every mounted file present, and the
Prometheus configs it and deploy/local-stack.sh use accepted by promtool.  (No Docker engine runs here.)"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from infercast.alertrules.rules import JOBS
from infercast.tools.cli import COMMANDS

from .conftest import REPO, run

COMPOSE = REPO / "docker-compose.yml"
SCHEMA = REPO / "deploy" / "compose-spec.json"
CHECK_JSONSCHEMA = [sys.executable, "-m", "check_jsonschema"]


def _compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def test_compose_file_validates_against_the_vendored_schema():
    res = run([*CHECK_JSONSCHEMA, "--schemafile", str(SCHEMA), str(COMPOSE)])
    assert res.returncode == 0, res.stdout + res.stderr
    assert "ok -- validation done" in res.stdout


def test_the_schema_check_rejects_a_broken_compose_file(tmp_path):
    broken = _compose()
    broken["services"]["grafana"]["ports"] = 3000  # must be a list
    broken["services"]["prometheus"]["restartt"] = "always"  # unknown key
    path = tmp_path / "docker-compose.yml"
    path.write_text(yaml.safe_dump(broken))
    res = run([*CHECK_JSONSCHEMA, "--schemafile", str(SCHEMA), str(path)])
    assert res.returncode == 1, res.stdout + res.stderr
    assert "restartt" in res.stdout + res.stderr


def test_every_mounted_file_and_the_dockerfile_exist():
    doc = _compose()
    mounts = []
    for name, svc in doc["services"].items():
        for vol in svc.get("volumes", []):
            source = vol.split(":", 1)[0]
            if source.startswith("."):
                mounts.append((name, source))
        build = svc.get("build")
        if build:
            assert (REPO / build["context"] / build["dockerfile"]).is_file(), name
    assert len(mounts) >= 8
    for name, source in mounts:
        assert (REPO / source).exists(), f"service {name} mounts {source}, which is not in the repository"
    assert sorted(doc["services"]) == [
        "actuator", "alert-log", "alertmanager", "exporter", "grafana", "predictor", "prometheus",
    ]  # fmt: skip


def test_services_run_existing_commands_and_the_actuator_is_opt_in():
    for name, svc in _compose()["services"].items():
        cmd = svc.get("command") or []
        if cmd[:1] == ["infercast"]:
            assert cmd[1] in COMMANDS, name
            if cmd[1] == "actuator":
                # it needs a fleet file naming a backend (the example has none): only with --profile actuator
                assert svc["profiles"] == ["actuator"], name
            else:
                assert "profiles" not in svc, name


def test_ports_are_published_on_loopback_only():
    for name, svc in _compose()["services"].items():
        for port in svc.get("ports", []):
            assert port.startswith("127.0.0.1:"), f"{name} publishes {port} beyond this machine"


@pytest.mark.parametrize("config", ["deploy/prometheus.yml", "deploy/prometheus.local.yml"])
def test_promtool_accepts_the_prometheus_configs(promtool, config):
    res = run([promtool, "check", "config", str(REPO / config)])
    assert res.returncode == 0, res.stdout + res.stderr
    jobs = {j["job_name"] for j in yaml.safe_load((REPO / config).read_text())["scrape_configs"]}
    assert {"infercast-exporter", "infercast-predictor"} <= jobs <= {*JOBS, "prometheus"}
    if config.endswith("local.yml"):
        assert "2 rule files found" in res.stdout  # the committed rules, found relative to the config


def test_the_local_stack_for_a_demo_at_10x_loads_rules_for_10x_and_scrapes_every_simulated_step(promtool, tmp_path):
    """`deploy/local-stack.sh --no-services --time-scale 10`, the servers `infercast demo --speed 10` checks for."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("local_stack", REPO / "deploy" / "local_stack.py")
    stack = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(stack)
    (tmp_path / "prometheus.yml").write_text(stack.prometheus_config(10))
    for name, text in stack.rules(10).items():
        (tmp_path / name).write_text(text)
    res = run([promtool, "check", "config", str(tmp_path / "prometheus.yml")])
    assert res.returncode == 0 and "2 rule files found" in res.stdout, res.stdout + res.stderr
    glob = yaml.safe_load((tmp_path / "prometheus.yml").read_text())["global"]
    assert glob["scrape_interval"] == glob["evaluation_interval"] == "1500ms"  # 15 simulated seconds
    groups = yaml.safe_load((tmp_path / "alerts.yml").read_text())["groups"]
    breach = next(r for g in groups for r in g["rules"] if r["alert"] == "InfercastKVCacheForecastBreach")
    assert breach["for"] == "3s"  # 30 s at 1x


def test_local_stack_script_is_valid_bash():
    res = run(["bash", "-n", str(REPO / "deploy" / "local-stack.sh")])
    assert res.returncode == 0, res.stderr
    assert (REPO / "deploy" / "local-stack.sh").stat().st_mode & 0o111, "local-stack.sh must be executable"


def test_vendored_schema_is_the_compose_specification():
    import json

    schema = json.loads(SCHEMA.read_text())
    assert schema["title"] == "Compose Specification"
    assert (SCHEMA.parent / "compose-spec.LICENSE").read_text().lstrip().startswith("Apache License")
    assert Path(REPO / "deploy" / "alertmanager.yml").is_file()
