"""The guardrail state kept beside the lease (actuators/state_store.py): Redis against a real redis-server on
loopback, the Lease annotation against recorded Kubernetes API answers replayed on loopback (tests/data/k8s, with
the state annotation added to them here: no cluster runs), the file for one node; and what the user sees when the
state is corrupt or not the actuator's: a StateError naming where it is and the command that clears it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from infercast.actuators import state_store
from infercast.actuators.actions import SetBreakerThreshold, SetPoolWeight
from infercast.actuators.backends.redis import client
from infercast.actuators.leader import KubernetesLease, Leadership, RedisLease
from infercast.actuators.state_store import (
    ANNOTATION,
    Deposed,
    Entry,
    FileStateStore,
    KubernetesStateStore,
    RedisStateStore,
    StateError,
)
from infercast.config import KubernetesLeader
from tests.actuators.kube_replay import K8S, LEASES, Exchange, KubeReplay

W5 = SetPoolWeight("v4-main", 0.5)
B3 = SetBreakerThreshold("v4-main", 0.3)
T0 = 1731294000.0


def entry(key: str, action=W5, at: float = T0, token: int | None = 1, holder: str = "a") -> Entry:
    return Entry(key, action, at, token, holder, 7)


# --- Redis -------------------------------------------------------------------------------------------------------
@pytest.fixture
def url(redis_server) -> str:
    return f"redis://127.0.0.1:{redis_server.port}/0"


def redis_pair(url: str) -> tuple[RedisLease, RedisStateStore, Leadership]:
    lease = RedisLease(client(url), key="f:leader", identity="a", lease_seconds=30)
    lead = lease.try_acquire_or_renew(0.0)
    assert lead.is_leader
    return lease, RedisStateStore(client(url), "f:leader"), lead


@pytest.mark.servers
def test_redis_keeps_in_flight_then_applied_and_a_new_leader_reads_both(url):
    lease, store, lead = redis_pair(url)
    assert store.load() == state_store.StoredState()  # nothing written yet: empty, and that is not an error
    store.begin(lead, entry("k1", W5, T0))
    store.begin(lead, entry("k2", B3, T0 + 1))
    store.settle(lead, "k1", entry("k1", W5, T0), keep_since=0.0)
    lease.release()
    b = RedisLease(client(url), key="f:leader", identity="b", lease_seconds=30)
    assert b.try_acquire_or_renew(1.0).fencing_token == 2
    got = RedisStateStore(client(url), "f:leader").load()
    assert [e.key for e in got.applied] == ["k1"] and [e.key for e in got.in_flight] == ["k2"]
    assert got.in_flight[0] == entry("k2", B3, T0 + 1)
    assert got.cooldowns() == {("set_pool_weight", "v4-main"): T0} and got.applied_in_hour(T0 + 10) == 1
    assert sorted(client(url).keys("f:leader:state:*")) == [
        "f:leader:state:applied", "f:leader:state:applied:at", "f:leader:state:in_flight", "f:leader:state:version",
    ]  # fmt: skip


@pytest.mark.servers
def test_redis_a_deposed_leader_cannot_write_the_state(url):
    lease, store, old = redis_pair(url)
    store.begin(old, entry("k1"))
    lease.release()  # a lost its lease (expired while it was paused, here released)
    b = RedisLease(client(url), key="f:leader", identity="b", lease_seconds=30)
    new = b.try_acquire_or_renew(1.0)
    with pytest.raises(Deposed, match=r"f:leader is held by b, not by a under fencing token 1"):
        store.settle(old, "k1", entry("k1"), keep_since=0.0)
    with pytest.raises(Deposed):
        store.begin(old, entry("k9"))
    got = store.load()
    assert [e.key for e in got.in_flight] == ["k1"] and got.applied == ()  # unchanged by the deposed leader
    store.settle(new, "k1", entry("k1", holder="a"), keep_since=0.0)  # the rightful holder can
    assert [e.key for e in store.load().applied] == ["k1"]


@pytest.mark.servers
def test_redis_state_is_bounded(url, monkeypatch):
    _, store, lead = redis_pair(url)
    monkeypatch.setattr(state_store, "MAX_APPLIED", 3)
    monkeypatch.setattr(state_store, "MAX_IN_FLIGHT", 2)
    for i in range(5):
        store.settle(lead, f"k{i}", entry(f"k{i}", at=T0 + i), keep_since=T0 + 1)  # k0 is past the horizon
    assert [e.key for e in store.load().applied] == ["k2", "k3", "k4"]  # the newest 3
    store.begin(lead, entry("f1"))
    store.begin(lead, entry("f2"))
    with pytest.raises(StateError, match=r"2 decisions already in flight \(at most 2\)"):
        store.begin(lead, entry("f3"))


@pytest.mark.servers
@pytest.mark.parametrize(
    ("damage", "says"),
    [
        (lambda r: r.hset("f:leader:state:applied", "k1", "{not json"), r"applied entry 'k1' is not JSON"),
        (lambda r: r.hset("f:leader:state:in_flight", "k1", json.dumps({"action": {"kind": "reboot"}})),
         r"entry 'k1': expected the fields action, at, token, holder, decision"),
        (lambda r: r.set("f:leader:state:applied", "x"), r"f:leader:state:applied is a string, not a hash"),
        (lambda r: r.set("f:leader:state:version", "7"), r"version '7' is not 1"),
    ],
)  # fmt: skip
def test_redis_corrupt_or_foreign_state_is_an_error_naming_the_keys_and_how_to_clear_them(url, damage, says):
    _, store, lead = redis_pair(url)
    store.settle(lead, "k0", entry("k0"), keep_since=0.0)
    damage(client(url))
    with pytest.raises(StateError, match=says) as e:
        store.load()
    assert "redis-cli DEL f:leader:state:in_flight f:leader:state:applied" in str(e.value)


# --- Kubernetes (recorded answers) ---------------------------------------------------------------------------------
LEASE = f"{LEASES}/infercast-actuator"


@pytest.fixture
def kube():
    replay = KubeReplay([])
    yield replay
    replay.close()


def recorded_with_state(tmp_path: Path, name: str, doc: dict | str | None, version: str | None = None) -> str:
    """A recorded Lease answer (tests/data/k8s/`name`) with the state annotation set to `doc`: an absolute path,
    which the replay serves as it is."""
    obj = json.loads((K8S / name).read_text())
    if doc is not None:
        text = doc if isinstance(doc, str) else json.dumps(doc)
        obj["metadata"]["annotations"] = {"other.example/keep": "me", ANNOTATION: text}
    if version is not None:
        obj["metadata"]["resourceVersion"] = version
    out = tmp_path / f"{name[:-5]}-{version or 'x'}-{abs(hash(str(doc)))}.json"
    out.write_text(json.dumps(obj))
    return str(out)


def doc_of(*applied: Entry, in_flight: tuple[Entry, ...] = ()) -> dict:
    return {"version": 1, "applied": {e.key: e.to_dict() for e in applied},
            "in_flight": {e.key: e.to_dict() for e in in_flight}}  # fmt: skip


def k8s(kube, identity: str = "actuator-a") -> tuple[KubernetesLease, KubernetesStateStore]:
    cfg = KubernetesLeader(kind="kubernetes", namespace="infer", api_url=kube.url, identity=identity)
    lease = KubernetesLease.from_config(cfg)
    return lease, KubernetesStateStore(lease)


def test_kubernetes_the_state_travels_with_the_lease_through_a_takeover_and_a_write_checks_holder_and_version(
    kube, tmp_path
):
    """actuator-b held the Lease (transitions 3) and left one applied change and one in flight in its annotation;
    actuator-a takes the Lease over (the replace carries the annotation, untouched), reads the state, and settles
    the in-flight one with a replace that keeps holder, transitions and the other annotations and carries the
    resourceVersion it read."""
    flying = entry("k-fly", B3, T0 + 5, token=3, holder="actuator-b")
    before = doc_of(entry("k-old", W5, T0, token=3, holder="actuator-b"), in_flight=(flying,))
    held = recorded_with_state(tmp_path, "lease-held-by-b.json", before)
    taken = recorded_with_state(tmp_path, "lease-taken-over.json", before)
    after = doc_of(entry("k-old", W5, T0, token=3, holder="actuator-b"), flying)
    settled = recorded_with_state(tmp_path, "lease-taken-over.json", after, version="6043")
    kube.then(
        *[Exchange("GET", LEASE, 200, held)] * 2,
        Exchange("PUT", LEASE, 200, taken),  # the takeover
        Exchange("GET", LEASE, 200, taken),  # load
        Exchange("GET", LEASE, 200, taken),  # settle: read ...
        Exchange("PUT", LEASE, 409, "status-409-lease.json"),  # ... the renew job wrote it meanwhile: 409
        Exchange("GET", LEASE, 200, taken),  # read again
        Exchange("PUT", LEASE, 200, settled),
    )
    lease, store = k8s(kube)
    assert not lease.try_acquire_or_renew(T0).is_leader
    lead = lease.try_acquire_or_renew(T0 + 15)
    assert lead.is_leader and lead.fencing_token == 4
    takeover = kube.requests[2].body
    assert takeover["metadata"]["annotations"][ANNOTATION] == json.dumps(before)  # the state is not lost
    assert takeover["metadata"]["annotations"]["other.example/keep"] == "me"

    got = store.load()
    assert [e.key for e in got.applied] == ["k-old"] and got.in_flight == (flying,)
    store.settle(lead, "k-fly", flying, keep_since=0.0)
    put = kube.requests[-1]
    assert put.method == "PUT" and put.body["metadata"]["resourceVersion"] == "6042"  # the version read
    assert put.body["spec"]["holderIdentity"] == "actuator-a" and put.body["spec"]["leaseTransitions"] == 4
    assert put.body["spec"]["renewTime"] == "2024-11-11T03:13:00.000000Z"  # a state write is not a renewal
    written = json.loads(put.body["metadata"]["annotations"][ANNOTATION])
    assert written == json.loads(json.dumps(after)) and put.body["metadata"]["annotations"]["other.example/keep"]
    assert len(kube.requests) == 8


def test_kubernetes_a_deposed_leader_writes_nothing(kube, tmp_path):
    """actuator-a led under token 4; the Lease now says actuator-b under 5: the write stops after the read."""
    obj = json.loads(Path(recorded_with_state(tmp_path, "lease-held-by-b.json", doc_of())).read_text())
    obj["spec"]["leaseTransitions"] = 5
    (tmp_path / "b5.json").write_text(json.dumps(obj))
    kube.then(Exchange("GET", LEASE, 200, str(tmp_path / "b5.json")))
    _, store = k8s(kube)
    with pytest.raises(Deposed, match=r"held by actuator-b \(fencing token 5\), not by actuator-a under 4"):
        store.begin(Leadership(True, 4, "actuator-a", ""), entry("k1"))
    assert [r.method for r in kube.requests] == ["GET"]


def test_kubernetes_a_renew_keeps_the_state_annotation(kube, tmp_path):
    doc = doc_of(entry("k1"))
    kube.then(
        Exchange("GET", LEASE, 200, recorded_with_state(tmp_path, "lease-created.json", doc)),
        Exchange("PUT", LEASE, 200, recorded_with_state(tmp_path, "lease-renewed.json", doc)),
    )
    lease, _ = k8s(kube)
    assert lease.try_acquire_or_renew(T0 + 5).is_leader
    assert kube.requests[1].body["metadata"]["annotations"][ANNOTATION] == json.dumps(doc)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("{oops", r"not JSON"),
        (json.dumps({"cooldowns": {}}), r"not the actuator's state \(expected version, in_flight, applied"),
        (json.dumps({"version": 2, "in_flight": {}, "applied": {}}), r"written by a newer infercast \(version 2\)"),
    ],
)
def test_kubernetes_a_corrupt_annotation_is_an_error_naming_the_lease_and_the_kubectl_that_clears_it(
    kube, tmp_path, text, says
):
    kube.then(Exchange("GET", LEASE, 200, recorded_with_state(tmp_path, "lease-created.json", text)))
    _, store = k8s(kube)
    with pytest.raises(StateError, match=says) as e:
        store.load()
    assert f"lease infer/infercast-actuator annotation {ANNOTATION}" in str(e.value)
    assert f"kubectl -n infer annotate lease infercast-actuator {ANNOTATION}-" in str(e.value)


# --- a file (one node) ---------------------------------------------------------------------------------------------
def test_file_round_trip_and_a_corrupt_file_is_an_error_naming_it(tmp_path):
    store = FileStateStore(tmp_path / "audit.db.state.json")
    lead = Leadership(True, None, "only", "")
    store.begin(lead, entry("k1", token=None))
    store.settle(lead, "k1", entry("k1", token=None), keep_since=0.0)
    store.begin(lead, entry("k2", B3, token=None))
    got = store.load()
    assert [e.key for e in got.applied] == ["k1"] and [e.key for e in got.in_flight] == ["k2"]
    store.path.write_text('{"version": 1, "in_flight": {}, "applied": {"k1": {"action": 3}}}')
    with pytest.raises(StateError, match=r"entry 'k1': expected the fields .*; inspect it, then delete it .*rm "):
        store.load()


def test_kubernetes_a_new_leader_learns_the_state_from_the_lease_and_writes_back_what_it_resolved(kube, tmp_path):
    """actuator-b applied one change and left one in flight; actuator-a took the Lease over (token 4).  Its own
    audit trail (another node's file) has neither; after `take_over` it has both, the in-flight one resolved
    without applying it (the twin keeps no idempotency keys: its settings show the change in effect, so it is
    counted), and the Lease annotation says so for the next leader."""
    from infercast.actuators.audit import Audit
    from infercast.actuators.failover import FailoverState
    from infercast.config import load_config
    from infercast.simulator.twin.admin import TwinAdmin
    from infercast.simulator.twin.fleet import build_fleet
    from tests.conftest import REPO

    old = entry("k-old", W5, T0, token=3, holder="actuator-b")
    flying = entry("k-fly", B3, T0 + 5, token=3, holder="actuator-b")
    taken = recorded_with_state(tmp_path, "lease-taken-over.json", doc_of(old, in_flight=(flying,)))
    kube.then(
        Exchange("GET", LEASE, 200, taken),  # load
        Exchange("GET", LEASE, 200, taken),  # the resolved in-flight decision: read ...
        Exchange("PUT", LEASE, 200, taken),  # ... and replace
    )
    _, store = k8s(kube)
    twin = TwinAdmin(build_fleet(load_config(REPO / "examples" / "flash-sale.yaml")))
    twin.apply(B3)  # b's last action reached the fleet before b died
    audit = Audit(tmp_path / "a.db")
    state = FailoverState(store, audit, twin, 900.0)
    line = state.take_over(Leadership(True, 4, "actuator-a", ""), T0 + 20)
    assert (
        audit.by_key("k-old").status == "applied"
        and "applied by actuator-b (fencing token 3)" in audit.by_key("k-old").detail
    )
    assert audit.by_key("k-fly").status == "applied" and audit.by_key("k-fly").fencing_token == 3
    assert [d.key for d in audit.applied_since(T0 - 1, T0 + 20)] == ["k-old", "k-fly"]  # what the guardrails count
    written = json.loads(kube.requests[-1].body["metadata"]["annotations"][ANNOTATION])
    assert written["in_flight"] == {} and written["applied"] == {"k-old": old.to_dict(), "k-fly": flying.to_dict()}
    assert "took over with fencing token 4" in line and "1 in flight learnt" in line
