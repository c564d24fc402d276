"""The fleet file's `actuator:` section: advisory by default, each backend and leader kind, and a bad key is a
ConfigError naming it (what `infercast actuator` and `infercast check` print) before anything starts."""

from __future__ import annotations

import pytest
import yaml

from infercast.actuators.backends import build_backend
from infercast.actuators.backends.file import FileAdmin
from infercast.actuators.backends.redis import RedisAdmin
from infercast.actuators.backends.router_http import HttpAdmin
from infercast.actuators.leader import RedisLease, SingleReplica, build_elector
from infercast.config import ConfigError, parse_config
from tests.actuators.conftest import FLASH_SALE


def fleet(**actuator):
    doc = yaml.safe_load(FLASH_SALE.read_text())
    doc["actuator"] = actuator
    return parse_config(doc)


def test_the_default_is_advisory_with_no_backend_and_a_single_replica():
    a = parse_config(yaml.safe_load(FLASH_SALE.read_text())).actuator
    assert a.mode == "advisory" and a.backend is None and a.leader.kind == "single"
    assert a.listen == "127.0.0.1:9402" and a.webhook.path == "/api/v1/alerts"
    with pytest.raises(ConfigError, match=r"actuator\.backend: required to run the actuator"):
        build_backend(parse_config(yaml.safe_load(FLASH_SALE.read_text())))


def test_each_backend_kind_builds_its_backend(tmp_path, monkeypatch):
    monkeypatch.setenv("INFERCAST_ROUTER_TOKEN", "tok")
    http = build_backend(fleet(backend={"kind": "http", "url": "http://127.0.0.1:9410"}))
    assert isinstance(http, HttpAdmin) and http.token == "tok" and http.timeout == 2.0
    r = build_backend(fleet(backend={"kind": "redis", "url": "redis://127.0.0.1:1/0", "prefix": "{ic}"}))
    assert isinstance(r, RedisAdmin) and r.k("pools") == "{ic}:pools"
    f = build_backend(fleet(backend={"kind": "file", "path": str(tmp_path / "r.json")}))
    assert isinstance(f, FileAdmin) and f.fmt == "json"
    assert isinstance(build_elector(fleet().actuator.leader), SingleReplica)
    lease = build_elector(
        fleet(leader={"kind": "redis", "url": "redis://127.0.0.1:1/0", "identity": "a"}).actuator.leader
    )
    assert isinstance(lease, RedisLease) and lease.identity == "a" and lease.lease_ms == 15000


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"mode": "yolo"}, "actuator.mode: Input should be 'advisory' or 'active'"),
        ({"backend": {"kind": "kafka"}}, "actuator.backend: Input tag 'kafka' found using 'kind'"),
        ({"backend": {"kind": "http"}}, "actuator.backend.http.url: Field required"),
        ({"backend": {"kind": "http", "url": "ftp://x"}}, "actuator.backend.http.url: must start with http://"),
        ({"backend": {"kind": "file", "path": "x", "fmt": "xml"}}, "actuator.backend.file.fmt: unknown key"),
        ({"leader": {"kind": "redis", "lease_seconds": 0.2}}, "actuator.leader.redis.lease_seconds: Input should be"),
        ({"listen": "9402"}, "actuator.listen: expected host:port, got '9402'"),
        ({"webhook": {"token_env": "not a name"}}, "actuator.webhook.token_env: String should match pattern"),
        ({"interval_seconds": 0}, "actuator.interval_seconds: Input should be greater than 0"),
        (  # the two loops were merged: the old keys are refused with the key to write instead
            {"fast_interval_seconds": 5},
            "actuator.fast_interval_seconds: no longer a field: the fast and predictive loops ran the same tick; "
            "set actuator.interval_seconds instead",
        ),
        ({"predictive_interval_seconds": 60}, "actuator.predictive_interval_seconds: no longer a field"),
        ({"apply_attempts": 50}, "actuator.apply_attempts: Input should be less than or equal to 10"),
    ],
)
def test_a_bad_key_is_named(section, message):
    with pytest.raises(ConfigError) as e:
        fleet(**section)
    assert message in str(e.value)
