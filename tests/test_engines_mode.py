"""`metrics.source: engines` (alertrules/sources.py): one fleet-file setting moves every reader of the serving figures
(alert and recording rules, dashboards) from the exporter's series to the engine recording rules, and `infercast
check` accepts the rules generated for such a fleet.  The same on a real Prometheus with the predictor and the
reduced exporter: tests/test_quickstart_prometheus.py; the alerts' behaviour: alertrules/tests/engines_mode.test.yml.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infercast.alertrules.engines import engine_rule_file
from infercast.alertrules.recorded import BATCH_SAT_AVG, KV_USAGE_AVG, KV_USAGE_MAX, REQ_RATE, REQ_SHARE
from infercast.alertrules.rules import recording_rules, rule_files
from infercast.alertrules.settings import AlertSettings
from infercast.alertrules.sources import ENGINE_GIVEN, engine_series, translate
from infercast.catalog import CATALOG, KV_CACHE_USAGE_RATIO, ROUTER_REQUESTS_TOTAL, exposed_names
from infercast.config import ConfigError, load_config, parse_config
from infercast.dashboards.build import DASHBOARDS, DashboardSettings, render
from tests.conftest import REPO

QUICKSTART = REPO / "examples" / "quickstart-prometheus.yaml"
CLI = [sys.executable, "-m", "infercast.tools.cli"]
#: the exporter's series a reader must not read in engines mode: the ones it no longer emits, and the aggregates of
#: them (the router's request counters are not emitted by the engines' Prometheus jobs either)
EXPORTER_PATH = {*ENGINE_GIVEN, KV_USAGE_AVG, KV_USAGE_MAX, BATCH_SAT_AVG, REQ_RATE, REQ_SHARE, ROUTER_REQUESTS_TOTAL}
WORD = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _words(promql: str) -> set[str]:
    return set(WORD.findall(re.sub(r'"(?:[^"\\]|\\.)*"', "", promql)))


def test_the_setting_defaults_to_the_exporter_and_refuses_anything_else() -> None:
    assert load_config(REPO / "examples" / "flash-sale.yaml").metrics.source == "exporter"
    assert load_config(QUICKSTART).metrics.source == "engines"
    doc = yaml.safe_load(QUICKSTART.read_text())
    doc["metrics"]["source"] = "engine"
    with pytest.raises(ConfigError, match=r"metrics.source"):
        parse_config(doc)
    doc["metrics"] = {"rate_window": "5 minutes"}
    with pytest.raises(ConfigError, match=r"metrics.rate_window"):
        parse_config(doc)


def test_engines_mode_rules_read_only_the_engine_rules() -> None:
    cfg = load_config(QUICKSTART)
    s = AlertSettings.from_fleet(cfg)
    recorded = {r["record"] for g in recording_rules(s) for r in g["rules"]}
    engine = {r["record"] for g in engine_rule_file(cfg)["groups"] for r in g["rules"]}
    catalog = {n for m in CATALOG for n in exposed_names(m)}
    read = set()
    for doc in rule_files(s).values():
        for g in doc["groups"]:
            for r in g["rules"]:
                read |= _words(r["expr"]) | _words(r.get("annotations", {}).get("description", ""))
    assert not read & EXPORTER_PATH, sorted(read & EXPORTER_PATH)
    # the engine rules' aggregates, each recorded by engines.yml (none of the exporter's re-recorded)
    assert set(engine_series().values()) - recorded <= engine
    assert {n for n in read if n.count(":") == 2} <= recorded | engine | catalog
    # the default keeps reading the exporter's
    assert KV_USAGE_MAX in json.dumps(rule_files(AlertSettings()))


def test_engines_mode_dashboards_read_only_the_engine_rules() -> None:
    settings = DashboardSettings.from_fleet(load_config(QUICKSTART))
    default = DashboardSettings()
    for name in DASHBOARDS:
        text = render(name, settings)
        assert not _words(text) & EXPORTER_PATH, (name, sorted(_words(text) & EXPORTER_PATH))
        if name == "fleet-overview":
            assert KV_USAGE_MAX in render(name, default), "the default dashboards are unchanged"


def test_translate_swaps_whole_names_only() -> None:
    n = engine_series()
    assert translate(f"max({KV_USAGE_MAX}) > 0.8", "engines") == f"max({n[KV_USAGE_MAX]}) > 0.8"
    for longer in (f"{KV_USAGE_MAX}_over_trigger", f"{KV_CACHE_USAGE_RATIO}_x", f"x{KV_CACHE_USAGE_RATIO}"):
        assert translate(longer, "engines") == longer
    assert translate(f"{KV_USAGE_MAX}", "exporter") == KV_USAGE_MAX
    with pytest.raises(ValueError, match=r"metrics\.source"):
        translate("x", "prometheus")


def test_infercast_check_passes_on_the_rules_generated_for_an_engines_fleet(tmp_path: Path) -> None:
    out = tmp_path / "rules"
    # --strict: the runbooks must be links a pager opens (a path is a skipped check: issue 43)
    gen = [
        sys.executable, "-m", "infercast.alertrules.generate", f"--fleet={QUICKSTART}", f"--out={out}",
        "--runbook-base-url=https://runbooks.example.org/infercast",
    ]  # fmt: skip
    res = subprocess.run(gen, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert res.returncode == 0, res.stderr
    assert KV_USAGE_MAX not in (out / "alerts.yml").read_text()
    check = [*CLI, "check", f"--config={QUICKSTART}", f"--rules={out}", "--strict"]
    res = subprocess.run(check, capture_output=True, text=True, timeout=300, cwd=REPO)
    assert res.returncode == 0, res.stdout + res.stderr
    # every infercast rule generated (alerting and recording, engines' included) compared with the fleet file
    generated = sum(
        len(g["rules"]) for f in sorted(out.glob("*.yml")) if f.name != "alertmanager.yml"
        for g in yaml.safe_load(f.read_text())["groups"]
    )  # fmt: skip
    compared = re.search(r"^ok +rules-vs-fleet .*: (\d+) rules as", res.stdout, re.M)
    assert compared and int(compared.group(1)) == generated, res.stdout
    # the shipped (exporter-mode) rules are not what this fleet file builds: check says so, and how to rebuild
    shipped = REPO / "alertrules" / "rules"
    res = subprocess.run(
        [*CLI, "check", f"--config={QUICKSTART}", f"--rules={shipped}"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert res.returncode == 1
    assert "differ from what" in res.stdout and "infercast.alertrules.generate --fleet" in res.stdout


def test_k8s_build_carries_the_mode_into_the_prometheusrule_and_dashboards(tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "examples" / "kubernetes.yaml").read_text())
    doc["metrics"] = {"source": "engines"}
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(doc))
    out = tmp_path / "base"
    res = subprocess.run(
        [*CLI, "k8s", "build", f"--fleet={fleet}", f"--out={out}"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert res.returncode == 0, res.stderr
    for name in ("prometheusrule.yaml", "dashboards.yaml"):
        text = (out / name).read_text()
        assert engine_series()[KV_USAGE_MAX] in text and KV_USAGE_MAX not in text, name
    # the exporter in the cluster reads the same fleet file: it runs reduced
    assert load_config(out / "fleet.yaml").metrics.source == "engines"


def test_the_actuators_live_figures_come_from_the_engine_rules() -> None:
    from infercast.actuators.admin import Observation, PoolState
    from infercast.actuators.inputs import StoreInputs
    from infercast.store.memory import MemoryStore

    cfg = load_config(QUICKSTART)
    n = engine_series()
    store = MemoryStore()
    now = 1_800_000_000.0
    for t in (now - 30, now - 15, now):
        for engine, kv in (("0", 0.62), ("1", 0.81)):
            store.write(n[KV_CACHE_USAGE_RATIO], {"pool": "v4-main", "version": "v4", "engine": engine}, t, kv)
        store.write(n[REQ_RATE], {"pool": "v4-main", "version": "v4"}, t, 42.0)
        store.write(KV_CACHE_USAGE_RATIO, {"pool": "v4-main", "version": "v4", "instance": "x"}, t, 0.1)  # not read
    fleet = Observation(now, (PoolState("v4-main", "v4", replicas=2, ready=2, weight=1.0),))
    got = StoreInputs(store, cfg).read(now, fleet).outlook["v4-main"]
    assert got.kv_now == 0.81  # the fullest engine
    assert (got.rps_now, got.served_rps_now) == (42.0, 42.0)
