"""The HAProxy backend against a real HAProxy (Debian's), driven through its runtime API socket.

No engine is needed: HAProxy's runtime API changes and reports its servers whether or not they answer (the lab's
configuration has no health checks).  What a user sees: each action changes the running proxy and `show stat`
says so; a replayed key changes nothing; a stale or far-future fencing token, an unknown pool, an action the proxy
has no lever for, and a weight that would leave nothing routable are refused; a proxy that is not there is a
transient failure (retried, then `failed`), never an exception.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infercast.actuators.actions import PrewarmPool, ScalePool, SetAdmission, SetPoolWeight
from infercast.actuators.admin import apply_with_retries
from infercast.actuators.backends.haproxy import HAProxyAdmin, RuntimeAPI
from infercast.actuators.stamp import Stamp, stamped
from infercast.servers import free_port, which
from infercast.simulator.lab.proxy import haproxy_config

pytestmark = pytest.mark.servers

POOLS = {"a": ["a0", "a1"], "b": ["b0"]}


@pytest.fixture
def proxy(tmp_path: Path):
    sock = tmp_path / "admin.sock"
    servers = {name: free_port() for names in POOLS.values() for name in names}
    cfg = tmp_path / "haproxy.cfg"
    cfg.write_text(haproxy_config(free_port(), servers, sock))
    proc = subprocess.Popen([which("haproxy"), "-f", str(cfg), "-db"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.STDOUT)  # fmt: skip
    try:
        for _ in range(100):
            if sock.exists():
                break
            assert proc.poll() is None, "haproxy exited at start"
            time.sleep(0.05)
        yield RuntimeAPI(sock)
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def admin(api: RuntimeAPI) -> HAProxyAdmin:
    return HAProxyAdmin(api, POOLS, {"a": "v1", "b": "v1"}, full_concurrency=10)


def test_weight_admission_and_drain_land_in_the_running_proxy(proxy: RuntimeAPI) -> None:
    h = admin(proxy)
    res = h.apply(SetPoolWeight("a", 0.5))
    assert res.status == "applied" and res.previous == SetPoolWeight("a", 1.0)
    assert [proxy.servers()[n].weight for n in ("a0", "a1", "b0")] == [50, 50, 100]
    res = h.apply(SetAdmission(memory_limit=0.6))
    assert res.status == "applied" and res.previous == SetAdmission(memory_limit=1.0)
    assert {s.maxconn for s in proxy.servers().values()} == {6}
    assert h.observe().admission.memory_limit == pytest.approx(0.6)
    res = h.apply(ScalePool("a", 1))
    assert res.status == "applied" and res.previous == ScalePool("a", 2)
    states = proxy.servers()
    assert not states["a0"].draining and states["a1"].draining and not states["b0"].draining
    obs = h.observe()
    assert obs.pool("a").replicas == 1 and obs.pool("a").weight == pytest.approx(0.5)
    # and back: the undo actions restore what was there
    for undo in (ScalePool("a", 2), SetAdmission(memory_limit=1.0), SetPoolWeight("a", 1.0)):
        assert h.apply(undo).status == "applied"
    states = proxy.servers()
    assert all(s.maxconn is None and not s.draining and s.weight == 100 for s in states.values())


def test_the_same_action_twice_changes_nothing_the_second_time(proxy: RuntimeAPI) -> None:
    h = admin(proxy)
    h.apply(SetPoolWeight("b", 2.0))
    again = h.apply(SetPoolWeight("b", 2.0))
    assert again.status == "applied" and "already" in again.detail
    assert proxy.servers()["b0"].weight == 200


def test_a_replayed_key_is_answered_from_the_proxy_and_a_reused_key_refused(proxy: RuntimeAPI) -> None:
    h = admin(proxy)
    assert h.apply(SetPoolWeight("a", 0.3), stamp=Stamp("k-1", 1)).status == "applied"
    proxy.write("set weight engines/a0 77")  # someone else moved it since
    replay = h.apply(SetPoolWeight("a", 0.3), stamp=Stamp("k-1", 1))
    assert "replayed" in replay.detail and proxy.servers()["a0"].weight == 77  # not applied twice
    assert h.lookup("k-1") is not None and h.lookup("k-2") is None
    r = apply_with_retries(stamped(h, Stamp("k-1", 1)), SetPoolWeight("a", 0.9))
    assert r.status == "refused" and "used for another action" in r.detail


def test_a_stale_or_future_fencing_token_is_refused(proxy: RuntimeAPI) -> None:
    h = admin(proxy)
    assert h.fence() is None
    assert h.apply(SetPoolWeight("a", 0.5), stamp=Stamp("k-5", 5)).status == "applied"
    assert h.fence() == 5
    stale = apply_with_retries(stamped(h, Stamp("k-4", 4)), SetPoolWeight("a", 0.1))
    assert stale.status == "refused" and "stale fencing token 4" in stale.detail
    future = apply_with_retries(stamped(h, Stamp("k-9", 5 + 1001)), SetPoolWeight("a", 0.1))
    assert future.status == "refused" and "from the future" in future.detail
    assert proxy.servers()["a0"].weight == 50


@pytest.mark.parametrize(
    ("action", "says"),
    [
        (SetPoolWeight("nope", 1.0), "no HAProxy servers are mapped to pool 'nope'"),
        (PrewarmPool("a"), "needs another backend"),
        (SetAdmission(max_context_tokens=100), "max_context_tokens"),
        (ScalePool("a", 3), "cannot start engines"),
        (SetPoolWeight("a", 3.0), "its maximum is 256"),
    ],
)
def test_what_the_proxy_cannot_do_is_refused_with_the_reason(proxy: RuntimeAPI, action, says: str) -> None:
    r = apply_with_retries(admin(proxy), action)
    assert r.status == "refused" and says in r.detail


def test_weight_zero_everywhere_is_refused(proxy: RuntimeAPI) -> None:
    h = admin(proxy)
    assert h.apply(SetPoolWeight("b", 0.0)).status == "applied"
    r = apply_with_retries(h, SetPoolWeight("a", 0.0))
    assert r.status == "refused" and "503" in r.detail
    assert proxy.servers()["a0"].weight == 100


def test_a_proxy_that_is_not_there_fails_after_retries(tmp_path: Path) -> None:
    h = admin(RuntimeAPI(tmp_path / "absent.sock", timeout=0.5))
    r = apply_with_retries(h, SetPoolWeight("a", 0.5), attempts=2, sleep=lambda _: None)
    assert r.status == "failed" and "absent.sock" in r.detail and r.attempts == 2


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(1, 250), st.integers(0, 5)), min_size=1, max_size=8
    )
)
def test_the_proxy_ends_at_the_last_weight_applied_and_a_replayed_key_changes_nothing(proxy, steps) -> None:
    """For any sequence of weights, each under a key (some keys replayed): the proxy holds, per pool, the weight
    of the last action whose key was new; a replay of an earlier key is answered without a write."""
    h = admin(proxy)
    for pool in POOLS:  # the fixture's proxy is shared by the examples: start each from the configured weights
        for name in POOLS[pool]:
            proxy.write(f"set weight engines/{name} 100")
    want = {"a": 100, "b": 100}
    used: dict[str, SetPoolWeight] = {}
    run = len(proxy.command("show table ic_action_keys"))  # keys from earlier examples: a fresh prefix
    for pool, weight, k in steps:
        key = f"p{run}-{pool}-{k}"
        action = SetPoolWeight(pool, weight / 100)
        res = apply_with_retries(stamped(h, Stamp(key, 1)), action)
        if key in used and used[key] != action:
            assert res.status == "refused"
        elif key in used:
            assert "replayed" in res.detail
        else:
            assert res.status == "applied"
            used[key] = action
            want[pool] = weight
    states = proxy.servers()
    assert {pool: states[POOLS[pool][0]].weight for pool in POOLS} == want


def _fleet(backend: dict) -> dict:
    return {
        "versions": {"v1": {"model": {"name": "m"}}},
        "pools": {"a": {"version": "v1", "nodes": 2}, "b": {"version": "v1", "nodes": 1}},
        "actuator": {"backend": backend},
    }


def test_a_fleet_file_points_the_actuator_at_haproxy(proxy: RuntimeAPI, tmp_path: Path) -> None:
    """Issue 40: `actuator.backend: {kind: haproxy, ...}` in a user's fleet file gives `infercast actuator` the
    HAProxy backend, like any other backend; `infercast check --config` accepts the file."""
    import yaml

    from infercast.actuators.backends import build_backend
    from infercast.config import parse_config
    from infercast.tools.cli import main

    doc = _fleet({"kind": "haproxy", "socket": proxy.path, "servers": POOLS, "full_concurrency": 10})
    cfg = parse_config(doc)
    h = build_backend(cfg)
    assert isinstance(h, HAProxyAdmin) and h.versions == {"a": "v1", "b": "v1"}
    assert h.apply(SetAdmission(memory_limit=0.5)).status == "applied"
    assert {s.maxconn for s in proxy.servers().values()} == {5}  # read back from the running proxy
    assert h.observe().admission.memory_limit == 0.5
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(doc))
    assert main(["check", "--config", str(path)]) == 0


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"servers": {"c": ["c0"]}}, "actuator.backend.servers: unknown pool 'c'"),
        ({"servers": {"a": ["a0"], "b": ["a0"]}}, "server 'a0' is in both pool 'a' and pool 'b'"),
        ({"servers": {"a": []}}, "pool 'a' names no server"),
        ({"full_concurrency": 0}, "full_concurrency"),
        ({"weight_scale": 300}, "weight_scale"),
        ({"full_concurrency": None}, "full_concurrency"),
    ],
)
def test_a_bad_haproxy_backend_is_refused_naming_the_key(change: dict, says: str) -> None:
    from infercast.config import ConfigError, parse_config

    backend = {"kind": "haproxy", "socket": "/run/haproxy/admin.sock", "servers": POOLS, "full_concurrency": 10}
    backend.update(change)
    backend = {k: v for k, v in backend.items() if v is not None}
    with pytest.raises(ConfigError, match=re.escape(says)):
        parse_config(_fleet(backend))
