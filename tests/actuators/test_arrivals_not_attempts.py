"""The arrivals the control loop reads (`StoreInputs._first_signals`) are requests, not attempts: a client's retry
is counted by the router as a `retried` outcome of its failed attempt, then again as whatever its next attempt
ends as.  Counting both read a retry storm (a gateway bucket refusing a burst, each refusal retried) as a surge of
new demand: on the Mooncake surge the reserve plan earmarked every standby node minutes before the surge came."""

from __future__ import annotations

import numpy as np

from infercast.actuators.inputs import StoreInputs
from infercast.catalog import ROUTER_REQUESTS_TOTAL
from infercast.config import load_config
from infercast.store.memory import MemoryStore
from tests.conftest import REPO

STEP, NOW = 15.0, 6000.0


def _store(retried_last: float) -> MemoryStore:
    """Ten calm minutes of 10 answered requests per second, then one interval in which `retried_last` attempts per
    second fail and are retried (the answered rate unchanged)."""
    store = MemoryStore()
    ok = retried = 0.0
    for i, t in enumerate(np.arange(NOW - 600.0, NOW + 1.0, STEP)):
        if i:
            ok += 10.0 * STEP
            retried += retried_last * STEP if t == NOW else 0.0
        store.write(ROUTER_REQUESTS_TOTAL, {"pool": "v4-main", "outcome": "ok", "priority": "urgent"}, t, ok)
        store.write(ROUTER_REQUESTS_TOTAL, {"pool": "v4-main", "outcome": "retried", "priority": "urgent"}, t, retried)
    return store


def test_a_retry_storm_is_not_read_as_new_arrivals_nor_as_an_onset():
    """What the loop sees: 10 req/s arriving and no onset, though the router counted 110 attempts a second (before:
    110 req/s and "arrivals 110.0 req/s over the last 15 s against 10.0")."""
    cfg = load_config(REPO / "examples" / "flash-sale.yaml")
    first = StoreInputs(_store(retried_last=100.0), cfg, STEP)._first_signals("v4-main", NOW)
    assert first["arrivals_rps"] == 10.0
    assert first["onset"] == ""


def test_requests_that_end_refused_still_count_as_arrivals():
    """A refusal the client gives up on (`rejected`) is demand the fleet did not serve: it stays in the arrivals."""
    cfg = load_config(REPO / "examples" / "flash-sale.yaml")
    store = _store(retried_last=0.0)
    for t in np.arange(NOW - 600.0, NOW + 1.0, STEP):
        store.write(ROUTER_REQUESTS_TOTAL, {"pool": "v4-main", "outcome": "rejected", "priority": "urgent"}, t,
                    100.0 * STEP if t == NOW else 0.0)  # fmt: skip
    first = StoreInputs(store, cfg, STEP)._first_signals("v4-main", NOW)
    assert first["arrivals_rps"] == 110.0
    assert "arrivals 110.0 req/s" in first["onset"]
