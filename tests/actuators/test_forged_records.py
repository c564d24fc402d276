"""Found by bench/hostile.py (issue 24 item 8, the backends' stored documents): a record under an idempotency key
that the actuator did not write (edited or forged in Redis or in the router's file) made the backend's `lookup`
raise KeyError / ActionError, which the daemon's read-back of a lost answer and its restart recovery let through
(a tick that raised; a daemon that would not start).  Now the read-back says `unknown` naming the record, and
recovery leaves the decision unresolved (asked again at the next start), neither raising."""

from __future__ import annotations

import pytest
import yaml

from infercast.actuators.actions import SetPoolWeight
from infercast.actuators.admin import ActionRefused, BackendError, Result
from infercast.actuators.audit import Audit
from infercast.actuators.backends.file import FileAdmin
from infercast.actuators.backends.redis import RedisAdmin
from infercast.actuators.recovery import read_back, reconcile_unknown, resolve_in_flight
from infercast.actuators.stamp import Stamp
from infercast.simulator.twin.admin import TwinAdmin
from infercast.simulator.twin.fleet import build_fleet

W = SetPoolWeight("v4-main", 0.5)


def _settles_unknown(admin, tmp_path) -> None:
    verdict, found, how = read_back(admin, "k", W)
    assert (verdict, found) == ("unknown", None)
    assert "record under idempotency key 'k' cannot be read" in how and "not what the actuator wrote" in how
    with Audit(tmp_path / "a.db") as audit:
        i = audit.record_decision(0.0, "k", W, {})
        (r,) = resolve_in_flight(audit, admin, 1.0)
        assert r.outcome == "unresolved" and "cannot be read" in r.detail
        assert audit.get(i).status == "decided"  # left in flight: asked again at the next start, never guessed
        j = audit.record_decision(0.0, "k2", W, {})
        audit.mark_unknown(j, Result("failed", "lost", attempts=3), "lost", 0.0)
        assert reconcile_unknown(audit, admin, 2.0)  # k2 is not forged: settled either way, nothing raised


def test_a_forged_record_in_redis_is_an_unknown_read_back_not_a_crash(redis_server, fleet_cfg, tmp_path):
    admin = RedisAdmin.from_url(f"redis://127.0.0.1:{redis_server.port}/0", prefix="t")
    admin.seed(TwinAdmin(build_fleet(fleet_cfg)).observe())
    admin.r.hset("t:applied", "k", '{"previous": {}}')  # no action: KeyError in RedisAdmin.lookup
    _settles_unknown(admin, tmp_path)


def test_a_forged_record_in_the_routers_file_is_an_unknown_read_back_not_a_crash(fleet_cfg, tmp_path):
    path = tmp_path / "router.yaml"
    admin = FileAdmin(path, fleet_cfg)
    admin.apply(W, stamp=Stamp(key="k"))
    doc = yaml.safe_load(path.read_text())
    doc["infercast"]["applied"]["k"] = '{"previous": {"kind": "nope"}}'  # ActionError in FileAdmin.lookup
    path.write_text(yaml.safe_dump(doc))
    _settles_unknown(admin, tmp_path)


# --- the backends themselves (issue 24's rest): a BackendError naming the record, within `lookup`'s contract -------
# Before, what the user saw: the daemon's read-back said "cannot be read (KeyError: 'action')" and the hostile bench
# listed each of these as a backend raising outside its contract ("contained"); anyone else calling `lookup` (a
# tool, a test, another daemon) got a KeyError, JSONDecodeError, AttributeError or ActionError traceback.  Now
# `lookup` answers the one thing its contract has for "cannot tell": a BackendError that names the key, says the
# record is not what the actuator wrote, and where it is.
ACTION = '"{\\"kind\\": \\"set_pool_weight\\", \\"pool\\": \\"v4-main\\", \\"weight\\": 0.5}"'
REDIS_FORGED = [
    '{"previous": {}}',  # no action: KeyError
    "garbage",  # not JSON: JSONDecodeError
    "[1, 2]",  # not an object: TypeError
    '{"action": "{}", "previous": 5}',  # an action that is none: ActionError
    '{"action": 5, "previous": {}}',  # the action not JSON text: TypeError
    '{"action": ' + ACTION + ', "previous": 5}',  # a real action, undo values that are none: AttributeError
    '{"action": ' + ACTION + ', "previous": {"weight": [1]}}',
]


@pytest.mark.parametrize("record", REDIS_FORGED)
def test_redis_lookup_of_a_forged_record_is_a_backend_error_naming_it(redis_server, fleet_cfg, record):
    admin = RedisAdmin.from_url(f"redis://127.0.0.1:{redis_server.port}/0", prefix="t")
    admin.seed(TwinAdmin(build_fleet(fleet_cfg)).observe())
    admin.r.hset("t:applied", "k", record)
    with pytest.raises(BackendError) as e:
        admin.lookup("k")
    msg = str(e.value)
    assert "record under idempotency key 'k' cannot be read: not what the actuator wrote" in msg, msg
    assert "'t:applied'" in msg and "left as it is" in msg
    assert admin.r.hget("t:applied", "k") == record  # nothing written
    admin.close()


@pytest.mark.parametrize("record", REDIS_FORGED)
def test_a_redis_apply_replaying_a_forged_record_is_a_backend_error_and_changes_nothing(
    redis_server, fleet_cfg, record
):
    """The same record met by an apply under its key (a retry): before, a JSONDecodeError or AttributeError out of
    `apply`, or a Lua error; now the same BackendError, and nothing is written."""
    admin = RedisAdmin.from_url(f"redis://127.0.0.1:{redis_server.port}/0", prefix="t")
    admin.seed(TwinAdmin(build_fleet(fleet_cfg)).observe())
    admin.r.hset("t:applied", "k", record)
    try:
        admin.apply(W, stamp=Stamp(key="k"))
    except ActionRefused as e:  # a readable record of another action: the key was reused
        assert "was used for another action" in str(e)
    except BackendError as e:
        assert "record under idempotency key 'k' cannot be read" in str(e), str(e)
    else:
        raise AssertionError("a forged record was taken as the answer")
    assert admin.r.hget("t:pool:v4-main", "weight") == "1.0" and admin.r.hget("t:fleet", "revision") is None
    admin.close()


@pytest.mark.parametrize(
    "record",
    [
        '{"previous": {"kind": "nope"}}',  # no action, an undo that is none: ActionError
        '{"action": {"kind": "set_pool_weight", "pool": "v4-main", "weight": 0.5}, "previous": {"kind": "nope"}}',
        '{"action": {"kind": "set_pool_weight", "pool": "v4-main", "weight": 0.5}, "previous": 5}',
        '{"action": {"kind": "set_pool_weight", "pool": "v4-main", "weight": 0.5}, "previous": [1]}',
        "garbage",
        "[]",
    ],
)
def test_file_lookup_and_replay_of_a_forged_record_are_a_backend_error_naming_it(fleet_cfg, tmp_path, record):
    path = tmp_path / "router.yaml"
    admin = FileAdmin(path, fleet_cfg)
    admin.apply(W, stamp=Stamp(key="k"))
    doc = yaml.safe_load(path.read_text())
    doc["infercast"]["applied"]["k"] = record
    path.write_text(yaml.safe_dump(doc))
    before = path.read_bytes()
    for call in (lambda: admin.lookup("k"), lambda: admin.apply(W, stamp=Stamp(key="k"))):
        with pytest.raises(BackendError) as e:
            call()
        msg = str(e.value)
        assert "record under idempotency key 'k' cannot be read: not what the actuator wrote" in msg, msg
        assert f"{path} infercast.applied" in msg and "left as it is" in msg
    assert path.read_bytes() == before
