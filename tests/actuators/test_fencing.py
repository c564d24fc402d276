"""Issue 24, item 2: fencing that recovers.

What the user sees: after the lease store loses its state (a Redis flushed or restored), the rightful leader's
fencing token falls behind the one the router holds.  Before, every action was refused "stale fencing token" for
ever while the metrics said "acting".  Now the leader re-acquires above the router's token and acts; when it cannot,
it says `infercast_actuator_fenced 1` and logs a line every tick.  The router refuses a mutating request without the
header once fencing is on (before: it skipped the fence) and a token from the future (before: 999... was taken and
locked the rightful leader out)."""

from __future__ import annotations

import logging

import pytest
import requests

from actuators.actions import SetPoolWeight
from actuators.backends.redis import client as redis_client
from actuators.backends.router_http import HttpAdmin
from actuators.daemon import Daemon
from actuators.leader import Leadership, RedisLease
from tests.actuators.doubles import Scripted
from tests.actuators.test_daemon import parts_for, scrape

AUTH = {"Authorization": "Bearer s3cret"}


@pytest.mark.servers
def test_after_redis_loses_its_state_the_leader_re_acquires_above_the_routers_token_and_acts(
    redis_server, twin, fleet_cfg, tmp_path, caplog
):
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    r = redis_client(url)
    r.set("infercast:actuator:leader:fencing", 4)  # four leaders before this one
    parts = parts_for(twin, fleet_cfg, tmp_path)
    loop = Scripted(parts, [(SetPoolWeight("v4-main", 0.5), "forecast"), (SetPoolWeight("v4-main", 0.6), "forecast")])
    admin = HttpAdmin(twin.url, "s3cret")
    d = Daemon(loop, RedisLease(r, identity="a"), mode="active", fence_reader=admin.fence)
    d.start(first_run=False)
    try:
        first = d.run_once("fast")
        assert first.actions[0].outcome == "applied" and admin.fence() == 5
        r.flushall()  # the lease store loses everything: its counter starts again at 1
        with caplog.at_level(logging.WARNING, logger="actuators.daemon"):
            second = d.run_once("fast")
        assert second.actions[0].outcome == "applied", second.actions[0].detail
        assert admin.fence() == 6 and twin.fleet.router.weights["v4-main"] == 0.6
        assert any("ahead of this leader's 1" in rec.getMessage() for rec in caplog.records)
        m = scrape(d)
        assert m["infercast_actuator_fenced"] == 0.0 and m["infercast_actuator_active"] == 1.0
    finally:
        d.stop()


class _Behind:
    """A leader whose lease store cannot move its token (no `advance_past`): token 1 for ever."""

    identity = "behind"

    def try_acquire_or_renew(self, now: float) -> Leadership:
        return Leadership(True, 1, self.identity, "held")

    def release(self) -> None:
        pass


def test_a_leader_that_cannot_re_acquire_reports_fenced_every_tick_and_does_not_act(twin, fleet_cfg, tmp_path, caplog):
    parts = parts_for(twin, fleet_cfg, tmp_path)
    loop = Scripted(parts, [(SetPoolWeight("v4-main", 0.5), "forecast")])
    d = Daemon(loop, _Behind(), mode="active", fence_reader=lambda: 7)
    d.start(first_run=False)
    try:
        with caplog.at_level(logging.ERROR, logger="actuators.daemon"):
            outcomes = [d.run_once("fast").actions[0].outcome for _ in range(3)]
        assert outcomes == ["advisory"] * 3 and twin.fleet.actions == []
        fenced = [rec for rec in caplog.records if "fenced: the backend holds fencing token 7" in rec.getMessage()]
        assert len(fenced) == 3  # a line every tick
        m = scrape(d)
        assert m["infercast_actuator_fenced"] == 1.0 and m["infercast_actuator_leader"] == 1.0
        assert m["infercast_actuator_active"] == 0.0
    finally:
        d.stop()


def test_the_router_refuses_a_missing_fence_once_fencing_is_on_and_a_token_from_the_future(twin):
    url = f"{twin.url}/v1/actions"
    body = {"kind": "set_pool_weight", "pool": "v4-main", "weight": 0.7}
    assert requests.get(f"{twin.url}/v1/fence", timeout=5).json()["fencing_token"] is None
    ok = requests.post(url, json=body, headers={**AUTH, "X-Fencing-Token": "3"}, timeout=5)
    assert ok.status_code == 200
    r = requests.post(url, json={**body, "weight": 0.1}, headers=AUTH, timeout=5)
    assert r.status_code == 428 and "X-Fencing-Token required" in r.json()["error"]
    r = requests.post(url, json={**body, "weight": 0.1}, headers={**AUTH, "X-Fencing-Token": "9" * 15}, timeout=5)
    assert r.status_code == 409 and "from the future" in r.json()["error"]
    assert twin.fleet.router.weights["v4-main"] == 0.7
    assert requests.get(f"{twin.url}/v1/fence", timeout=5).json()["fencing_token"] == 3
    assert HttpAdmin(twin.url, "s3cret").fence() == 3
