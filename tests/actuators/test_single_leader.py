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
from infercast.actuators.daemon_cli import DaemonParts, build_daemon, hold_audit
from infercast.actuators.webhook import Inbox
from infercast.clock import WallClock
from infercast.config import ConfigError, parse_config
from infercast.simulator.twin.admin import TwinAdmin
from infercast.simulator.twin.fleet import build_fleet
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


def _spellings(tmp_path, monkeypatch) -> list[str]:
    """The one audit trail, named five ways: absolute, relative to the cwd, with `..`, through a symlink to the file
    and through a symlink to its directory."""
    (tmp_path / "data").mkdir()
    audit = tmp_path / "data" / "audit.db"
    (tmp_path / "link.db").symlink_to(audit)
    (tmp_path / "dir-link").symlink_to(tmp_path / "data")
    monkeypatch.chdir(tmp_path)
    return [str(audit), "data/audit.db", str(tmp_path / "data" / ".." / "data" / "audit.db"), "link.db",
            "dir-link/audit.db"]  # fmt: skip


def test_the_audit_trail_named_any_way_has_one_acting_daemon(tmp_path, monkeypatch):
    """Issue 36 item 3.  Before, what the user saw: two `leader: single` daemons, one given `audit_db: link.db` (a
    symlink to the other's audit file), both acted (`infercast_actuator_active` 1 on both, 4 actions each in 7 s):
    each locked `<path as written>.lock`.  Now the second is refused naming the first, whichever two spellings."""
    names = _spellings(tmp_path, monkeypatch)
    for first_name in names:
        first = hold_audit(first_name)
        try:
            for second in names:
                with pytest.raises(ConfigError, match=r"another acting daemon \(pid \d+\) holds"):
                    hold_audit(second)
        finally:
            first.close()
    hold_audit("link.db").close()  # free again once the first is gone


def test_a_bind_mount_of_the_audit_file_finds_the_same_lock(tmp_path):
    """Issue 36 item 3, a bind mount (another name for the same inode, which no resolving of the path can tell):
    the audit file itself is locked, so the second daemon is refused.  Needs root and `mount --bind` (skipped
    otherwise, saying so); a hard link, the same inode by another name, is checked everywhere."""
    import os
    import shutil
    import subprocess

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    audit = tmp_path / "a" / "audit.db"
    audit.write_bytes(b"")
    os.link(audit, tmp_path / "b" / "hard.db")
    first = hold_audit(str(audit))
    try:
        with pytest.raises(ConfigError, match="another acting daemon"):
            hold_audit(str(tmp_path / "b" / "hard.db"))
    finally:
        first.close()
    target = tmp_path / "b" / "mounted.db"
    target.write_bytes(b"")
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a bind mount needs root and mount(8)")
    done = subprocess.run(["mount", "--bind", str(audit), str(target)], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        pytest.skip(f"mount --bind is not allowed here: {done.stderr.strip()[:120]}")
    try:
        first = hold_audit(str(audit))
        try:
            with pytest.raises(ConfigError, match="another acting daemon"):
                hold_audit(str(target))
        finally:
            first.close()
    finally:
        subprocess.run(["umount", str(target)], check=False)


def test_infercast_actuator_refuses_to_start_a_second_acting_daemon_through_a_symlink(tmp_path, monkeypatch):
    """Issue 36 item 3 through the command itself: with one daemon holding the trail (`audit_db` absolute), a second
    `infercast actuator --mode active` whose fleet file names the trail through a symlink stops before acting, rc 2
    (ConfigError) naming the first."""
    import argparse

    from infercast.actuators.daemon_cli import run

    names = _spellings(tmp_path, monkeypatch)
    doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
    doc["actuator"] = {"backend": {"kind": "file", "path": str(tmp_path / "fleet.json")}, "audit_db": "link.db",
                       "listen": "127.0.0.1:0"}  # fmt: skip
    (tmp_path / "fleet.yaml").write_text(yaml.safe_dump(doc))
    first = hold_audit(names[0])
    try:
        with pytest.raises(ConfigError, match=r"another acting daemon \(pid \d+\) holds link.db"):
            run(argparse.Namespace(config=str(tmp_path / "fleet.yaml"), mode="active", tick=None))
    finally:
        first.close()


def test_of_two_infercast_actuator_processes_on_one_trail_named_two_ways_exactly_one_acts(tmp_path):
    """Issue 36 item 3 end to end: two `infercast actuator --mode active` processes, `leader: single`, on a file
    backend, the first naming the audit trail by its absolute path and the second through a symlink to the file.
    Before: both ran and acted (`infercast_actuator_active` 1 on both; here the second ran until killed).  Now the
    second exits 2 naming the first's pid, and the first keeps running."""
    import os
    import subprocess
    import sys
    import time

    (tmp_path / "data").mkdir()
    (tmp_path / "link.db").symlink_to(tmp_path / "data" / "audit.db")
    paths = []
    for name, audit in (("first", tmp_path / "data" / "audit.db"), ("second", tmp_path / "link.db")):
        doc = yaml.safe_load((REPO / "examples" / "flash-sale.yaml").read_text())
        doc["actuator"] = {"backend": {"kind": "file", "path": str(tmp_path / "router.json")},
                           "audit_db": str(audit), "listen": "127.0.0.1:0"}  # fmt: skip
        paths.append(tmp_path / f"{name}.yaml")
        paths[-1].write_text(yaml.safe_dump(doc))
    env = {**os.environ, "INFERCAST_ACTUATOR_TOKEN": "t0k"}
    cmd = [sys.executable, "-m", "infercast.tools.cli", "actuator", "--mode", "active", "--config"]
    first = subprocess.Popen([*cmd, str(paths[0])], cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        lock = tmp_path / "data" / "audit.db.lock"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (lock.exists() and lock.read_text().strip() == str(first.pid)):
            assert first.poll() is None, first.stderr.read()[-2000:]
            time.sleep(0.2)
        try:
            second = subprocess.run([*cmd, str(paths[1])], cwd=REPO, env=env, capture_output=True, text=True,
                                    timeout=90, check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise AssertionError("the second daemon kept running: two acting daemons on one audit trail") from None
        assert second.returncode == 2, second.stderr[-2000:]
        assert f"another acting daemon (pid {first.pid}) holds" in second.stderr
        assert "Traceback" not in second.stderr
        assert first.poll() is None, "the first one still runs"
    finally:
        first.terminate()
        first.wait(timeout=60)


def test_an_audit_trail_in_a_directory_not_made_yet_is_locked_and_one_that_cannot_be_is_a_config_error(tmp_path):
    """The lock is taken before the audit trail makes its directory: it makes it too, and a place it cannot write
    is a ConfigError naming `actuator.audit_db` (rc 2), not a traceback."""
    held = hold_audit(str(tmp_path / "new" / "dir" / "audit.db"))
    held.close()
    (tmp_path / "file").write_text("")
    with pytest.raises(ConfigError, match=r"cannot lock the audit trail .* \(actuator.audit_db\)"):
        hold_audit(str(tmp_path / "file" / "audit.db"))
