"""Fixtures of the actuator tests: the seed's fleet, the twin serving its admin APIs, a real redis-server."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from infercast.config import FleetConfig, load_config
from infercast.servers import Server, start_redis
from infercast.simulator.twin.fleet import build_fleet
from infercast.simulator.twin.surfaces import TwinServer
from tests.conftest import REPO

FLASH_SALE = REPO / "examples" / "flash-sale.yaml"


@pytest.fixture(scope="session")
def fleet_cfg() -> FleetConfig:
    return load_config(FLASH_SALE)


@pytest.fixture
def twin(fleet_cfg) -> Iterator[TwinServer]:
    """The flash-sale twin (not advancing) serving its admin APIs on loopback with the token `s3cret`."""
    srv = TwinServer(build_fleet(fleet_cfg), token="s3cret").start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
def redis_server(tmp_path) -> Iterator[Server]:
    """A real redis-server on a loopback port, stopped at the end (tests may stop it earlier)."""
    srv = start_redis(workdir=tmp_path / "redis")
    try:
        yield srv
    finally:
        srv.close()
