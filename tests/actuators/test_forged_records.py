"""Found by bench/hostile.py (issue 24 item 8, the backends' stored documents): a record under an idempotency key
that the actuator did not write (edited or forged in Redis or in the router's file) made the backend's `lookup`
raise KeyError / ActionError, which the daemon's read-back of a lost answer and its restart recovery let through
(a tick that raised; a daemon that would not start).  Now the read-back says `unknown` naming the record, and
recovery leaves the decision unresolved (asked again at the next start), neither raising."""

from __future__ import annotations

import yaml

from actuators.actions import SetPoolWeight
from actuators.admin import Result
from actuators.audit import Audit
from actuators.backends.file import FileAdmin
from actuators.backends.redis import RedisAdmin
from actuators.backends.twin import TwinAdmin
from actuators.recovery import read_back, reconcile_unknown, resolve_in_flight
from actuators.stamp import Stamp
from infercast.twin.fleet import build_fleet

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
