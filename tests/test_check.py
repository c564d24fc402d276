"""`infercast check` against real promtool and amtool, on good and bad files written to tmp_path."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from infercast.config import load_config
from infercast.tools.check import check_alertmanager, check_dashboards, check_rules
from infercast.tools.cli import main

REPO = Path(__file__).resolve().parent.parent
FLEET = REPO / "examples" / "flash-sale.yaml"
needs_promtool = pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
needs_amtool = pytest.mark.skipif(shutil.which("amtool") is None, reason="amtool not installed")

GOOD_RULES = """\
groups:
- name: kv
  rules:
  - record: pool:infercast_kv_cache_usage_ratio:max
    expr: max by (pool) (infercast_kv_cache_usage_ratio)
  - alert: KVCacheHigh
    expr: pool:infercast_kv_cache_usage_ratio:max > 0.9
    for: 1m
    labels: {severity: page}
    annotations: {summary: KV cache nearly full}
"""
BAD_RULES = """\
groups:
- name: kv
  rules:
  - alert: KVCacheHigh
    expr: max by (pool) (infercast_kv_cache_usage_ratio > 0.9
    for: 1m
"""
GOOD_AM = """\
route: {receiver: pager}
receivers: [{name: pager}]
"""
BAD_AM = """\
route: {receiver: nobody}
receivers: [{name: pager}]
"""


def _layout(tmp_path: Path, rules: dict[str, str], am: str | None, dashboards: dict[str, str]) -> dict[str, Path]:
    rules_dir = tmp_path / "alertrules" / "rules"
    rules_dir.mkdir(parents=True)
    for name, text in rules.items():
        (rules_dir / name).write_text(text)
    if am is not None:
        (tmp_path / "alertrules" / "alertmanager.yml").write_text(am)
    dash = tmp_path / "dashboards"
    dash.mkdir()
    for name, text in dashboards.items():
        (dash / name).write_text(text)
    return {"rules": rules_dir, "dashboards": dash}


def _bad_fleet(tmp_path: Path) -> Path:
    data = yaml.safe_load(FLEET.read_text())
    first = next(iter(data["pools"]))
    data["pools"][first]["nodse"] = 3
    bad = tmp_path / "bad-fleet.yaml"
    bad.write_text(yaml.safe_dump(data))
    return bad


@needs_promtool
@needs_amtool
def test_all_good_exits_zero(tmp_path, capsys):
    paths = _layout(
        tmp_path, {"kv.yml": GOOD_RULES}, GOOD_AM, {"fleet.json": json.dumps({"title": "x", "panels": [{}, {}]})}
    )
    code = main(
        ["check", "--config", str(FLEET), "--rules", str(paths["rules"]), "--dashboards", str(paths["dashboards"])]
    )
    out = capsys.readouterr().out.splitlines()
    assert code == 0
    cfg = load_config(FLEET)
    n_pools, n_versions = len(cfg.pools), len(cfg.versions)
    assert out[0].startswith("ok      config ")
    assert out[0].endswith(f"flash-sale.yaml: {n_pools} pools, {n_versions} versions, 1 target")
    assert out[1].startswith("ok      rules ") and out[1].endswith("kv.yml: 2 rules found")
    assert out[2].startswith("ok      alertmanager ") and out[2].endswith("alertmanager.yml")
    assert out[3].startswith("ok      dashboard ") and out[3].endswith("fleet.json: 2 panels")
    assert len(out) == 4


@needs_promtool
@needs_amtool
def test_bad_fleet_rules_alertmanager_and_dashboard_each_fail(tmp_path, capsys):
    paths = _layout(
        tmp_path,
        {"good.yml": GOOD_RULES, "bad.yaml": BAD_RULES},
        BAD_AM,
        {"a.json": "{not json", "b.json": json.dumps({"title": "no panels"})},
    )
    code = main(
        ["check", "--config", str(_bad_fleet(tmp_path)), "--rules", str(paths["rules"]),
         "--dashboards", str(paths["dashboards"])]
    )  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    by_status = {ln.split()[0] for ln in out}
    assert by_status == {"ok", "FAILED"}
    fleet_line = next(ln for ln in out if " config " in ln)
    assert fleet_line.startswith("FAILED  config ")
    assert fleet_line.endswith("bad-fleet.yaml: invalid fleet configuration: pools.v4-main.nodse: unknown key (typo?)")
    bad_rules = next(ln for ln in out if "bad.yaml" in ln)
    assert bad_rules.startswith("FAILED  rules ")
    assert bad_rules.endswith(
        'bad.yaml: 5:11: group "kv", rule 1, "KVCacheHigh": could not parse expression: 1:52: parse error: '
        "unclosed left parenthesis"
    )
    assert next(ln for ln in out if "good.yml" in ln).startswith("ok      rules ")
    am = next(ln for ln in out if " alertmanager " in ln)
    assert am.startswith("FAILED  alertmanager ") and 'undefined receiver "nobody"' in am
    assert next(ln for ln in out if "a.json" in ln).endswith(
        "a.json: not valid JSON: Expecting property name enclosed in double quotes at line 1"
    )
    assert next(ln for ln in out if "b.json" in ln).endswith("b.json: no 'panels' list")


def test_missing_config_file_fails(tmp_path, capsys):
    code = main(
        ["check", "--config", str(tmp_path / "nope.yaml"), "--rules", str(tmp_path / "r"),
         "--dashboards", str(tmp_path / "d")]
    )  # fmt: skip
    out = capsys.readouterr().out.splitlines()
    assert code == 1
    assert out[0].startswith("FAILED  config ") and out[0].endswith("nope.yaml: no such file")
    # What it was asked to check and cannot find fails too, and says why: never a pass by omission.
    assert [ln.split()[0] for ln in out[1:]] == ["FAILED", "FAILED", "FAILED"]
    assert out[1].endswith("r: no such directory")
    assert out[2].endswith("alertmanager.yml: no such file") and out[3].endswith("d: no such directory")


def test_an_empty_rules_or_dashboards_directory_fails(tmp_path, capsys):
    (tmp_path / "r").mkdir()
    (tmp_path / "d").mkdir()
    args = ["check", "--config", str(FLEET), "--rules", str(tmp_path / "r"), "--dashboards", str(tmp_path / "d")]
    assert main(args) == 1
    out = capsys.readouterr().out
    assert "no *.yml or *.yaml files" in out and "no *.json files" in out


def test_strict_counts_a_missing_tool_as_failed(monkeypatch, capsys):
    # the shipped files, checked without promtool or amtool installed: skipped (exit 0), failed under --strict
    monkeypatch.setattr("infercast.tools.check._tool", lambda *names: None)
    assert main(["check"]) == 0
    assert "promtool is not installed" in capsys.readouterr().out
    assert main(["check", "--strict"]) == 1


def test_missing_tools_skip_rather_than_pass(tmp_path):
    rules = tmp_path / "rules"
    rules.mkdir()
    (rules / "x.yml").write_text(GOOD_RULES)
    (tmp_path / "am.yml").write_text(GOOD_AM)
    [r] = check_rules(rules, promtool=None)
    assert (r.status, r.detail) == ("skipped", "promtool is not installed (Debian: prometheus)")
    a = check_alertmanager(tmp_path / "am.yml", amtool=None)
    assert (a.status, a.detail) == ("skipped", "amtool is not installed (Debian: prometheus-alertmanager)")


def test_dashboard_in_api_envelope_is_accepted(tmp_path):
    (tmp_path / "push.json").write_text(json.dumps({"dashboard": {"panels": [{"id": 1}]}, "overwrite": True}))
    [r] = check_dashboards(tmp_path)
    assert (r.status, r.detail) == ("ok", "1 panel")


@needs_promtool
@needs_amtool
def test_rules_built_from_other_thresholds_than_the_fleet_files_fail(tmp_path, capsys):
    """The user raised the forecast trigger to 0.8 in the fleet file and forgot to rebuild the rules: Prometheus
    would keep paging at 0.75.  `infercast check --config` says which rule differs, the two values and the command
    that rebuilds them; rules rebuilt from that fleet file pass."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET.read_text().replace("kv_forecast_trigger: 0.75", "kv_forecast_trigger: 0.8"))
    assert load_config(fleet).thresholds.kv_forecast_trigger == 0.8
    committed = REPO / "alertrules" / "rules"
    assert main(["check", "--config", str(fleet), "--rules", str(committed)]) == 1
    line = next(x for x in capsys.readouterr().out.splitlines() if "rules-vs-fleet" in x)
    assert line.startswith("FAILED  rules-vs-fleet ")
    assert ">= 0.75" in line and ">= 0.8" in line and f"python -m infercast.alertrules.generate --fleet {fleet}" in line
    rebuilt = tmp_path / "rules"
    from infercast.alertrules.generate import main as generate

    assert generate(["--fleet", str(fleet), "--out", str(rebuilt)]) == 0
    assert main(["check", "--config", str(fleet), "--rules", str(rebuilt)]) == 0  # its alertmanager.yml too
    line = next(x for x in capsys.readouterr().out.splitlines() if "rules-vs-fleet" in x)
    assert line.startswith("ok      rules-vs-fleet ") and "as " in line


@needs_promtool
@needs_amtool
def test_check_config_checks_what_that_fleet_builds_not_the_shipped_files(tmp_path, capsys):
    """Issue 38 item 4: `infercast check --config FILE` printed "ok rules alertrules/rules/alerts.yml" -- the shipped
    example's rules, built from other thresholds -- for a fleet they were not built from.  Now every line is about
    what FILE builds (its rules through promtool, its Alertmanager config through amtool, its dashboards), unless
    --rules / --dashboards / --alertmanager name files to check instead."""
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(FLEET.read_text().replace("kv_forecast_trigger: 0.75", "kv_forecast_trigger: 0.8"))
    assert main(["check", "--config", str(fleet)]) == 0
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert not [x for x in lines if "alertrules/rules" in x or "dashboards/generated" in x], lines
    built = [x for x in lines if f"{fleet} -> " in x]
    kinds = {x.split()[1] for x in built}
    assert kinds == {"rules", "runbooks", "alertmanager", "dashboard"}, lines  # runbooks: the built rules' links
    assert any(x.startswith("ok      rules ") and x.split(" -> ")[1].startswith("alerts.yml") for x in built)
    assert "--rules DIR --dashboards DIR" in captured.err  # how to check the deployed files

    # the rules promtool was given are the fleet's (its 0.8 trigger), not the shipped 0.75
    from infercast.tools.check import check_fleet_builds

    seen: dict[str, str] = {}

    def runner(argv: list[str]) -> tuple[int, str]:
        seen[Path(argv[-1]).name] = Path(argv[-1]).read_text()
        return 0, ""

    results = check_fleet_builds(fleet, promtool="promtool", amtool="amtool", runner=runner)
    # "skipped" only for the runbooks: the fleet publishes no runbook base URL, so the links are paths
    assert all(r.status == "ok" or (r.what, r.status) == ("runbooks", "skipped") for r in results), results
    assert 'max_yhat_upper{horizon="300s"} > 0.8' in seen["alerts.yml"]
    assert 'max_yhat_upper{horizon="300s"} > 0.75' not in seen["alerts.yml"]
    assert "alertmanager.yml" in seen

    # told otherwise: the named rules are checked (and against the fleet file), the rest still built from it
    committed = REPO / "alertrules" / "rules"
    assert main(["check", "--config", str(fleet), "--rules", str(committed)]) == 1
    out = capsys.readouterr().out
    assert "FAILED  rules-vs-fleet " in out and f"{fleet} -> fleet-overview.json" in out
