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
import yaml

from infercast.actuators.actions import SetPoolWeight
from infercast.actuators.admin import ActionRefused
from infercast.actuators.backends.file import FileAdmin
from infercast.actuators.backends.redis import RedisAdmin
from infercast.actuators.backends.redis import client as redis_client
from infercast.actuators.backends.router_http import HttpAdmin
from infercast.actuators.daemon import Daemon
from infercast.actuators.leader import Leadership, RedisLease
from infercast.actuators.stamp import Stamp
from infercast.simulator.twin.admin import TwinAdmin
from infercast.simulator.twin.fleet import build_fleet
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
        first = d.run_once("scheduled")
        assert first.actions[0].outcome == "applied" and admin.fence() == 5
        r.flushall()  # the lease store loses everything: its counter starts again at 1
        with caplog.at_level(logging.WARNING, logger="infercast.actuators.daemon"):
            second = d.run_once("scheduled")
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
        with caplog.at_level(logging.ERROR, logger="infercast.actuators.daemon"):
            outcomes = [d.run_once("scheduled").actions[0].outcome for _ in range(3)]
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


# --- the Redis and file backends: the router admin API's "from the future" rule, one bound for all three ----------
def _refuses_the_future(admin, stored) -> None:
    """Before, what the user saw: a stamp of 999... was applied and the store then held it as its highest token, so
    every later action of the rightful leader was refused "stale fencing token" (a lock-out one forged write away).
    Now it is refused "from the future", nothing changes, and the next leader's token is still accepted."""
    from infercast.actuators.backends.router_api import MAX_FENCE_STEP

    assert admin.apply(SetPoolWeight("v4-main", 0.5), stamp=Stamp(fencing_token=3)).status == "applied"
    with pytest.raises(ActionRefused, match=r"fencing token 999999999999999 is from the future \(highest seen 3; at "
                       rf"most {MAX_FENCE_STEP} more is accepted\)"):  # fmt: skip
        admin.apply(SetPoolWeight("v4-main", 0.1), stamp=Stamp(fencing_token=int("9" * 15)))
    with pytest.raises(ActionRefused, match="from the future"):
        admin.apply(SetPoolWeight("v4-main", 0.1), stamp=Stamp(fencing_token=3 + MAX_FENCE_STEP + 1))
    assert admin.fence() == 3 and stored() == 0.5
    assert admin.apply(SetPoolWeight("v4-main", 0.6), stamp=Stamp(fencing_token=3 + MAX_FENCE_STEP)).status == "applied"
    assert admin.fence() == 3 + MAX_FENCE_STEP and stored() == 0.6
    assert admin.apply(SetPoolWeight("v4-main", 0.7), stamp=Stamp(fencing_token=3 + MAX_FENCE_STEP)).status == "applied"
    assert admin.max_fence_step == MAX_FENCE_STEP  # one source of truth with the router admin API


def test_the_redis_backend_refuses_a_fencing_token_from_the_future(redis_server, fleet_cfg):
    admin = RedisAdmin.from_url(f"redis://127.0.0.1:{redis_server.port}/0", prefix="t")
    admin.seed(TwinAdmin(build_fleet(fleet_cfg)).observe())
    _refuses_the_future(admin, lambda: float(admin.r.hget("t:pool:v4-main", "weight")))
    admin.close()


def test_the_file_backend_refuses_a_fencing_token_from_the_future(fleet_cfg, tmp_path):
    path = tmp_path / "router.yaml"
    admin = FileAdmin(path, fleet_cfg)
    _refuses_the_future(admin, lambda: yaml.safe_load(path.read_text())["pools"]["v4-main"]["weight"])


def test_a_fresh_redis_or_file_trusts_the_first_token_as_the_router_does(redis_server, fleet_cfg, tmp_path):
    """The first token a store sees is taken, however high (a leader elected many times before the store was
    made): the bound is relative to the highest seen, as `RouterAdminApi`'s."""
    r = RedisAdmin.from_url(f"redis://127.0.0.1:{redis_server.port}/0", prefix="t")
    r.seed(TwinAdmin(build_fleet(fleet_cfg)).observe())
    f = FileAdmin(tmp_path / "router.yaml", fleet_cfg)
    for admin in (r, f):
        assert admin.apply(SetPoolWeight("v4-main", 0.5), stamp=Stamp(fencing_token=123_456)).status == "applied"
        assert admin.fence() == 123_456
    r.close()
