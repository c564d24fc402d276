"""The actuator's Grafana dashboard against the real daemon: a real Prometheus on loopback scrapes the daemon's
/metrics while it runs a test-double loop (applying, judging, freezing, receiving an alert) against the twin's admin
API; every panel query and the `$pool` variable return data.  And the observe-only placeholder loop reads live
metrics back from that Prometheus."""

from __future__ import annotations

import json
import time

import pytest
import requests

from infercast.actuators.actions import SetAdmission, SetBreakerThreshold, SetPoolWeight
from infercast.actuators.daemon import Daemon
from infercast.actuators.leader import SingleReplica
from infercast.actuators.tick import TickContext, VerdictOutcome
from infercast.actuators.webhook import WebhookReceiver
from infercast.dashboards.build import GENERATED
from infercast.servers import prometheus_config, start_prometheus
from infercast.store.prometheus import PrometheusStore
from tests.actuators.doubles import ObserveOnly, Scripted
from tests.actuators.test_daemon import parts_for
from tests.alerting.test_dashboards import _query, annotation_exprs, panel_targets, substitute

W5 = SetPoolWeight("v4-main", 0.5)


@pytest.fixture(scope="module")
def running(tmp_path_factory, fleet_cfg):
    """The daemon (active, single replica) on a 0.3 s control loop against the twin, scraped every second."""
    from infercast.simulator.twin.fleet import build_fleet
    from infercast.simulator.twin.surfaces import TwinServer

    tmp = tmp_path_factory.mktemp("dash")
    twin = TwinServer(build_fleet(fleet_cfg), token="s3cret").start()
    parts = parts_for(twin, fleet_cfg, tmp)
    loop = Scripted(
        parts,
        [
            (W5, "forecast"),
            (SetBreakerThreshold("v4-main", 0.4), "live_metrics"),
            (SetAdmission(memory_limit=0.8), "alert"),
        ],
        verdicts=[VerdictOutcome(W5, "rolled_back", "kv got worse")],
        frozen_every=4,
    )
    hook = WebhookReceiver(parts.inbox)
    daemon = Daemon(
        loop, SingleReplica(), mode="active", interval=0.3, webhook=hook, token="t0k"
    )  # an acting daemon's webhook needs a token (tests/actuators/test_intake.py)
    daemon.start()
    config = prometheus_config({"infercast-actuator": daemon.url.removeprefix("http://")})
    prom = start_prometheus(config, workdir=tmp / "prom")
    body = {"alerts": [{"status": "firing", "labels": {"alertname": "X", "pool": "v4-main"}, "fingerprint": "f"}]}
    requests.post(f"{daemon.url}/api/v1/alerts", json=body, headers={"Authorization": "Bearer t0k"}, timeout=5)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # a few scrapes: rates need two samples
        r = requests.get(f"{prom.url}/api/v1/query", params={"query": "count_over_time(infercast_actuator_leader[1m])"})
        if r.ok and r.json()["data"]["result"] and float(r.json()["data"]["result"][0]["value"][1]) >= 5:
            break
        time.sleep(0.5)
    yield prom, daemon, parts
    daemon.stop()
    prom.close()
    twin.stop()


#: what this acting, unrefused daemon cannot show, and why (tests/alerting/test_dashboards.py runs them with data)
NOT_FROM_THIS_DAEMON = {
    "Refused and failed actions (last hour)": "the scripted loop's actions are all applied, none refused",
    "Firing alerts": "no alert rules are loaded here",
    "Actuator proposals (advisory)": "the daemon acts (active mode): nothing is only proposed",
}


@pytest.mark.servers
def test_every_actuator_panel_returns_data_from_the_real_daemon(running):
    prom, _, _ = running
    doc = json.loads((GENERATED / "actuator.json").read_text())
    empty, count = {}, 0
    for panel, target in panel_targets(doc):
        count += 1
        expr = substitute(target["expr"])
        if not _query(prom.url, expr, bool(target.get("instant"))):
            empty[panel["title"]] = expr
    for annotation, expr in annotation_exprs(doc):  # Grafana asks for annotations with a range query
        if not _query(prom.url, substitute(expr), False):
            empty[annotation["name"]] = expr
    assert count >= 20
    unexplained = {t: e for t, e in empty.items() if t not in NOT_FROM_THIS_DAEMON}
    assert not unexplained, f"panels without data from the real daemon: {unexplained}"
    assert "Actuator actions" not in empty  # the applied actions are annotated
    (var,) = [v for v in doc["templating"]["list"] if v["type"] == "query" and v["name"] == "pool"]
    r = requests.get(f"{prom.url}/api/v1/label/pool/values", params={"match[]": "infercast_actuator_decisions_total"})
    assert sorted(r.json()["data"]) == ["fleet", "v4-main"] and var["name"] == "pool"


@pytest.mark.servers
def test_the_dashboard_shows_what_the_daemon_did(running):
    prom, _, _ = running
    leaders = _query(prom.url, "sum(infercast_actuator_leader)", True)
    assert float(leaders[0]["value"][1]) == 1.0
    weights = _query(prom.url, 'infercast_actuator_pool_weight{pool="v4-main"}', True)
    assert float(weights[0]["value"][1]) == 0.5
    alerts = _query(prom.url, 'infercast_actuator_webhook_alerts_total{outcome="accepted"}', True)
    assert float(alerts[0]["value"][1]) == 1.0
    p99 = _query(
        prom.url,
        "histogram_quantile(0.99, sum by (le) (rate(infercast_actuator_decision_latency_seconds_bucket[1m])))",
        True,
    )
    assert 0 < float(p99[0]["value"][1]) <= 30


@pytest.mark.servers
def test_the_observe_only_placeholder_reads_live_metrics_from_prometheus(running):
    prom, _, parts = running
    parts.store = PrometheusStore(prom.url)
    loop = ObserveOnly(parts, metric="infercast_actuator_ticks_total")
    ctx = TickContext("scheduled", False, "advisory", SingleReplica().try_acquire_or_renew(0.0))
    report = loop(time.time(), ctx)
    (_, _, pools, series) = loop.seen[0]
    assert pools == 3 and series >= 2  # the twin's three pools; the tick counters (every loop x outcome, from 0)
    assert report.actions == () and "decided nothing" in report.note
