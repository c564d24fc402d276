"""The Prometheus rules: generated from one place, accepted by promtool, and unit-tested on both sides of `for:`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from infercast.alertrules.generate import generated_files
from infercast.alertrules.rules import alert_names, alerting_rules, recording_rules
from infercast.alertrules.settings import RUNBOOK_BASE_URL, RUNBOOK_ENV, RUNBOOKS, AlertSettings
from infercast.catalog import REC_SLO_BURN_RATE, REC_SLO_ERROR_RATIO, names
from infercast.config import Thresholds
from infercast.durations import duration, parse_duration

from .conftest import ALERTRULES, REPO, run

TESTS = sorted((ALERTRULES / "tests").glob("*.test.yml"))


def test_committed_files_equal_the_generated_ones():
    # What a user sees: editing a threshold in one place and re-running the generator is the only way to change
    # the rules; a hand edit of the YAML fails here.
    for rel, text in generated_files().items():
        committed = (REPO / rel).read_text()
        assert committed == text, f"{rel} is out of date: run python -m infercast.alertrules.generate"


def test_thresholds_come_from_the_config_defaults():
    t = Thresholds()
    exprs = {r["alert"]: r["expr"] for g in alerting_rules(AlertSettings()) for r in g["rules"]}
    upper = 'pool_version:infercast_forecast_kv_cache_usage_ratio:max_yhat_upper{horizon="300s"}'
    # the tuned default has no hysteresis (bench/tune_alarm.py): the plain crossing
    assert exprs["InfercastKVCacheForecastBreach"] == f"{upper} > {t.kv_forecast_trigger}"
    assert exprs["InfercastKVCacheUsageHigh"].endswith(f"> {t.memory_breaker}")
    assert exprs["InfercastKVCacheFragmentationHigh"].endswith(f"> {t.fragmentation_warning}")
    assert exprs["InfercastKVCacheFragmentationCritical"].endswith(f"> {t.fragmentation_release}")
    assert exprs["InfercastGPUTemperatureHigh"].endswith(f"> {t.gpu_temperature_celsius:g}")
    # a changed threshold flows into the rule
    custom = AlertSettings(thresholds=Thresholds(kv_forecast_trigger=0.6, kv_forecast_hysteresis=0))
    breach = next(
        r for g in alerting_rules(custom) for r in g["rules"] if r["alert"] == "InfercastKVCacheForecastBreach"
    )
    assert breach["expr"].endswith("> 0.6")
    assert "60%" in breach["annotations"]["summary"]


def test_promtool_accepts_the_rule_files(promtool):
    for name in ("recording.yml", "alerts.yml"):
        res = run([promtool, "check", "rules", str(ALERTRULES / "rules" / name)])
        assert res.returncode == 0, res.stdout + res.stderr
        assert "SUCCESS" in res.stdout + res.stderr


def test_promtool_unit_tests_pass(promtool):
    res = run([promtool, "test", "rules", *[str(p) for p in TESTS]])
    assert res.returncode == 0, res.stdout + res.stderr
    assert (res.stdout + res.stderr).count("SUCCESS") == len(TESTS)


def test_every_alert_is_tested_firing_and_quiet():
    fired: set[str] = set()
    quiet: set[str] = set()
    for path in TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for t in case.get("alert_rule_test", []):
                (fired if t.get("exp_alerts") else quiet).add(t["alertname"])
    assert set(alert_names()) <= fired, f"never seen firing: {set(alert_names()) - fired}"
    always = {"InfercastWatchdog"}  # the dead man's switch is never quiet
    assert set(alert_names()) - always <= quiet, f"never seen quiet: {set(alert_names()) - always - quiet}"


def test_every_alert_has_labels_annotations_and_a_runbook():
    for group in alerting_rules(AlertSettings()):
        for rule in group["rules"]:
            name = rule["alert"]
            # critical pages, ticket files a ticket, warning goes to chat, info is never notified, none: the Watchdog
            assert rule["labels"]["severity"] in {"info", "warning", "ticket", "critical", "none"}, name
            assert (rule["labels"]["severity"] == "none") == (name == "InfercastWatchdog"), name
            assert rule["labels"]["team"] in {"serving", "hardware", "platform"}, name
            ann = rule["annotations"]
            assert ann["summary"] and ann["description"], name
            if name != "InfercastWatchdog":  # always firing, nothing to tell
                assert "{{" in ann["description"], f"{name}: the description should carry the values that matter"
            # the default: the runbook's path in the package (tests/alerting: with INFERCAST_RUNBOOK_BASE_URL unset)
            assert ann["runbook_url"] == f"{RUNBOOK_BASE_URL}/{name}.md", name
            page = RUNBOOKS / f"{name}.md"
            assert page.is_file(), f"{name}: runbook {page} is missing"
            assert name in page.read_text(), f"{page} does not name {name}"
            assert (REPO / ann["runbook_url"]).resolve() == page.resolve()


def test_no_runbook_link_points_at_a_repository_that_does_not_exist():
    for rel, text in generated_files().items():
        assert "github.com/infercast" not in text, rel


def test_the_runbook_base_url_is_configurable(tmp_path, monkeypatch, promtool):
    from infercast.alertrules.generate import main

    monkeypatch.setenv(RUNBOOK_ENV, "https://wiki.example.com/sre/infercast/")
    assert AlertSettings().runbook_base_url == "https://wiki.example.com/sre/infercast"
    urls = {r["annotations"]["runbook_url"] for g in alerting_rules(AlertSettings()) for r in g["rules"]}
    assert all(u.startswith("https://wiki.example.com/sre/infercast/Infercast") for u in urls), urls
    monkeypatch.delenv(RUNBOOK_ENV)
    assert main(["--out", str(tmp_path), "--runbook-base-url", "https://runbooks.example.org/"]) == 0
    doc = yaml.safe_load((tmp_path / "alerts.yml").read_text())
    urls = [r["annotations"]["runbook_url"] for g in doc["groups"] for r in g["rules"]]
    assert urls and all(u.startswith("https://runbooks.example.org/Infercast") and u.endswith(".md") for u in urls)
    assert run([promtool, "check", "rules", str(tmp_path / "alerts.yml")]).returncode == 0
    with pytest.raises(SystemExit):  # the committed files keep the defaults
        main(["--runbook-base-url", "https://runbooks.example.org"])


def test_the_fleet_files_thresholds_reach_the_rules(tmp_path, promtool):
    """`--fleet`: every threshold the rules compare with is the fleet file's (none is built in)."""
    from infercast.alertrules.generate import DEFAULT_FLEET, default_settings, main
    from infercast.config import load_config

    data = yaml.safe_load(DEFAULT_FLEET.read_text())
    data["thresholds"].update(
        kv_forecast_trigger=0.61, memory_breaker=0.69, fragmentation_warning=0.17, fragmentation_release=0.31
    )
    data["thresholds"].update(gpu_temperature_celsius=77, kv_forecast_for_seconds=45)
    fleet = tmp_path / "fleet.yaml"
    fleet.write_text(yaml.safe_dump(data))
    out = tmp_path / "out"
    assert main(["--out", str(out), "--fleet", str(fleet)]) == 0
    rules = {r["alert"]: r for g in yaml.safe_load((out / "alerts.yml").read_text())["groups"] for r in g["rules"]}
    assert rules["InfercastKVCacheForecastBreach"]["expr"].endswith("> 0.61")
    assert rules["InfercastKVCacheForecastBreach"]["for"] == "45s"
    assert rules["InfercastKVCacheUsageHigh"]["expr"].endswith("> 0.69")
    assert rules["InfercastKVCacheFragmentationHigh"]["expr"].endswith("> 0.17")
    assert rules["InfercastKVCacheFragmentationCritical"]["expr"].endswith("> 0.31")
    assert rules["InfercastGPUTemperatureHigh"]["expr"].endswith("> 77")
    recording = (out / "recording.yml").read_text()
    assert ">= 0.61" in recording  # the trigger (the fragmentation bands are the alerts' own: no recorded band)
    assert run([promtool, "check", "rules", str(out / "alerts.yml"), str(out / "recording.yml")]).returncode == 0
    # the committed rules are the repository's fleet file's
    assert default_settings() == AlertSettings.from_fleet(load_config(DEFAULT_FLEET))
    assert main(["--out", str(out), "--fleet", str(tmp_path / "missing.yaml")]) == 2


def test_rules_use_only_catalog_names_and_recording_names():
    recorded = {r["record"] for g in recording_rules(AlertSettings()) for r in g["rules"]}
    # `up` is Prometheus's own series for the scrape of a service; `ALERTS` its series of firing alerts (the
    # predictive alert's hysteresis reads its own)
    allowed = names() | recorded | {"up", "ALERTS"}
    for r in recorded:
        level, metric, ops = r.split(":")
        # the SLO series are named after the SLI (one name for the router's and the engines' source), by the catalog
        assert level and ops and (metric in names() or r.startswith((REC_SLO_ERROR_RATIO, REC_SLO_BURN_RATE))), r
    promql_words = {
        "sum", "max", "min", "avg", "count", "by", "on", "and", "or", "unless", "rate", "increase", "time", "absent",
        "label_replace", "group_left", "bool", "quantile_over_time", "deriv", "vector", "last_over_time",
    }  # fmt: skip
    # the engines' own families the SLO rules read (vLLM's names, as the engine rules read theirs)
    allowed |= {"vllm:request_success_total", "vllm:time_to_first_token_seconds_bucket"}
    allowed |= {"vllm:time_to_first_token_seconds_count"}
    for group in (*recording_rules(AlertSettings()), *alerting_rules(AlertSettings())):
        for rule in group["rules"]:
            expr = re.sub(r'"[^"]*"', "", rule["expr"])  # drop label values
            expr = re.sub(r"\{[^}]*\}", "", expr)  # and matchers
            expr = re.sub(r"\[[^\]]*\]", "", expr)  # and ranges
            for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
                if word in promql_words or word in {"pool", "version", "from_version", "to_version", "reason"}:
                    continue
                if word in {"horizon", "node", "gpu", "uuid", "xid", "forecaster", "instance", "slo", "namespace"}:
                    continue
                assert word in allowed, f"{rule.get('alert') or rule.get('record')}: {word} is not a catalog name"


def test_time_scale_divides_every_for_duration():
    # The end-to-end test runs the twin 30x faster than real time; its rules keep the same shape.
    fast = AlertSettings().scaled(30)
    assert fast.for_kv_usage == 2 and fast.for_batch_pinned == 20 and fast.for_forecast_breach == 1
    assert fast.for_actuator_flapping == 0  # no for: stays no for:
    rules = {r["alert"]: r for g in alerting_rules(fast) for r in g["rules"]}
    assert rules["InfercastKVCacheFragmentationCritical"]["for"] == "2s"
    assert "[2s]" in rules["InfercastKVCacheUsageHigh"]["expr"]  # its window scales like a for:
    assert fast.thresholds == AlertSettings().thresholds


def test_duration_text():
    assert [duration(x) for x in (30, 60, 90, 300, 600, 3600, 5400)] == ["30s", "1m", "90s", "5m", "10m", "1h", "90m"]
    # and back, as Prometheus' APIs write them
    assert [parse_duration(duration(x)) for x in (30, 60, 90, 3600)] == [30, 60, 90, 3600]
    assert parse_duration("500ms") == 0.5 and parse_duration("1m30s") == 90
    for bad in ("15", "1.5s", "", "s"):
        with pytest.raises(ValueError, match="not a Prometheus duration"):
            parse_duration(bad)


def test_a_hysteresis_holds_one_page_while_the_band_wobbles_under_the_trigger(promtool, tmp_path):
    """With `thresholds.kv_forecast_hysteresis` set (0.05 here; the tuned default is 0), the page stays up while the
    band wobbles between 0.70 and 0.75 and clears under 0.70: one page, not one per wobble (real promtool, rules
    generated from the settings as the committed ones are)."""
    import yaml

    from infercast.alertrules.rules import rule_files

    settings = AlertSettings(thresholds=Thresholds(kv_forecast_hysteresis=0.05), for_forecast_breach=15)
    for name, doc in rule_files(settings).items():
        (tmp_path / name).write_text(yaml.safe_dump(doc, sort_keys=False))
    (tmp_path / "hysteresis.test.yml").write_text((Path(__file__).parent / "data" / "hysteresis.test.yml").read_text())
    res = run([promtool, "test", "rules", str(tmp_path / "hysteresis.test.yml")])
    assert res.returncode == 0, res.stdout + res.stderr


def test_every_recording_rule_is_read_by_an_alert_a_rule_or_a_panel():
    """A recorded series nothing reads costs Prometheus and misleads a reader looking for what an alert uses (the
    fragmentation band and the degradations by reason were read by nothing)."""
    import json

    readers = [json.dumps(r) for g in alerting_rules(AlertSettings()) for r in g["rules"]]
    readers += [p.read_text() for p in (REPO / "dashboards" / "generated").glob("*.json")]
    rules = [r for g in recording_rules(AlertSettings()) for r in g["rules"]]
    for rule in rules:
        name = rule["record"]
        used = [r["expr"] for r in rules if r["record"] != name] + readers
        assert any(re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", text) for text in used), (
            f"{name} is read by nothing"
        )
