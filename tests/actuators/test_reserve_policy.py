"""The control loop's policy with the reserve owned by the controller (`infercast.actuators.reserve_policy`), pure:
observations and outlooks in, decisions out.  What the operator sees in the audit trail: at the scrape after the
onset of an unannounced surge, the reserve plan's floors and ceilings for both autoscaled pools (every standby node
for the short-context pool) and the whole admission ladder in one step; on a calm fleet, nothing."""

from __future__ import annotations

import math

import pytest

from infercast.actuators.actions import ScalePool, SetAdmission, SetPoolBounds, SetRateLimit
from infercast.actuators.admin import Admission, Observation, PoolState
from infercast.actuators.policy import Outlook
from infercast.actuators.reserve_policy import ReservePolicy, need_of
from infercast.config import load_config
from infercast.simulator.twin.layout import protected_layout


@pytest.fixture()
def cfg(repo_root):
    return protected_layout(load_config(repo_root / "examples" / "flash-sale.yaml"))


def fleet(short: int = 7, long_: int = 5, spare: int = 4) -> Observation:
    pools = (
        PoolState("v4-short", "v4", short, short, 1.0, 0.2, False, 0, 8192, spare, "v4-standby"),
        PoolState("v4-long", "v4", long_, long_, 1.0, 0.2, False, 8193, None, spare, "v4-standby"),
        PoolState("v4-standby", "v4", 0, 0, 1.0, 0.2, True, 0, None, 0),
    )
    return Observation(615.0, pools, Admission(0.8, 24_000, 2.5, 15.0), {"shared": 220.0})


def calm() -> dict[str, Outlook]:
    return {
        "v4-short": Outlook("v4-short", 0.35, 0.36, math.inf, 171.0, 172.0, math.inf, 171.0, 171.0, 170.0, 0.2),
        "v4-long": Outlook("v4-long", 0.5, 0.55, math.inf, 29.0, 30.0, math.inf, 29.0, 29.0, 29.0, 0.2),
    }


def onset() -> dict[str, Outlook]:
    """Seed 0's unannounced sale at 615 s as the loop reads it: arrivals many times their baseline on both pools."""
    why = "arrivals 4000.0 req/s over the last 15 s against 170.0"
    return {
        "v4-short": Outlook("v4-short", 0.5, 0.5, math.inf, 1100.0, 4000.0, 0.0, 200.0, 4000.0, 170.0, 0.2, 39.0,
                            2.6, why),
        "v4-long": Outlook("v4-long", 0.74, 0.8, 30.0, 700.0, 2500.0, 0.0, 36.0, 2500.0, 29.0, 0.2, 18.0, 1.2, why),
    }  # fmt: skip


def test_a_calm_fleet_gets_nothing(cfg):
    assert ReservePolicy(cfg).decide(300.0, fleet(), calm()) == []


def test_the_onset_earmarks_the_reserve_for_the_short_pool_and_tightens_admission_at_once(cfg):
    p = ReservePolicy(cfg)
    out = p.decide(615.0, fleet(), onset())
    actions = [d.action for d in out]
    assert SetPoolBounds("v4-short", 11, 11) in actions
    assert SetPoolBounds("v4-long", 5, 5) in actions
    assert not any(isinstance(a, ScalePool) for a in actions), "the policy scaled past the autoscaler"
    (adm,) = [a for a in actions if isinstance(a, SetAdmission)]
    assert (adm.memory_limit, adm.normal_queue_seconds, adm.low_queue_seconds) == (0.75, 1.0, 0.0)
    for d in out:
        p.note_applied(d, None)
    # applied: the same plan next scrape writes nothing new
    assert not [d for d in p.decide(630.0, fleet(), onset()) if isinstance(d.action, SetPoolBounds)]


def test_at_the_onset_with_no_node_left_every_step_comes_at_once_and_the_shared_bucket_with_it(cfg):
    """The reserve spent and a surge here: the whole admission ladder in one decision, and beside it, with the lever
    on, the shared bucket lowered (the merge of the ladder's steps kept it: before, it took the first decision
    only); off (the default), the ladder alone."""
    on = cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"tightened_shared_rate_factor": 0.8})})
    out = ReservePolicy(on).decide(615.0, fleet(spare=0), onset())
    (adm,) = [d.action for d in out if isinstance(d.action, SetAdmission)]
    assert adm.memory_limit == 0.75
    assert [d.action for d in out if isinstance(d.action, SetRateLimit)] == [SetRateLimit("shared", 176.0)]
    assert not [d for d in ReservePolicy(on).decide(615.0, fleet(), onset()) if isinstance(d.action, SetRateLimit)]
    assert not [
        d for d in ReservePolicy(cfg).decide(615.0, fleet(spare=0), onset()) if isinstance(d.action, SetRateLimit)
    ]


def test_a_plan_refused_by_the_guardrails_is_proposed_again(cfg):
    p = ReservePolicy(cfg)
    first = [d.action for d in p.decide(615.0, fleet(), onset()) if isinstance(d.action, SetPoolBounds)]
    again = [d.action for d in p.decide(630.0, fleet(), onset()) if isinstance(d.action, SetPoolBounds)]
    assert first == again and first


def test_a_forecast_counts_only_within_a_cold_start_and_a_margin(cfg):
    o = Outlook("v4-long", 0.5, 0.95, 250.0, 29.0, 29.0, math.inf, 29.0)
    pool = fleet().pool("v4-long")
    assert need_of(pool, o, 5, lead=120.0).kv_peak == 0.5
    assert need_of(pool, o, 5, lead=300.0).kv_peak == 0.95


def test_a_rolled_back_decision_is_noted_as_the_controller_reports_it(cfg):
    """The control loop reports a rollback with the undo it applied and the time (`controller.py`); the reserve
    policy took only the decision, so the first tightening the guardrails undid (on a ServeGen surge in the control
    bench) stopped the loop with "note_rolled_back() takes 2 positional arguments but 4 were given".  Now a rolled
    back tightening holds its settings for the relax hold, and a rolled back plan is written again."""
    p = ReservePolicy(cfg)
    out = p.decide(615.0, fleet(), onset())
    for d in out:
        p.note_applied(d, None)
    (adm,) = [d for d in out if isinstance(d.action, SetAdmission)]
    p.note_rolled_back(adm, SetAdmission(memory_limit=0.8, normal_queue_seconds=2.5, low_queue_seconds=15.0), 700.0)
    assert p.held, "a rolled back tightening holds nothing"
    (bounds,) = [d for d in out if d.action == SetPoolBounds("v4-short", 11, 11)]
    p.note_rolled_back(bounds, None, 700.0)
    again = [d.action for d in p.decide(715.0, fleet(), onset()) if isinstance(d.action, SetPoolBounds)]
    assert SetPoolBounds("v4-short", 11, 11) in again
