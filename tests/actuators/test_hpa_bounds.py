"""The twin's HPA honours the floors and ceilings the controller's reserve plan writes (`set_pool_bounds`), as a
Kubernetes HPA honours `minReplicas` / `maxReplicas`: one model of the autoscaler.  What the user sees: with the
long pool's ceiling at its own nodes, the autoscaler's first reaction to a surge starts all four standby nodes for
the short pool, where before it split them two and two."""

from __future__ import annotations

import pytest

from infercast.actuators.actions import ActionError, ScalePool, SetPoolBounds, parse_action
from infercast.config import Autoscaler
from infercast.simulator.control.arms import Hpa
from infercast.simulator.twin.fleet import PoolLive


def _live(short: int = 7, long: int = 5, kv: float = 0.95, waiting: int = 40) -> dict[str, PoolLive]:
    return {
        "v4-short": PoolLive("v4-short", short, 0, 0.9, kv, kv, waiting),
        "v4-long": PoolLive("v4-long", long, 0, 0.9, kv, kv, waiting),
    }


def _hpa() -> Hpa:
    a = Autoscaler(pools=("v4-short", "v4-long"), reservoir="v4-standby")
    return Hpa(a, {"v4-short": 7, "v4-long": 5}, {"v4-short": 11, "v4-long": 9})


def test_without_a_plan_the_autoscaler_splits_the_reserve_by_its_asks():
    assert _hpa().decide(615.0, _live(), spare=4) == {"v4-short": 9, "v4-long": 7}


def test_a_ceiling_sends_the_reserve_where_the_plan_puts_it():
    hpa = _hpa()
    hpa.set_bounds("v4-short", 11, 11)
    hpa.set_bounds("v4-long", 5, 5)
    assert hpa.decide(615.0, _live(), spare=4) == {"v4-short": 11}


def test_a_floor_is_granted_before_a_proportional_share():
    hpa = _hpa()
    hpa.set_bounds("v4-short", 10, 11)  # three earmarked for short, one free for either
    hpa.set_bounds("v4-long", 5, 6)
    got = hpa.decide(615.0, _live(), spare=4)
    short, long = got.get("v4-short", 7), got.get("v4-long", 5)
    assert short >= 10, "the floor's three nodes were shared away"
    assert (short - 7) + (long - 5) == 4 and long <= 6


def test_floors_beyond_the_reserve_are_shared_fairly_as_plain_replica_counts():
    """Two floors that together ask for more than the reservoir holds (each pool's own floor raised while another
    earmark still holds nodes) are shared max-min fair, and the counts are plain ints: a numpy integer from the
    fair share made `ScalePool` refuse the autoscaler's decision ("replicas: expected an integer 0-10000, got
    np.int64(15)") and the run stopped."""
    hpa = _hpa()
    hpa.set_bounds("v4-short", 11, 11)
    hpa.set_bounds("v4-long", 9, 9)
    got = hpa.decide(615.0, _live(), spare=4)
    assert got == {"v4-short": 9, "v4-long": 7}
    assert all(type(n) is int for n in got.values())
    for pool, n in got.items():
        ScalePool(pool, n)  # what the arm applies: accepted


def test_a_lowered_ceiling_scales_down_at_once_past_the_scale_down_window():
    hpa = _hpa()
    assert hpa.decide(0.0, _live(long=7, kv=0.6, waiting=0), spare=2) == {}
    # the 300 s scale-down window would hold 7; the ceiling does not wait for it
    assert hpa.decide(15.0, _live(long=7, kv=0.1, waiting=0), spare=2) == {}
    hpa.set_bounds("v4-long", 5, 5)
    assert hpa.decide(30.0, _live(long=7, kv=0.6, waiting=0), spare=2) == {"v4-long": 5}


def test_bounds_are_checked():
    with pytest.raises(ActionError, match="ceiling"):
        SetPoolBounds("p", 5, 4)
    assert parse_action({"kind": "set_pool_bounds", "pool": "p", "floor": 1, "ceiling": 3}) == SetPoolBounds("p", 1, 3)
    with pytest.raises(KeyError, match="does not scale"):
        _hpa().set_bounds("v3.5-fallback", 0, 1)
