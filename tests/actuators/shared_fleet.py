"""The protected flash-sale fleet the controller and audit tests start every test from: built with the seeds' fixes
and advanced 30 s of twin time, once per test run (`tests/shared_cache.py`).  Each test gets its own unpickled copy
(a live fleet it may scale, fail or advance), in the state a fresh build would have: the same nodes, queues and
random generators, so its next steps are the ones a fresh build would take."""

from __future__ import annotations

from pathlib import Path

from infercast.config import FleetConfig, load_config
from infercast.simulator.twin import Fleet, build_fleet
from infercast.simulator.twin.layout import protected_layout
from tests.shared_cache import SharedCache


def protected_flash_sale(shared: SharedCache, fleet_file: Path, seconds: float = 30.0) -> tuple[FleetConfig, Fleet]:
    """(config, fleet): `protected_layout` of the fleet file, built on seed 0, protected, advanced `seconds`."""
    seed = 0

    def compute(_) -> tuple[FleetConfig, Fleet]:
        cfg = protected_layout(load_config(fleet_file))
        fleet = build_fleet(cfg, seed=seed)
        fleet.protect()
        fleet.advance(seconds)
        return cfg, fleet  # pickled together: the fleet's config is the one returned, as in a fresh build

    return shared.get("protected-fleet", (fleet_file, seed, seconds), compute)
