"""The Alertmanager configuration: amtool accepts it, every alert routes where it should, inhibition works in a
real Alertmanager."""

from __future__ import annotations

import shutil
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import requests
import yaml

from infercast.alertrules.alertmanager import Receivers, alertmanager_config
from infercast.alertrules.generate import dump
from infercast.alertrules.rules import alerting_rules
from infercast.alertrules.settings import AlertSettings
from infercast.alertrules.webhook import WebhookRecorder
from infercast.servers import ServerUnavailable, start_alertmanager

from .conftest import ALERTRULES, REPO, run

# What each alert reaches, written out by hand (not derived from the generator): the contract with on-call.
EXPECTED_RECEIVERS = {
    "InfercastKVCacheForecastBreach": "infercast-actuator,chat-serving",
    "InfercastKVCacheForecastBreachMitigated": "blackhole",
    "InfercastKVCacheUsageHigh": "infercast-actuator,pager-serving",
    "InfercastKVCacheFragmentationHigh": "chat-serving",
    "InfercastKVCacheFragmentationCritical": "infercast-actuator,pager-serving",
    "InfercastKVBlockAllocationFailures": "chat-serving",
    "InfercastBatchSaturated": "chat-serving",
    "InfercastDegradationStorm": "pager-serving",
    "InfercastFailoverWithoutHeadroom": "infercast-actuator,pager-serving",
    "InfercastGPUTemperatureHigh": "infercast-actuator,pager-hardware",
    "InfercastGPUECCErrorSpike": "pager-hardware",
    "InfercastGPUXIDErrors": "pager-hardware",
    "InfercastTargetDown": "chat-platform",
    "InfercastExporterDown": "pager-platform",
    "InfercastForecastsStale": "chat-platform",
    "InfercastForecastMissing": "chat-platform",
    "InfercastActuatorFlapping": "chat-platform",
    "InfercastActuatorFrozen": "chat-platform",
    "InfercastActuatorAuditFailed": "pager-platform",
    "InfercastActuatorFenced": "pager-platform",
    "InfercastActuatorAuditUnknown": "chat-platform",
    "InfercastTargetMetricMissing": "chat-platform",
    "InfercastTargetParseErrors": "chat-platform",
}


def _check(amtool: str, config_text: str, tmp_path: Path) -> str:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "alertmanager.yml").write_text(config_text)
    shutil.copytree(ALERTRULES / "templates", tmp_path / "templates", dirs_exist_ok=True)
    res = run([amtool, "check-config", str(tmp_path / "alertmanager.yml")])
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def test_amtool_accepts_the_committed_configs(amtool, tmp_path):
    out = _check(amtool, (ALERTRULES / "alertmanager.yml").read_text(), tmp_path / "local")
    assert "2 inhibit rules" in out and "8 receivers" in out and "1 templates" in out
    out = _check(amtool, (REPO / "deploy" / "alertmanager.yml").read_text(), tmp_path / "compose")
    assert "8 receivers" in out


def test_amtool_accepts_slack_and_pagerduty_receivers(amtool, tmp_path):
    text = dump(alertmanager_config(Receivers(pager="pagerduty", chat="slack")))
    assert "routing_key_file" in text and "api_url_file" in text  # secrets stay in files
    _check(amtool, text, tmp_path)


def test_templates_render(amtool):
    res = run(
        [
            amtool,
            "template",
            "render",
            f"--template.glob={ALERTRULES / 'templates' / '*.tmpl'}",
            "--template.text="
            '{{ template "infercast.slack.text" . }}|{{ template "infercast.pagerduty.description" . }}',
        ]
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Runbook:" in res.stdout


def _alert_labels() -> dict[str, dict[str, str]]:
    sample = {"pool": "v4-main", "version": "v4"}
    return {
        r["alert"]: {"alertname": r["alert"], **sample, **r["labels"]}
        for g in alerting_rules(AlertSettings())
        for r in g["rules"]
    }


@pytest.mark.parametrize("config", ["alertrules/alertmanager.yml", "deploy/alertmanager.yml"])
def test_every_alert_routes_to_its_receivers(amtool, config):
    labels = _alert_labels()
    assert set(labels) == set(EXPECTED_RECEIVERS)
    for name, lbls in labels.items():
        res = run(
            [
                amtool,
                "config",
                "routes",
                "test",
                f"--config.file={REPO / config}",
                f"--verify.receivers={EXPECTED_RECEIVERS[name]}",
                *[f"{k}={v}" for k, v in lbls.items()],
            ]
        )
        assert res.returncode == 0, f"{name}: {res.stdout}{res.stderr}"
        assert res.stdout.strip() == EXPECTED_RECEIVERS[name], name


def test_an_unknown_team_still_pages_someone(amtool):
    res = run([amtool, "config", "routes", "test", f"--config.file={ALERTRULES / 'alertmanager.yml'}", "alertname=X"])
    assert res.stdout.strip() == "pager-platform"


def _post(am_url: str, alerts: list[dict[str, str]]) -> None:
    now = datetime.now(UTC)
    body = [
        {
            "labels": a,
            "annotations": {"summary": a["alertname"]},
            "startsAt": now.isoformat(),
            "endsAt": (now + timedelta(minutes=10)).isoformat(),
        }
        for a in alerts
    ]
    r = requests.post(f"{am_url}/api/v2/alerts", json=body, timeout=5)
    assert r.status_code == 200, r.text


def _status(am_url: str) -> dict[tuple[str, str], list[str]]:
    got = requests.get(f"{am_url}/api/v2/alerts", timeout=5).json()
    return {(a["labels"]["alertname"], a["labels"].get("pool", "")): a["status"]["inhibitedBy"] for a in got}


@pytest.mark.servers
def test_inhibition_in_a_real_alertmanager(tmp_path):
    hook = WebhookRecorder().serve()
    cfg = alertmanager_config(
        Receivers(actuator_url=f"{hook.url}/actuator", pager_url=f"{hook.url}/pager", chat_url=f"{hook.url}/chat")
    )
    # Notify within a second instead of 30 s (only the timers change; routes and inhibition are the committed ones).
    cfg["route"]["group_wait"] = "1s"
    shutil.copytree(ALERTRULES / "templates", tmp_path / "templates")
    try:
        am = start_alertmanager(yaml.safe_dump(cfg), workdir=tmp_path)
    except ServerUnavailable as e:
        hook.close()
        pytest.skip(str(e))
    L = _alert_labels()
    try:
        _post(
            am.url,
            [
                L["InfercastKVCacheForecastBreach"],
                L["InfercastKVCacheForecastBreachMitigated"],
                L["InfercastKVCacheUsageHigh"],  # inhibited: the actuator acted on the forecast
                L["InfercastKVCacheFragmentationCritical"],
                L["InfercastKVCacheFragmentationHigh"],  # inhibited: a critical for the same pool
                {**L["InfercastBatchSaturated"], "pool": "v3.5-fallback"},  # other pool: not inhibited
                {k: v for k, v in L["InfercastGPUXIDErrors"].items() if k not in ("pool", "version")},
                {k: v for k, v in L["InfercastGPUTemperatureHigh"].items() if k not in ("pool", "version")}
                | {"severity": "warning"},  # no pool: a pool-less critical must not inhibit it
            ],
        )
        # Alertmanager's inhibitor takes the posted alerts in asynchronously: under load the first read of the
        # status may come before it has marked them (a CI run read the threshold alert not inhibited yet)
        deadline = time.monotonic() + 15
        status = _status(am.url)
        while time.monotonic() < deadline and not (
            status[("InfercastKVCacheUsageHigh", "v4-main")]
            and status[("InfercastKVCacheFragmentationHigh", "v4-main")]
        ):
            time.sleep(0.2)
            status = _status(am.url)
        assert status[("InfercastKVCacheUsageHigh", "v4-main")], "threshold alert should be inhibited"
        assert status[("InfercastKVCacheFragmentationHigh", "v4-main")], "warning should be inhibited by critical"
        assert not status[("InfercastKVCacheForecastBreach", "v4-main")], "the predictive warning stays visible"
        assert not status[("InfercastBatchSaturated", "v3.5-fallback")]
        assert not status[("InfercastGPUTemperatureHigh", "")]
        assert not status[("InfercastKVCacheFragmentationCritical", "v4-main")]

        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not (
            hook.first("InfercastKVCacheForecastBreach", "infercast-actuator")
            and hook.first("InfercastKVCacheFragmentationCritical", "pager-serving")
            and hook.first("InfercastGPUXIDErrors", "pager-hardware")
        ):
            time.sleep(0.2)
        assert hook.first("InfercastKVCacheForecastBreach", "infercast-actuator")
        assert hook.first("InfercastKVCacheForecastBreach", "chat-serving")
        assert hook.first("InfercastKVCacheFragmentationCritical", "pager-serving")
        assert hook.first("InfercastGPUXIDErrors", "pager-hardware")
        delivered = {name for n in hook.received() for name in n.alertnames}
        assert "InfercastKVCacheUsageHigh" not in delivered
        assert "InfercastKVCacheFragmentationHigh" not in delivered
        assert "InfercastKVCacheForecastBreachMitigated" not in delivered  # info: blackhole
    finally:
        am.close()
        hook.close()
