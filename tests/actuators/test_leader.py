"""Leader election: the Redis lease against a real redis-server on loopback (exactly one leader, expiry when the
leader stops renewing, fencing tokens that stale leaders cannot get past, Redis killed -> nobody leads and says so),
and the Kubernetes Lease against recorded API answers replayed on loopback (no cluster runs here)."""

from __future__ import annotations

import time

import pytest

from infercast.actuators.actions import SetPoolWeight
from infercast.actuators.admin import ActionRefused
from infercast.actuators.backends.redis import RedisAdmin, client
from infercast.actuators.leader import KubernetesLease, Leadership, RedisLease, SingleReplica, micro_time
from infercast.actuators.stamp import Stamp
from infercast.config import KubernetesLeader
from infercast.simulator.twin.admin import TwinAdmin
from infercast.simulator.twin.fleet import build_fleet
from tests.actuators.kube_replay import LEASES, Exchange, KubeReplay


def test_a_single_replica_always_leads():
    e = SingleReplica("only")
    assert e.try_acquire_or_renew(0.0) == Leadership(True, None, "only", "single replica: always leads")


@pytest.fixture
def url(redis_server) -> str:
    return f"redis://127.0.0.1:{redis_server.port}/0"


def test_two_electors_one_leader(url):
    a = RedisLease(client(url), identity="a", lease_seconds=5)
    b = RedisLease(client(url), identity="b", lease_seconds=5)
    la, lb = a.try_acquire_or_renew(0.0), b.try_acquire_or_renew(0.0)
    assert la.is_leader and not lb.is_leader
    assert la.fencing_token == 1 and lb.holder == "a" and "a holds the redis lease for another" in lb.detail
    for t in range(1, 5):  # renewing keeps it, the token does not change
        assert a.try_acquire_or_renew(t).fencing_token == 1 and not b.try_acquire_or_renew(t).is_leader
    assert client(url).get("infercast:actuator:leader") == "a|1"


def test_the_lease_expires_when_its_leader_stops_renewing_and_the_new_token_fences_the_old(url, fleet_cfg):
    a = RedisLease(client(url), identity="a", lease_seconds=1)
    b = RedisLease(client(url), identity="b", lease_seconds=1)
    old = a.try_acquire_or_renew(0.0)
    assert old.is_leader
    deadline = time.monotonic() + 60  # a guard: the 1 s lease expires on Redis' clock; a busy machine may be late
    lb = b.try_acquire_or_renew(0.0)
    while not lb.is_leader and time.monotonic() < deadline:  # a paused (GC, SIGSTOP): it renews nothing
        time.sleep(0.1)
        lb = b.try_acquire_or_renew(0.0)
    assert lb.is_leader and lb.fencing_token == 2 and "acquired" in lb.detail
    assert not a.try_acquire_or_renew(1.0).is_leader  # a wakes up and finds it lost the lease
    # an action a sent with its old token (in flight while it was paused) is refused by the backend
    admin = RedisAdmin(client(url), "t")
    admin.seed(TwinAdmin(build_fleet(fleet_cfg)).observe())
    assert admin.apply(SetPoolWeight("v4-main", 0.5), stamp=Stamp(fencing_token=lb.fencing_token)).status == "applied"
    with pytest.raises(ActionRefused, match=r"stale fencing token 1 \(a newer leader holds 2\)"):
        admin.apply(SetPoolWeight("v4-main", 0.9), stamp=Stamp(fencing_token=old.fencing_token))
    assert admin.r.hget("t:pool:v4-main", "weight") == "0.5"


def test_release_hands_over_at_once(url):
    a = RedisLease(client(url), identity="a", lease_seconds=30)
    b = RedisLease(client(url), identity="b", lease_seconds=30)
    assert a.try_acquire_or_renew(0.0).is_leader
    b.release()  # not b's to release: nothing happens
    assert not b.try_acquire_or_renew(0.0).is_leader
    a.release()
    assert b.try_acquire_or_renew(0.0).fencing_token == 2


def test_redis_killed_means_nobody_leads_and_says_so(redis_server, url):
    a = RedisLease(client(url), identity="a", lease_seconds=5)
    b = RedisLease(client(url), identity="b", lease_seconds=5)
    assert a.try_acquire_or_renew(0.0).is_leader
    redis_server.close()
    la, lb = a.try_acquire_or_renew(1.0), b.try_acquire_or_renew(1.0)
    assert not la.is_leader and not lb.is_leader and la.fencing_token is None
    assert la.detail.startswith("redis unreachable (ConnectionError") and "none acts" in la.detail


# --- Kubernetes Lease (recorded answers) -----------------------------------------------------------------------
@pytest.fixture
def kube():
    replay = KubeReplay([])
    yield replay
    replay.close()


def elector(kube, identity: str = "actuator-a") -> KubernetesLease:
    cfg = KubernetesLeader(kind="kubernetes", namespace="infer", api_url=kube.url, identity=identity)
    return KubernetesLease.from_config(cfg)


LEASE = f"{LEASES}/infercast-actuator"


def test_the_first_replica_creates_the_lease_then_renews_it_with_its_resource_version(kube):
    kube.then(
        Exchange("GET", LEASE, 404, "status-404-lease.json"),
        Exchange("POST", LEASES, 201, "lease-created.json"),
        Exchange("GET", LEASE, 200, "lease-created.json"),
        Exchange("PUT", LEASE, 200, "lease-renewed.json"),
    )
    e = elector(kube)
    t0 = 1731294000.25
    first = e.try_acquire_or_renew(t0)
    assert first == Leadership(True, 0, "actuator-a", "created lease infer/infercast-actuator (fencing token 0)")
    created = kube.requests[1].body
    assert created["spec"] == {
        "holderIdentity": "actuator-a",
        "leaseDurationSeconds": 15,
        "acquireTime": "2024-11-11T03:00:00.250000Z",
        "renewTime": "2024-11-11T03:00:00.250000Z",
        "leaseTransitions": 0,
    }
    second = e.try_acquire_or_renew(t0 + 5)
    assert second.is_leader and second.fencing_token == 0 and second.detail.startswith("renewed")
    put = kube.requests[3].body
    assert put["metadata"]["resourceVersion"] == "5501"  # optimistic concurrency: the version we read
    assert (
        put["spec"]["renewTime"] == micro_time(t0 + 5) and put["spec"]["acquireTime"] == "2024-11-11T03:00:00.000000Z"
    )


def test_a_409_on_renew_makes_a_follower(kube):
    kube.then(
        Exchange("GET", LEASE, 200, "lease-created.json"),
        Exchange("PUT", LEASE, 409, "status-409-lease.json"),
    )
    got = elector(kube).try_acquire_or_renew(1731294005.0)
    assert (
        not got.is_leader and got.detail == "lost a race for lease infer/infercast-actuator (409 Conflict); following"
    )


def test_a_409_on_create_makes_a_follower(kube):
    kube.then(
        Exchange("GET", LEASE, 404, "status-404-lease.json"),
        Exchange("POST", LEASES, 409, "status-409-lease-exists.json"),
    )
    got = elector(kube).try_acquire_or_renew(1731294005.0)
    assert not got.is_leader and "another replica created lease infer/infercast-actuator first" in got.detail


def test_a_lease_held_by_another_is_taken_over_only_after_it_went_unrenewed_for_its_duration_on_our_clock(kube):
    """The recorded lease says actuator-b renewed it long ago by its clock; we do not trust that clock: we wait until
    we have seen the same resourceVersion for leaseDurationSeconds (15 s) of our own time, then take it over with
    leaseTransitions + 1 as the new fencing token."""
    kube.then(
        Exchange("GET", LEASE, 200, "lease-held-by-b.json"),
        Exchange("GET", LEASE, 200, "lease-held-by-b.json"),
        Exchange("GET", LEASE, 200, "lease-held-by-b.json"),
        Exchange("PUT", LEASE, 200, "lease-taken-over.json"),
    )
    e = elector(kube)
    t0 = 1731294780.0
    first = e.try_acquire_or_renew(t0)
    assert not first.is_leader and first.holder == "actuator-b" and first.fencing_token == 3
    assert not e.try_acquire_or_renew(t0 + 14).is_leader
    took = e.try_acquire_or_renew(t0 + 15)
    assert took.is_leader and took.fencing_token == 4 and "took over" in took.detail and "actuator-b" in took.detail
    spec = kube.requests[3].body["spec"]
    assert spec["holderIdentity"] == "actuator-a" and spec["leaseTransitions"] == 4
    assert kube.requests[3].body["metadata"]["resourceVersion"] == "6010"


def test_an_api_error_means_this_replica_does_not_lead(kube):
    kube.then(Exchange("GET", LEASE, 500, "status-500.json"))
    got = elector(kube).try_acquire_or_renew(0.0)
    assert not got.is_leader and "HTTP 500: Internal error occurred: etcdserver: request timed out" in got.detail


def test_an_api_that_is_not_there_means_this_replica_does_not_lead():
    from infercast.servers import free_port

    cfg = KubernetesLeader(kind="kubernetes", namespace="infer", api_url=f"http://127.0.0.1:{free_port()}")
    got = KubernetesLease.from_config(cfg).try_acquire_or_renew(0.0)
    assert not got.is_leader and got.detail.startswith("kubernetes API unusable") and "none acts" in got.detail
