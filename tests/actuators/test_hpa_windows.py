"""The twin's HPA (`infercast.simulator.control.arms.Hpa`) honours both of Kubernetes' stabilisation windows: a fleet
file that sets `scale_up_stabilization_seconds` gets a scale-up that waits for the window's lowest recommendation, as
the real HPA's `behavior.scaleUp.stabilizationWindowSeconds` does."""

from __future__ import annotations

from infercast.config import Autoscaler
from infercast.simulator.control.arms import Hpa
from infercast.simulator.twin.fleet import PoolLive


def _live(kv_short: float, replicas_short: int) -> dict[str, PoolLive]:
    return {
        "v4-short": PoolLive("v4-short", replicas_short, 0, 0.5, kv_short, kv_short, 0),
        "v4-long": PoolLive("v4-long", 5, 0, 0.4, 0.3, 0.3, 0),
    }


def _hpa(**windows: float) -> Hpa:
    a = Autoscaler(pools=("v4-short", "v4-long"), reservoir="v4-standby", **windows)
    return Hpa(a, {"v4-short": 7, "v4-long": 5}, {"v4-short": 11, "v4-long": 9})


def test_by_default_a_scale_up_is_at_once():
    assert _hpa().decide(0.0, _live(0.9, 7), spare=4) == {"v4-short": 11}


def test_a_scale_up_window_waits_until_every_recommendation_in_it_asks_for_more():
    hpa = _hpa(scale_up_stabilization_seconds=30.0)
    # KV 0.9 on 7 nodes asks for 11 (ceil(6.3 / 0.6)); one sync earlier asked for 7: the window's lowest is 7
    assert hpa.decide(0.0, _live(0.6, 7), spare=4) == {}
    assert hpa.decide(15.0, _live(0.9, 7), spare=4) == {}, "a one-sync spike scaled up inside the window"
    assert hpa.decide(30.0, _live(0.9, 7), spare=4) == {}, "the 7 at 0 s is still inside the 30 s window"
    assert hpa.decide(45.0, _live(0.9, 7), spare=4) == {"v4-short": 11}  # 15 s and 30 s both asked for 11
    # a spike that does not last never scales up
    spiky = _hpa(scale_up_stabilization_seconds=30.0)
    for t, kv in ((0.0, 0.6), (15.0, 0.9), (30.0, 0.6), (45.0, 0.9)):
        assert spiky.decide(t, _live(kv, 7), spare=4) == {}, t


def test_the_scale_down_window_is_unchanged_by_a_scale_up_window():
    hpa = _hpa(scale_up_stabilization_seconds=30.0, scale_down_stabilization_seconds=60.0)
    assert hpa.decide(0.0, _live(0.6, 11), spare=0) == {}  # at its target on 11 nodes: asks for 11
    assert hpa.decide(15.0, _live(0.1, 11), spare=0) == {}, "scaled down inside the 60 s window"
    assert hpa.decide(60.0, _live(0.1, 11), spare=0) == {}  # the 11 at 0 s is still in it
    assert hpa.decide(75.0, _live(0.1, 11), spare=0) == {"v4-short": 7}
