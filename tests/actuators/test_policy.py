"""The predictive policy, tick by scripted tick: what it does a lead time ahead, in bounded steps, and how it relaxes.

Pure: an `Observation` of the fleet and an `Outlook` per pool in, decisions out; no twin, no clock."""

from __future__ import annotations

import math

import pytest

from infercast.actuators.actions import ScalePool, SetAdmission, SetPoolWeight, SetRateLimit
from infercast.actuators.admin import Admission, Observation, PoolState
from infercast.actuators.policy import Outlook, PredictivePolicy
from infercast.config import load_config


@pytest.fixture()
def cfg(repo_root):
    return load_config(repo_root / "examples" / "flash-sale.yaml")


def fleet(short=7, long_=5, spare=4, admission=None, mixed=False):
    pools = (
        PoolState("v4-short", "v4", short, short, 1.0, 0.2, False, 0, None if mixed else 8192, spare),
        PoolState("v4-long", "v4", long_, long_, 1.0, 0.2, False, 8193, None, spare),
        PoolState("v4-standby", "v4", 0, 0, 1.0, 0.2, True, 0, None, 0),
    )
    return Observation(0.0, pools, admission or Admission(0.8, 24_000, 2.5, 15.0), {"shared": 220.0})


def calm(pool, kv=0.4):
    return Outlook(pool, kv, kv)


def breach(pool, eta, peak=0.95, kv=0.6):
    return Outlook(pool, kv, peak, eta)


def applied(p, out):
    """Tell the policy its decisions were applied, as the control loop does for each one the guardrails allow and
    the backend applies; returns them."""
    for d in out:
        p.note_applied(d, None)
    return out


def test_nothing_to_do_on_a_calm_fleet(cfg):
    p = PredictivePolicy(cfg)
    assert p.decide(0.0, fleet(), {"v4-short": calm("v4-short"), "v4-long": calm("v4-long")}) == []


def test_prewarms_a_cold_start_ahead_and_tightens_only_when_close(cfg):
    p = PredictivePolicy(cfg)
    # a breach forecast 100 s out: within a cold start (90 s) + margin (30 s) -> pre-warm, not yet tighten (60 s)
    out = p.decide(0.0, fleet(), {"v4-short": calm("v4-short"), "v4-long": breach("v4-long", 100.0)})
    assert [type(d.action) for d in out] == [ScalePool]
    a = out[0].action
    # 5 replicas heading for 0.95 at 0.6 per replica: ceil(5 * 0.95 / 0.6) = 8, a step of at most 4, 4 spare
    assert a == ScalePool("v4-long", 8)
    assert "crosses 0.75 in 100 s" in out[0].reason and out[0].intent == "protect"
    assert p.floors() == {}  # a floor only once the loop says it was applied
    p.note_applied(out[0], None)
    assert p.floors() == {"v4-long": 8}
    # 40 s later it is 60 s out: tighten one step (queues; no context step for a long-only pool)
    out = p.decide(40.0, fleet(long_=8, spare=1), {"v4-short": calm("v4-short"), "v4-long": breach("v4-long", 60.0)})
    adm = [d.action for d in out if isinstance(d.action, SetAdmission)]
    assert adm == [SetAdmission(normal_queue_seconds=1.0, low_queue_seconds=0.0)]


def test_tightens_the_context_a_step_at_a_time_where_short_and_long_share_a_pool(cfg):
    p = PredictivePolicy(cfg)
    f = fleet(mixed=True)
    o = {"v4-short": breach("v4-short", 30.0, kv=0.7), "v4-long": calm("v4-long")}
    steps = [applied(p, p.decide(float(t), f, o)) for t in (0, 15, 30, 45)]
    adm = [next(d.action for d in s if isinstance(d.action, SetAdmission)) for s in steps[:3]]
    assert adm[0].max_context_tokens == 16_000 and adm[1] == SetAdmission(max_context_tokens=8192)
    # the memory threshold last, since it is KV usage (not a traffic peak) that is forecast to cross
    assert adm[2] == SetAdmission(memory_limit=0.75)
    assert not any(isinstance(d.action, SetAdmission) for d in steps[3]), "no step beyond the last"


def test_a_traffic_peak_announced_by_the_forecast_acts_like_a_breach_but_keeps_memory(cfg):
    p = PredictivePolicy(cfg)
    peak = Outlook("v4-short", 0.3, 0.35, math.inf, rps_now=100.0, rps_upper_peak=400.0, rps_surge_eta_seconds=45.0)
    out = p.decide(0.0, fleet(mixed=True), {"v4-short": peak, "v4-long": calm("v4-long")})
    kinds = {type(d.action) for d in out}
    assert kinds == {ScalePool, SetAdmission}  # nodes left to start: the shared bucket stays
    assert "traffic forecast peaks at 400.0 req/s against 100.0 now (the surge due in 45 s)" in out[0].reason
    # a surge the forecast puts at now reads as such, not as "from 0 s"
    now = Outlook("v4-short", 0.3, 0.35, math.inf, rps_now=100.0, rps_upper_peak=400.0, rps_surge_eta_seconds=0.0)
    again = PredictivePolicy(cfg).decide(0.0, fleet(mixed=True), {"v4-short": now, "v4-long": calm("v4-long")})
    assert "(the surge due now)" in again[0].reason
    # heading for 0.3 x 4 = 1.2 on 7 replicas: ceil(7 * 1.2 / 0.6) = 14, a step of 4 at most
    assert next(d.action for d in out if isinstance(d.action, ScalePool)) == ScalePool("v4-short", 11)
    assert all(d.action.memory_limit is None for d in out if isinstance(d.action, SetAdmission))


def test_the_memory_step_joins_a_ladder_built_on_a_traffic_peak_once_kv_is_forecast_to_cross_with_no_node_left(cfg):
    """A surge seen first in traffic builds the ladder without the memory step (a peak need not fill KV); when KV
    usage is then forecast to cross and no node is left to start, the memory step is added after the steps already
    taken, not lost until the policy relaxes (on the unannounced sale the memory step came only where the KV
    forecast crossed at the first step).  While nodes are left, they come first (the step costs capacity)."""
    p = PredictivePolicy(cfg)
    f = fleet()
    peak = Outlook("v4-short", 0.3, 0.35, math.inf, rps_now=100.0, rps_upper_peak=400.0, rps_surge_eta_seconds=45.0)
    first = applied(p, p.decide(0.0, f, {"v4-short": peak, "v4-long": calm("v4-long")}))
    assert [d.action for d in first if isinstance(d.action, SetAdmission)] == [
        SetAdmission(normal_queue_seconds=1.0, low_queue_seconds=0.0)
    ]
    # still only a traffic peak a cooldown later: nothing more to tighten
    later = p.decide(300.0, f, {"v4-short": peak, "v4-long": calm("v4-long")})
    assert not any(isinstance(d.action, SetAdmission) for d in later)
    # KV usage is forecast to cross within the tightening lead, with nodes left to start: no memory step
    full = Outlook("v4-short", 0.7, 0.95, 30.0, rps_now=400.0, rps_upper_peak=400.0, rps_surge_eta_seconds=0.0)
    spared = p.decide(600.0, f, {"v4-short": full, "v4-long": calm("v4-long")})
    assert not any(isinstance(d.action, SetAdmission) for d in spared)
    # and once the reservoir is spent: the memory step, and it is the last
    spent = fleet(short=11, spare=0)
    step = applied(p, p.decide(900.0, spent, {"v4-short": full, "v4-long": calm("v4-long")}))
    assert [d.action for d in step if isinstance(d.action, SetAdmission)] == [SetAdmission(memory_limit=0.75)]
    again = p.decide(1200.0, spent, {"v4-short": full, "v4-long": calm("v4-long")})
    assert not any(isinstance(d.action, SetAdmission) for d in again)


def test_shifts_weight_only_onto_a_sibling_with_forecast_headroom(cfg):
    p = PredictivePolicy(cfg)
    pools = (
        PoolState("a", "v4", 4, 4, 1.0, 0.2, False, 0, None, 0),
        PoolState("b", "v4", 4, 4, 1.0, 0.2, False, 0, None, 0),
    )
    f = Observation(0.0, pools, Admission(0.8, 24_000, 2.5, 15.0))
    out = p.decide(0.0, f, {"a": breach("a", 100.0, kv=0.7), "b": calm("b", 0.35)})
    weights = {d.action.pool: d.action.weight for d in out if isinstance(d.action, SetPoolWeight)}
    # b heads for 0.35: headroom (0.75 - 0.35) / 0.35 = 1.14 of its weight; at most half of a's weight moves
    assert weights == {"a": 0.5, "b": 1.5}
    assert all(d.intent == "shift" for d in out if isinstance(d.action, SetPoolWeight))
    # a sibling without headroom gets nothing
    p2 = PredictivePolicy(cfg)
    out = p2.decide(0.0, f, {"a": breach("a", 100.0, kv=0.7), "b": calm("b", 0.72)})
    assert not any(isinstance(d.action, SetPoolWeight) for d in out)


def test_relaxes_one_step_at_a_time_after_a_calm_hold(cfg):
    p = PredictivePolicy(cfg)
    f = fleet(mixed=True)
    hot = {"v4-short": breach("v4-short", 30.0, kv=0.7), "v4-long": calm("v4-long")}
    for t in (0, 15):
        applied(p, p.decide(float(t), f, hot))
    assert p.state.level == 2
    quiet = {"v4-short": calm("v4-short", 0.5), "v4-long": calm("v4-long")}
    assert p.decide(30.0, f, quiet) == []  # the hold starts
    assert p.decide(60.0, f, quiet) == []
    # 60 s of calm, but the second step (applied at 15 s) has not stood the fleet's dwell (300 s: the autoscaler's
    # scale-down window): relaxed now and tightened again, it would flap
    assert p.dwell == 300.0
    assert p.decide(90.0, f, quiet) == [] and p.decide(300.0, f, quiet) == []
    back = applied(p, p.decide(315.0, f, quiet))  # one step back (the first level's settings)
    assert [d.action for d in back] == [SetAdmission(memory_limit=0.8, max_context_tokens=16_000,
                                                     normal_queue_seconds=1.0, low_queue_seconds=0.0)]  # fmt: skip
    assert back[0].intent == "relax"
    assert p.decide(345.0, f, quiet) == [], "the next step waits another hold"
    last = applied(p, p.decide(375.0, f, quiet))
    assert [d.action for d in last] == [SetAdmission(memory_limit=0.8, max_context_tokens=24_000,
                                                     normal_queue_seconds=2.5, low_queue_seconds=15.0)]  # fmt: skip
    # a warning inside the hold resets it
    p.decide(385.0, f, hot)
    assert p.state.calm_since is None


def test_a_step_tightened_late_is_not_relaxed_within_the_dwell(cfg):
    """What the `scheduled` arm did on both sales: the memory step taken late in the sale, relaxed after a minute's
    calm as the sale ebbed, and taken again inside 300 s: a flap (tighten, relax, tighten within the autoscaler's
    scale-down window), 1-5 a run.  Now a setting is relaxed only once it has stood the dwell, and a relax that
    verification rolled back (the setting tightened again) waits a dwell from the rollback."""
    p = PredictivePolicy(cfg)
    f = fleet(mixed=True)
    hot = {"v4-short": breach("v4-short", 30.0, kv=0.7), "v4-long": calm("v4-long")}
    quiet = {"v4-short": calm("v4-short", 0.5), "v4-long": calm("v4-long")}
    applied(p, p.decide(0.0, f, hot))
    applied(p, p.decide(200.0, f, hot))  # the second step, late
    assert p.state.level == 2
    for t in range(215, 500, 15):  # calm from 215 s: the hold is over at 275 s, the dwell of the 200 s step at 500 s
        assert p.decide(float(t), f, quiet) == [], t
    back = applied(p, p.decide(500.0, f, quiet))
    assert [d.intent for d in back] == ["relax"]
    # verification rolls the relax back at 530 s: the step is the policy's again, and waits a dwell from then
    p.note_rolled_back(back[0], SetAdmission(**p._levels_back(f, 2)), now=530.0)
    assert p.state.level == 2
    for t in range(545, 830, 15):
        assert p.decide(float(t), f, quiet) == [], t
    assert [d.intent for d in p.decide(830.0, f, quiet)] == ["relax"]


def test_a_pool_prewarmed_late_does_not_hold_back_another_pools_relax(cfg):
    """Replicas go back a pool at a time, in name order; a pool whose pre-warm has not stood the dwell waits, and the
    next pool, pre-warmed long ago, goes back now (it used to wait for the first: the loop returned at it)."""
    p = PredictivePolicy(cfg)
    f = fleet(short=9, long_=7, spare=2)
    p.state.base_replicas = {"v4-long": 5, "v4-short": 7}
    p.tightened_at = {"replicas:v4-long": 500.0, "replicas:v4-short": 0.0}  # v4-long pre-warmed late
    quiet = {"v4-short": calm("v4-short", 0.3), "v4-long": calm("v4-long", 0.3)}
    assert p.decide(600.0, f, quiet) == []  # the calm hold first
    out = p.decide(700.0, f, quiet)
    assert [(d.action.pool, d.action.replicas, d.intent) for d in out] == [("v4-short", 7, "relax")]
    assert p.decide(785.0, fleet(short=7, long_=7, spare=4), quiet) == []  # v4-long's dwell ends at 800 s
    out = p.decide(800.0, fleet(short=7, long_=7, spare=4), quiet)
    assert [(d.action.pool, d.action.replicas) for d in out] == [("v4-long", 5)]


def test_never_relaxes_while_a_peak_is_announced(cfg):
    p = PredictivePolicy(cfg)
    f = fleet(mixed=True)
    p.decide(0.0, f, {"v4-short": breach("v4-short", 30.0, kv=0.7), "v4-long": calm("v4-long")})
    announced = Outlook("v4-short", 0.4, 0.4, math.inf, 100.0, 200.0, 250.0)
    for t in (15, 100, 200):
        assert p.decide(float(t), f, {"v4-short": announced, "v4-long": calm("v4-long")}) == []


def test_a_short_reservoir_goes_first_where_a_node_serves_the_most_requests(cfg):
    """Both v4 pools draw on the standby reservoir (4 nodes).  When it covers both asks, each pool gets its ask.
    When it does not, the nodes go first to the pool where a node serves the most requests: a short-context node
    here serves 165 req/s over 7 nodes at KV 0.26 (90 req/s per unit of KV), a long-context one 32 req/s over 5
    nodes at KV 0.57 (11): the flash sale before its surge.  Splitting max-min (2 and 2), as the policy used to, gave
    half the standby to the pool where it serves an eighth of the requests: the hindsight bound puts all 4 on the
    short pool.  Pools a node serves equally in (or nothing to go on) still share max-min fairly."""
    p = PredictivePolicy(cfg)

    def shared(short, long_, spare):
        f = fleet(short=short, long_=long_, spare=spare)
        pools = tuple(PoolState(**{**x.__dict__, "reservoir": "v4-standby"}) if not x.standby else x for x in f.pools)
        return Observation(f.at, pools, f.admission, f.rate_limits)

    def scaled(out):
        return {d.action.pool: d.action.replicas for d in out if isinstance(d.action, ScalePool)}

    def surge(pool, kv, rps, peak):  # a traffic surge announced 100 s ahead
        return Outlook(pool, kv, kv, math.inf, rps, rps * peak / kv, 100.0)

    # short: ceil(7 * 0.75 / 0.6) = 9 (asks 2); long: ceil(5 * 0.9 / 0.6) = 8 (asks 3): 5 asked, 6 spare
    outlook = {"v4-short": surge("v4-short", 0.26, 165.0, 0.75), "v4-long": surge("v4-long", 0.57, 32.0, 0.9)}
    assert scaled(p.decide(0.0, shared(7, 5, 6), outlook)) == {"v4-short": 9, "v4-long": 8}
    # both ask for more than the reservoir holds: all of it to the short pool, none to the long one
    p = PredictivePolicy(cfg)
    outlook = {"v4-short": surge("v4-short", 0.26, 165.0, 10.0), "v4-long": surge("v4-long", 0.57, 32.0, 10.0)}
    assert scaled(p.decide(0.0, shared(7, 5, 4), outlook)) == {"v4-short": 11}
    # a pool is worth what it answers, not what it is sent: with seed 004's max_model_len on the long pool (its
    # engines refuse the prompts it is sent), 300 req/s routed to it and 3 answered rank it last.  Ranked by routed
    # requests, the whole reservoir went to the pool that refuses its work (the max-seq-len ablation)
    p = PredictivePolicy(cfg)
    refusing = Outlook("v4-long", 0.57, 0.57, math.inf, 300.0, 3000.0, 100.0, served_rps_now=3.0)
    outlook = {"v4-short": surge("v4-short", 0.26, 165.0, 10.0), "v4-long": refusing}
    assert scaled(p.decide(0.0, shared(7, 5, 4), outlook)) == {"v4-short": 11}
    # the same asks with no request rate to go on: equal halves (never in proportion to how large the asks are)
    p = PredictivePolicy(cfg)
    outlook = {"v4-short": breach("v4-short", 100.0, peak=1.0), "v4-long": breach("v4-long", 100.0, peak=6.0)}
    assert scaled(p.decide(0.0, shared(7, 5, 4), outlook)) == {"v4-short": 9, "v4-long": 7}


def test_a_step_that_was_not_applied_is_proposed_again_not_skipped(cfg):
    """The guardrails refused the first tightening step (or the backend failed it): the loop never says it was
    applied, so the next tick proposes that same step.  The policy used to count the step as taken when it proposed
    it, and moved on to the next one: the operator saw the context limit go to 8k with the gateway waits never
    shortened, and a relaxing step refused on a cooldown was never taken either."""
    p = PredictivePolicy(cfg)
    f = fleet(mixed=True)
    hot = {"v4-short": breach("v4-short", 30.0, kv=0.7), "v4-long": calm("v4-long")}

    def admission(out):
        return [d.action for d in out if isinstance(d.action, SetAdmission)]

    first = admission(p.decide(0.0, f, hot))  # refused: not noted
    assert admission(applied(p, p.decide(15.0, f, hot))) == first, "the refused step again, not the one after it"
    assert first[0].max_context_tokens == 16_000 and first[0].normal_queue_seconds == 1.0
    assert admission(applied(p, p.decide(30.0, f, hot))) == [SetAdmission(max_context_tokens=8192)]
    assert p.state.level == 2
    # relaxing: a refused step back is proposed again on the next tick (no second hold), and only an applied one
    # moves the level back
    quiet = {"v4-short": calm("v4-short", 0.5), "v4-long": calm("v4-long")}
    assert p.decide(45.0, f, quiet) == []  # the hold starts
    back = admission(p.decide(330.0, f, quiet))  # refused (the hold over, and the dwell of the 30 s step)
    assert back and p.state.level == 2
    assert admission(applied(p, p.decide(345.0, f, quiet))) == back
    assert p.state.level == 1
    assert p.decide(360.0, f, quiet) == [], "an applied step back starts the next hold"


def _bucket_on(cfg):
    """The fleet with the shared bucket lever on, at the search's lane step."""
    return cfg.model_copy(update={"policy": cfg.policy.model_copy(update={"tightened_shared_rate_factor": 0.8})})


def test_the_shared_bucket_comes_down_once_no_node_is_left_and_goes_back_with_the_first_step(cfg):
    """The gateway's shared bucket meters normal and low work only (urgent passes outside it).  Lowering it costs
    the work that can wait, so, like the memory step, it comes only once the pressed pools have no node left to
    start: then by `tightened_shared_rate_factor` (220 -> 176 req/s), once; and it goes back to 220 together with
    the first step's settings once calm, never sooner than the fleet's dwell after it came down."""
    p = PredictivePolicy(_bucket_on(cfg))
    hot = {"v4-short": breach("v4-short", 30.0, kv=0.7), "v4-long": calm("v4-long")}
    first = applied(p, p.decide(0.0, fleet(mixed=True), hot))
    assert not [d for d in first if isinstance(d.action, SetRateLimit)], "nodes left: the bucket stays"
    f = fleet(mixed=True, spare=0)
    second = applied(p, p.decide(15.0, f, hot))
    assert SetRateLimit("shared", 176.0) in [d.action for d in second]
    rate = next(d for d in second if isinstance(d.action, SetRateLimit))
    assert "the shared bucket (normal and low work) 220 -> 176 req/s" in rate.reason and rate.intent == "protect"
    lowered = Observation(0.0, f.pools, f.admission, {"shared": 176.0})
    third = applied(p, p.decide(30.0, lowered, hot))
    assert not [d for d in third if isinstance(d.action, SetRateLimit)], "lowered once"
    quiet = {"v4-short": calm("v4-short", 0.5), "v4-long": calm("v4-long")}
    for t in range(45, 900, 15):
        out = applied(p, p.decide(float(t), lowered, quiet))
        rates = [d for d in out if isinstance(d.action, SetRateLimit)]
        if rates:
            assert t >= 15.0 + p.dwell and p.state.level == 0, "back with the first step, after the dwell"
            assert rates[0].action == SetRateLimit("shared", 220.0) and rates[0].intent == "relax"
            break
    else:
        raise AssertionError("the shared bucket never went back")
    assert p.state.base_shared_rps is None
    assert p.decide(915.0, Observation(0.0, f.pools, f.admission, {"shared": 220.0}), quiet) == []


def test_no_shared_bucket_a_quota_lane_or_a_factor_of_one_leaves_the_rate_alone(cfg):
    """A fleet whose backend reports no shared bucket (HAProxy, Kubernetes, LiteLLM) gets the admission step
    alone; so does one where a stream has a quota lane of its own (the shared bucket then holds the other tenants'
    work: the announced sale's surge comes in its own lane); `tightened_shared_rate_factor: 1`, the default, leaves
    it: turning away the work that can wait is the operator's call."""
    assert cfg.policy.tightened_shared_rate_factor == 1.0
    off, cfg = cfg, _bucket_on(cfg)
    hot = {"v4-short": breach("v4-short", 30.0, kv=0.7), "v4-long": calm("v4-long")}
    f = fleet(mixed=True, spare=0)
    bare = Observation(0.0, f.pools, f.admission, {})
    laned = Observation(0.0, f.pools, f.admission, {"shared": 220.0, "flash-sale": 1000.0})

    def kinds(policy, obs):
        return {type(d.action) for d in policy.decide(0.0, obs, hot)} - {ScalePool}

    assert kinds(PredictivePolicy(cfg), f) == {SetAdmission, SetRateLimit}
    assert kinds(PredictivePolicy(cfg), bare) == {SetAdmission}
    assert kinds(PredictivePolicy(cfg), laned) == {SetAdmission}
    assert kinds(PredictivePolicy(off), f) == {SetAdmission}
