"""The file backend: every change an atomic replace a hot-reloading router can read at any moment, a corrupt file
refused with a clear error and left byte for byte as it was, idempotency keys and fencing tokens kept in the file."""

from __future__ import annotations

import json
import os
import threading

import pytest
import yaml

from infercast.actuators.actions import (
    PrewarmPool,
    ScalePool,
    SetAdmission,
    SetBreakerThreshold,
    SetPoolWeight,
    SetRateLimit,
)
from infercast.actuators.admin import ActionRefused, BackendError, apply_with_retries
from infercast.actuators.backends.file import FileAdmin
from infercast.actuators.stamp import Stamp


def test_a_missing_file_reads_as_the_fleet_file_and_the_first_apply_creates_it(tmp_path, fleet_cfg):
    admin = FileAdmin(tmp_path / "router.yaml", fleet_cfg)
    obs = admin.observe()
    assert obs.pool("v4-main").weight == 1.0 and obs.pool("v4-main").breaker_threshold_seconds == 0.2
    assert obs.pool("v4-standby").standby is True and obs.rate_limits["shared"] == 220.0
    res = admin.apply(SetPoolWeight("v4-main", 0.5))
    assert res.previous == SetPoolWeight("v4-main", 1.0)
    text = (tmp_path / "router.yaml").read_text()
    assert text.startswith("# Written by infercast actuator")
    doc = yaml.safe_load(text)
    assert doc["pools"] == {"v4-main": {"weight": 0.5}} and doc["infercast"]["revision"] == 1


def test_changes_round_trip_and_keep_what_the_router_owns(tmp_path, fleet_cfg):
    path = tmp_path / "router.json"
    path.write_text(json.dumps({"listen": ":8080", "pools": {"v4-main": {"upstream": "10.0.0.1:8000"}}}))
    os.chmod(path, 0o640)
    admin = FileAdmin(path, fleet_cfg)
    assert admin.apply(SetBreakerThreshold("v4-main", 0.4)).previous == SetBreakerThreshold("v4-main", 0.2)
    assert admin.apply(ScalePool("v4-main", 14)).previous == ScalePool("v4-main", 12)
    assert admin.apply(PrewarmPool("v4-standby")).previous is None
    assert admin.apply(SetAdmission(max_context_tokens=16000)).previous is None
    assert admin.apply(SetAdmission(max_context_tokens=8000)).previous == SetAdmission(max_context_tokens=16000)
    assert admin.apply(SetRateLimit("shared", 300.0, 60.0)).previous == SetRateLimit("shared", 220.0, None)
    doc = json.loads(path.read_text())
    assert doc["listen"] == ":8080" and doc["pools"]["v4-main"]["upstream"] == "10.0.0.1:8000"
    assert oct(path.stat().st_mode & 0o777) == "0o640"  # the router's permissions survive the replace
    obs = admin.observe()
    assert obs.pool("v4-main").replicas == 14 and obs.pool("v4-standby").standby is False
    assert obs.admission.max_context_tokens == 8000 and obs.rate_limits["shared"] == 300.0
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # no temporary file left behind


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("pools: {v4-main: {weight: [1}\n", "not valid YAML"),
        ("- just\n- a list\n", "expected a mapping at the top level, got list"),
        ("pools: {v4-main: {weight: heavy}}\n", "pools.v4-main.weight: expected float, got 'heavy'"),
        ("admission: {memory_limit: -1}\n", "admission.memory_limit: expected a number, got -1"),
        ("infercast: {fencing_token: x}\n", "infercast.fencing_token: expected an integer"),
        # before: `int(meta["revision"])` in apply raised ValueError / TypeError / OverflowError out of the backend
        ("infercast: {revision: x}\n", r"infercast.revision: expected an integer, 0 or more, got 'x'"),
        ("infercast: {revision: [1]}\n", r"infercast.revision: expected an integer, 0 or more, got \[1\]"),
        ("infercast: {revision: .nan}\n", "infercast.revision: expected an integer, 0 or more, got nan"),
        ("infercast: {revision: .inf}\n", "infercast.revision: expected an integer, 0 or more, got inf"),
        ("infercast: {revision: null}\n", "infercast.revision: expected an integer, 0 or more, got None"),
    ],
)
def test_a_corrupt_file_is_refused_and_left_as_it_was(tmp_path, fleet_cfg, content, message):
    path = tmp_path / "router.yaml"
    path.write_text(content)
    before = path.read_bytes()
    admin = FileAdmin(path, fleet_cfg)
    with pytest.raises(BackendError, match=message) as e:
        admin.apply(SetPoolWeight("v4-main", 0.5))
    assert str(path) in str(e.value) and "left as it is" in str(e.value)
    res = apply_with_retries(admin, SetPoolWeight("v4-main", 0.5), sleep=lambda s: None)
    assert res.status == "failed" and message.split(":")[0] in res.detail
    assert path.read_bytes() == before
    with pytest.raises(BackendError, match=message):
        admin.observe()


def test_unknown_pools_and_lanes_are_refused(tmp_path, fleet_cfg):
    admin = FileAdmin(tmp_path / "r.yaml", fleet_cfg)
    with pytest.raises(ActionRefused, match="the fleet file has no pool 'nope'"):
        admin.apply(SetPoolWeight("nope", 1.0))
    with pytest.raises(ActionRefused, match="no quota lane 'vip'"):
        admin.apply(SetRateLimit("vip", 5.0))
    assert not (tmp_path / "r.yaml").exists()


def test_idempotency_keys_and_fencing_tokens_live_in_the_file(tmp_path, fleet_cfg):
    admin = FileAdmin(tmp_path / "r.yaml", fleet_cfg, keep_keys=2)
    admin.apply(SetPoolWeight("v4-main", 0.5), stamp=Stamp(key="a", fencing_token=4))
    again = admin.apply(SetPoolWeight("v4-main", 0.5), stamp=Stamp(key="a", fencing_token=4))
    assert "replayed" in again.detail and again.previous == SetPoolWeight("v4-main", 1.0)
    assert yaml.safe_load((tmp_path / "r.yaml").read_text())["infercast"]["revision"] == 1
    with pytest.raises(ActionRefused, match=r"stale fencing token 3 \(a newer leader holds 4\)"):
        admin.apply(SetPoolWeight("v4-main", 0.1), stamp=Stamp(key="b", fencing_token=3))
    admin.apply(SetPoolWeight("v4-main", 0.2), stamp=Stamp(key="c"))
    admin.apply(SetPoolWeight("v4-main", 0.3), stamp=Stamp(key="d"))
    assert list(yaml.safe_load((tmp_path / "r.yaml").read_text())["infercast"]["applied"]) == ["c", "d"]
    assert admin.lookup("d").previous == SetPoolWeight("v4-main", 0.2) and admin.lookup("a") is None


def test_a_reader_never_sees_half_a_document_while_writers_race(tmp_path, fleet_cfg):
    """Two writers apply 100 changes each while a reader parses the file in a loop: every read is a whole document
    (atomic replace), and no change is lost (the lock serialises read-modify-write)."""
    path = tmp_path / "r.yaml"
    admins = [FileAdmin(path, fleet_cfg), FileAdmin(path, fleet_cfg)]
    admins[0].apply(SetPoolWeight("v4-main", 1.0))
    bad: list[str] = []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                doc = yaml.safe_load(path.read_text())
                assert isinstance(doc["pools"]["v4-main"]["weight"], float)
            except Exception as e:
                bad.append(repr(e))

    def write(admin: FileAdmin, pool: str) -> None:
        for i in range(100):
            admin.apply(SetBreakerThreshold(pool, 0.1 + i / 1000))

    reader = threading.Thread(target=read)
    reader.start()
    writers = [
        threading.Thread(target=write, args=(a, p)) for a, p in zip(admins, ("v4-main", "v3.5-fallback"), strict=True)
    ]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    stop.set()
    reader.join()
    assert not bad
    assert yaml.safe_load(path.read_text())["infercast"]["revision"] == 201
