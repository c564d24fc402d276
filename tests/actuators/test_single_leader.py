"""Issue 24, item 5: `leader: single` is checked, not assumed.

What the user sees: before, two replicas started with the default `leader: single` both acted, silently.  Now, on a
Redis backend, the second daemon finds the first one's lease in the backend's Redis, stays advisory and says who
holds it; on any backend, a second acting daemon on the same audit trail exits 2 naming the other's pid."""

from __future__ import annotations

import pytest
import yaml

from infercast.actuators.actions import SetPoolWeight
from infercast.actuators.audit import Audit
from infercast.actuators.backends.redis import RedisAdmin
from infercast.actuators.backends.twin import TwinAdmin
from infercast.actuators.daemon_cli import DaemonParts, build_daemon, hold_audit
from infercast.actuators.webhook import Inbox
from infercast.clock import WallClock
from infercast.config import ConfigError, parse_config
from infercast.twin.fleet import build_fleet
from tests.actuators.doubles import Scripted
from tests.conftest import REPO


@pytest.mark.servers
def test_two_daemons_with_leader_single_on_one_redis_backend_exactly_one_acts(
    redis_server, fleet_cfg, tmp_path, monkeypatch
):
    monkeypatch.setenv("INFERCAST_ACTUATOR_TOKEN", "t0k")
    url = f"redis://127.0.0.1:{redis_server.port}/0"
    RedisAdmin.from_url(url, prefix="s").seed(TwinAdmin(build_fleet(fleet_cfg)).observe())
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    daemons = []
    try:
        for name, weight in (("a", 0.5), ("b", 0.9)):
            doc["actuator"] = {
                "backend": {"kind": "redis", "url": url, "prefix": "s"},
                "audit_db": str(tmp_path / f"{name}.db"),  # two audits: the lock on one cannot tell them apart
                "listen": "127.0.0.1:0",
            }
            cfg = parse_config(doc)
            assert cfg.actuator.leader.kind == "single"  # the default
            parts = DaemonParts(cfg, "active", RedisAdmin.from_url(url, prefix="s"), Audit(tmp_path / f"{name}.db"),
                                Inbox(), None, WallClock(), apply_backoff_seconds=0.01)  # fmt: skip
            daemons.append(build_daemon(parts, Scripted(parts, [(SetPoolWeight("v4-main", weight), "forecast")])))
        for _ in range(3):
            reports = [d.run_once("scheduled") for d in daemons]
            assert [r.actions[0].outcome for r in reports] == ["applied", "advisory"]
        observed = RedisAdmin.from_url(url, prefix="s").observe()
        assert observed.pool("v4-main").weight == 0.5  # only the first one's action landed
        lead = daemons[1].elector.try_acquire_or_renew(0.0)
        assert not lead.is_leader and "leader: single, but another daemon" in lead.detail
        daemons[0].stop()  # the first one goes: its lease is released, the second takes over
        assert daemons[1].run_once("scheduled").actions[0].outcome == "applied"
    finally:
        for d in daemons:
            d.stop()


def test_a_second_acting_daemon_on_the_same_audit_is_refused_naming_the_first(tmp_path):
    first = hold_audit(str(tmp_path / "audit.db"))
    try:
        with pytest.raises(ConfigError, match=r"another acting daemon \(pid \d+\) holds .*leader: single means one"):
            hold_audit(str(tmp_path / "audit.db"))
    finally:
        first.close()
    hold_audit(str(tmp_path / "audit.db")).close()  # free again once the first is gone
