"""The daemon runs the reserve plan (issue 42 item 1, one path): `infercast actuator`'s default control loop
(`controller.build_tick`) runs `ReservePolicy`, the policy the twin's loop arms run, wherever the fleet file gives it
an autoscaler with a reservoir and a backend that writes autoscaler floors and ceilings; elsewhere it runs the
predictive policy and says why.

The daemon path is the real one: `build_parts` (the gateway backend built from the fleet file, the audit trail),
`build_tick` on `StoreInputs`, `build_daemon(...).run_once`.  The metric store is the in-memory store the embedded
pipeline uses (the same queries as Prometheus); the Kubernetes API is recorded answers replayed on loopback
(tests/actuators/kube_replay.py: no API server runs here), each request checked."""

from __future__ import annotations

import logging
import re
from typing import Any

import pytest
import yaml

from infercast.actuators.audit import Audit
from infercast.actuators.controller import build_tick, daemon_policy
from infercast.actuators.daemon_cli import build_daemon, build_parts
from infercast.actuators.policy import PredictivePolicy
from infercast.actuators.reserve_policy import ReservePolicy, reserve_blocker
from infercast.catalog import FORECAST_KV_CACHE_USAGE_RATIO, KV_CACHE_USAGE_RATIO, ROUTER_REQUESTS_TOTAL
from infercast.clock import SimClock
from infercast.config import parse_config
from infercast.store.memory import MemoryStore
from tests.actuators.kube_replay import DEPLOYMENTS, HPAS, Exchange, KubeReplay, merged, recorded
from tests.conftest import REPO

STEP = 15.0
T0 = 1_700_000_000.0  # the first scrape (wall-clock seconds, as the daemon's clock reads them)
AUTOSCALERS = {
    "v4-short": {"kind": "HorizontalPodAutoscaler", "name": "chat-v4-short"},
    "v4-long": {"kind": "HorizontalPodAutoscaler", "name": "chat-v4-long"},
}


def split_fleet(backend: dict[str, Any] | None) -> dict[str, Any]:
    """The seed's fleet as a cluster runs it after the context split (the twin's protected layout written out as
    pools): v4-short (7 nodes, <= 8k prompts) and v4-long (5), each under its own HPA, both drawing on the 4-node
    v4-standby reservoir."""
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    main = doc["pools"].pop("v4-main")
    pools = {
        "v4-short": {**main, "nodes": 7, "max_context_tokens": 8192},
        "v4-long": {**main, "nodes": 5, "min_context_tokens": 8193},
    }
    doc["pools"] = {**pools, **doc["pools"]}
    doc["protections"].pop("context_pools")
    doc["actuator"] = {"audit_db": "audit.db", "listen": "127.0.0.1:0"}
    if backend is not None:
        doc["actuator"]["backend"] = backend
    return doc


def gateway_backend(url: str) -> dict[str, Any]:
    return {"kind": "gateway", "namespace": "infer", "api_url": url, "token_env": "K8S_TOKEN",
            "timeout_seconds": 2.0, "autoscalers": AUTOSCALERS}  # fmt: skip


def scrape(store: MemoryStore, t: float, sent: dict[str, float], kv: dict[str, float]) -> None:
    """One scrape of the router's request counters (cumulative, every outcome `ok` here), the engines' KV and the
    predictor's KV forecast (its upper band at today's level: the forecast has not seen the surge)."""
    for pool, n in sent.items():
        store.write(ROUTER_REQUESTS_TOTAL, {"pool": pool, "outcome": "ok", "priority": "urgent"}, t, n)
        store.write(KV_CACHE_USAGE_RATIO, {"pool": pool, "instance": f"{pool}-0"}, t, kv[pool])
        store.write(FORECAST_KV_CACHE_USAGE_RATIO, {"pool": pool, "band": "upper"}, t, 0.62)


def observed(pool: str) -> list[Exchange]:
    """What `observe()` asks for one pool: its HPA (floor, ceiling), then its Deployment (ready replicas)."""
    return [
        Exchange("GET", f"{HPAS}/chat-{pool}", 200, f"hpa-chat-{pool}.json"),
        Exchange("GET", f"{DEPLOYMENTS}/chat-{pool}", 200, f"deployment-chat-{pool}.json"),
    ]


def test_an_onset_makes_the_daemon_write_the_reserve_plan_as_hpa_bounds_and_audit_it(tmp_path, monkeypatch):
    """What an operator sees: ten calm minutes, no write; then the short-context pool's arrivals quadruple in one
    scrape, and at the next tick the daemon sets chat-v4-short's minReplicas and maxReplicas to 11 (all four
    standby nodes earmarked for it) and chat-v4-long's maxReplicas to 5 (its HPA can no longer take them), both
    in the audit trail as applied `set_pool_bounds` with the plan's reason."""
    monkeypatch.setenv("K8S_TOKEN", "sa-token-123")
    monkeypatch.chdir(tmp_path)
    kube = KubeReplay([])
    try:
        cfg = parse_config(split_fleet(gateway_backend(kube.url)))
        assert reserve_blocker(cfg) == ""
        clock = SimClock(T0)
        parts = build_parts(cfg, "active", clock=clock)
        store = MemoryStore()
        parts.store = store
        tick = build_tick(parts)
        assert isinstance(tick.loop.policy, ReservePolicy)
        daemon = build_daemon(parts, tick, "127.0.0.1:0", serve=False)

        # ten calm minutes: 10 req/s to v4-short, 4 to v4-long, KV at the autoscaler's target
        sent = {"v4-short": 0.0, "v4-long": 0.0}
        kv = {"v4-short": 0.6, "v4-long": 0.6}
        t = T0 - 600.0
        while t <= T0 + 1e-9:
            scrape(store, t, sent, kv)
            sent = {"v4-short": sent["v4-short"] + 10 * STEP, "v4-long": sent["v4-long"] + 4 * STEP}
            t += STEP
        kube.then(*observed("v4-short"), *observed("v4-long"))
        calm = daemon.run_once("scheduled")
        assert calm is not None and not calm.frozen, calm.note if calm else None
        assert [a for a in calm.actions if a.action.kind == "set_pool_bounds"] == []
        assert [r.method for r in kube.requests] == ["GET"] * 4  # read, nothing written

        # the surge starts between two scrapes: 40 req/s to v4-short over the last interval
        clock.advance(STEP)
        sent["v4-short"] += 30 * STEP
        scrape(store, T0 + STEP, sent, {"v4-short": 0.7, "v4-long": 0.6})
        kube.then(
            *observed("v4-short"),
            *observed("v4-long"),
            Exchange("GET", f"{HPAS}/chat-v4-short", 200, "hpa-chat-v4-short.json"),
            Exchange("PATCH", f"{HPAS}/chat-v4-short", 200, "hpa-chat-v4-short-patched.json"),
            Exchange("GET", f"{HPAS}/chat-v4-long", 200, "hpa-chat-v4-long.json"),
            Exchange("PATCH", f"{HPAS}/chat-v4-long", 200, "hpa-chat-v4-long-patched.json"),
        )
        report = daemon.run_once("scheduled")
        daemon.stop()
        assert report is not None and not report.frozen, report.note if report else None
        bounds = [a for a in report.actions if a.action.kind == "set_pool_bounds"]
        assert [(a.action.to_dict(), a.outcome) for a in bounds] == [
            ({"kind": "set_pool_bounds", "pool": "v4-short", "floor": 11, "ceiling": 11}, "applied"),
            ({"kind": "set_pool_bounds", "pool": "v4-long", "floor": 5, "ceiling": 5}, "applied"),
        ]
        patches = [r for r in kube.requests if r.method == "PATCH"]
        assert [p.path for p in patches] == [f"{HPAS}/chat-v4-short", f"{HPAS}/chat-v4-long"]
        assert patches[0].body == {
            "metadata": {"resourceVersion": "7201", "annotations": {"infercast.io/owner-max-replicas": "11"}},
            "spec": {"minReplicas": 11, "maxReplicas": 11},
        }
        assert patches[1].body["spec"] == {"minReplicas": 5, "maxReplicas": 5}
        assert merged(recorded("hpa-chat-v4-short.json"), patches[0].body)["spec"]["maxReplicas"] == 11

        rows = [r for r in Audit(tmp_path / "audit.db").recent(0) if r.action.kind == "set_pool_bounds"]
        assert {(r.action.pool, r.status) for r in rows} == {("v4-short", "applied"), ("v4-long", "applied")}
        short = next(r for r in rows if r.action.pool == "v4-short")
        assert "reserve plan: 4 of 4 reserve nodes" in short.inputs["reason"] and short.inputs["onset"].startswith(
            "arrivals"
        )
        assert short.previous.to_dict() == {"kind": "set_pool_bounds", "pool": "v4-short", "floor": 7, "ceiling": 11}
    finally:
        kube.close()


@pytest.mark.parametrize(
    ("backend", "why"),
    [
        ({"kind": "http", "url": "http://127.0.0.1:9410"}, "actuator.backend.kind http cannot set autoscaler floors"),
        ({"kind": "file", "path": "router.yaml"}, "actuator.backend.kind file cannot set autoscaler floors"),
        (
            {"kind": "gateway", "namespace": "infer", "api_url": "http://127.0.0.1:1", "autoscalers": {
                "v4-short": AUTOSCALERS["v4-short"]}},
            r"actuator.backend.autoscalers maps no HPA or ScaledObject to \['v4-long'\]",
        ),
    ],
)  # fmt: skip
def test_a_backend_that_cannot_write_bounds_runs_the_predictive_policy_and_says_why(backend, why, caplog):
    """A fleet with an autoscaler but a backend that refuses `set_pool_bounds` (a router's admin API, a file, a
    gateway without an HPA for every pool the autoscaler scales): the daemon runs the predictive policy, whose
    pre-warm such a backend carries out, and says at start, as a warning, why there is no reserve plan."""
    cfg = parse_config(split_fleet(backend))
    assert re.search(why, reserve_blocker(cfg))
    with caplog.at_level(logging.INFO, logger="infercast.actuators.controller"):
        policy = daemon_policy(cfg)
    assert type(policy) is PredictivePolicy
    (rec,) = [r for r in caplog.records if "no reserve plan" in r.getMessage()]
    assert rec.levelno == logging.WARNING and "running the predictive policy" in rec.getMessage()


def test_the_seed_fleet_file_names_split_pools_so_the_daemon_runs_no_reserve_plan_on_it():
    """examples/flash-sale.yaml describes the twin: its autoscaler scales the pools of the twin's context split,
    which a cluster's fleet file would list as pools; the daemon says so rather than plan for pools it cannot see."""
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    doc["actuator"] = {"backend": gateway_backend("http://127.0.0.1:1") | {"autoscalers": {}}}
    doc["actuator"]["backend"]["autoscalers"] = {"v4-standby": {"kind": "ScaledObject", "name": "chat-v4-standby"}}
    why = reserve_blocker(parse_config(doc))
    assert "['v4-short', 'v4-long'], which are not pools of the fleet file" in why


def test_a_fleet_without_an_autoscaler_runs_the_predictive_policy_quietly(caplog):
    doc = split_fleet(gateway_backend("http://127.0.0.1:1"))
    doc["protections"].pop("autoscaler")
    with caplog.at_level(logging.INFO, logger="infercast.actuators.controller"):
        assert type(daemon_policy(parse_config(doc))) is PredictivePolicy
    assert all(r.levelno < logging.WARNING for r in caplog.records)
