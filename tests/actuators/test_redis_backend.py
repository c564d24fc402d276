"""The Redis backend against a real redis-server on loopback (started by the test): the key layout of
docs/router-admin-api.md, a pub/sub notice per change, idempotency keys, fencing tokens, and Redis going away
mid-test (a BackendError and a `failed` result, never a crash)."""

from __future__ import annotations

import json
import time

import pytest

from infercast.actuators.actions import (
    PrewarmPool,
    ScalePool,
    SetAdmission,
    SetBreakerThreshold,
    SetPoolWeight,
    SetRateLimit,
)
from infercast.actuators.admin import ActionRefused, BackendError, apply_with_retries
from infercast.actuators.backends.redis import RedisAdmin, client
from infercast.actuators.stamp import Stamp, stamped
from infercast.simulator.twin.admin import TwinAdmin
from infercast.simulator.twin.fleet import build_fleet


@pytest.fixture
def admin(redis_server, fleet_cfg):
    a = RedisAdmin.from_url(f"redis://127.0.0.1:{redis_server.port}/0", prefix="t")
    a.seed(TwinAdmin(build_fleet(fleet_cfg)).observe())
    yield a
    a.close()


def test_seeded_state_reads_back_as_the_same_observation(admin, fleet_cfg):
    want = TwinAdmin(build_fleet(fleet_cfg)).observe()
    got = admin.observe()
    assert got.pools == tuple(sorted(want.pools, key=lambda p: p.name))
    assert got.rate_limits == {"shared": 220.0} and got.admission == want.admission
    assert abs(got.at - time.time()) < 5  # Redis' own clock
    # the layout is plain hashes and sets, readable by any router
    r = admin.r
    assert r.smembers("t:pools") == {"v4-main", "v4-standby", "v3.5-fallback"}
    assert r.hget("t:pool:v4-main", "weight") == "1.0" and r.hget("t:pool:v4-standby", "standby") == "1"


def test_each_change_writes_its_hash_and_publishes_a_notice(admin):
    sub = admin.r.pubsub()
    sub.subscribe("t:changes")
    assert sub.get_message(timeout=10)["type"] == "subscribe"  # 10 s: a busy CI machine
    res = admin.apply(SetPoolWeight("v4-main", 0.5), stamp=Stamp(key="k1", fencing_token=3))
    assert res.status == "applied" and res.previous == SetPoolWeight("v4-main", 1.0)
    assert admin.r.hget("t:pool:v4-main", "weight") == "0.5"
    msg = sub.get_message(timeout=10)
    notice = json.loads(msg["data"])
    assert notice == {
        "revision": 1,
        "key": "k1",
        "fencing_token": 3,
        "action": {"kind": "set_pool_weight", "pool": "v4-main", "weight": 0.5},
    }
    assert admin.apply(SetBreakerThreshold("v4-main", 0.9)).previous == SetBreakerThreshold("v4-main", 0.2)
    assert admin.apply(ScalePool("v4-main", 14)).previous == ScalePool("v4-main", 12)
    assert admin.apply(PrewarmPool("v4-standby")).previous is None
    assert admin.apply(SetAdmission(memory_limit=0.8)).previous is None  # nothing was set: nothing to put back
    assert admin.apply(SetAdmission(memory_limit=0.7)).previous == SetAdmission(memory_limit=0.8)
    assert admin.apply(SetRateLimit("shared", 300.0, 60.0)).previous == SetRateLimit("shared", 220.0, None)
    obs = admin.observe()
    v4 = obs.pool("v4-main")
    assert (v4.weight, v4.breaker_threshold_seconds, v4.replicas) == (0.5, 0.9, 14)
    assert obs.pool("v4-standby").standby is False
    assert obs.admission.memory_limit == 0.7 and obs.rate_limits["shared"] == 300.0
    assert admin.r.hget("t:fleet", "revision") == "7"
    # one notice per change, in order, and nothing more (each read waits up to 10 s: a busy CI machine; issue 25)
    notices = [sub.get_message(timeout=10) for _ in range(6)]
    assert [json.loads(m["data"])["revision"] for m in notices if m] == [2, 3, 4, 5, 6, 7]
    assert sub.get_message(timeout=1) is None
    sub.close()


def test_unknown_pools_and_lanes_are_refused_and_nothing_is_written(admin):
    with pytest.raises(ActionRefused, match="redis lists no pool 'nope'"):
        admin.apply(SetPoolWeight("nope", 1.0))
    with pytest.raises(ActionRefused, match="redis lists no lane 'vip'"):
        admin.apply(SetRateLimit("vip", 10.0))
    assert not admin.r.exists("t:pool:nope") and admin.r.hget("t:fleet", "revision") is None


def test_an_idempotency_key_is_applied_once_and_can_be_looked_up(admin):
    stamp = Stamp(key="decision-7")
    first = admin.apply(SetPoolWeight("v4-main", 0.5), stamp=stamp)
    admin.r.hset("t:pool:v4-main", "weight", "0.9")  # the router moved it since
    again = admin.apply(SetPoolWeight("v4-main", 0.5), stamp=stamp)
    assert again.previous == first.previous and "replayed" in again.detail
    assert admin.r.hget("t:pool:v4-main", "weight") == "0.9" and admin.r.hget("t:fleet", "revision") == "1"
    with pytest.raises(ActionRefused, match="idempotency key 'decision-7' was used for another action"):
        admin.apply(SetPoolWeight("v4-main", 0.1), stamp=stamp)
    found = admin.lookup("decision-7")
    assert found is not None and found.previous == SetPoolWeight("v4-main", 1.0)
    assert admin.lookup("other") is None


def test_only_the_last_keys_are_kept(redis_server, fleet_cfg):
    a = RedisAdmin(client(f"redis://127.0.0.1:{redis_server.port}/0"), "t", keep_keys=3)
    a.seed(TwinAdmin(build_fleet(fleet_cfg)).observe())
    for i in range(5):
        a.apply(SetPoolWeight("v4-main", 0.1 * (i + 1)), stamp=Stamp(key=f"k{i}"))
    assert sorted(a.r.hkeys("t:applied")) == ["k2", "k3", "k4"] and a.r.zcard("t:applied:order") == 3


def test_a_stale_fencing_token_is_refused(admin):
    assert admin.apply(SetPoolWeight("v4-main", 0.5), stamp=Stamp(fencing_token=2)).status == "applied"
    with pytest.raises(ActionRefused, match=r"stale fencing token 1 \(a newer leader holds 2\)"):
        admin.apply(SetPoolWeight("v4-main", 0.2), stamp=Stamp(fencing_token=1))
    assert admin.r.hget("t:pool:v4-main", "weight") == "0.5"


def test_a_corrupt_hash_is_a_backend_error_naming_the_field(admin):
    admin.r.hset("t:pool:v4-main", "replicas", "many")
    with pytest.raises(BackendError, match=r"prefix 't': fleet.pools\[1\].replicas: expected an integer, got 'many'"):
        admin.observe()


def test_redis_going_away_is_a_backend_error_then_failed_and_recovers(redis_server, admin):
    assert admin.apply(SetPoolWeight("v4-main", 0.5)).status == "applied"
    redis_server.close()  # Redis dies mid-test
    with pytest.raises(BackendError, match=r"redis redis://127.0.0.1:\d+/0: ConnectionError"):
        admin.observe()
    sleeps: list[float] = []
    res = apply_with_retries(stamped(admin, Stamp(key="k")), SetPoolWeight("v4-main", 0.2), sleep=sleeps.append)
    # refused connections fail fast: each attempt ends in ConnectionError (not a timeout), only the backoff waits
    assert res.status == "failed" and res.attempts == 3 and "ConnectionError" in res.detail
    assert "Timeout" not in res.detail and sleeps == [0.2, 0.4]
