"""The reserve plan (`infercast.actuators.reserve`): where the standby nodes go, as autoscaler floors and ceilings.

What an operator sees: on the flash sale's onset the four standby nodes are earmarked for the short-context pool,
where one serves several times the urgent requests of a long-context node, and the long pool's ceiling stops the
autoscaler from taking them; on a calm day the plan is the autoscaler's own and nothing is written; and the plan
does not flip between scrapes."""

from __future__ import annotations

import math

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from infercast.actuators.reserve import (
    PoolNeed,
    ReserveSettings,
    capacity,
    node_value,
    nodes_needed,
    plan_reserve,
    standing_plan,
)


def _onset() -> dict[str, PoolNeed]:
    """The unannounced sale at 615 s, seed 0, as the loop reads it: both pools see arrivals far over what they
    serve; a short-context node serves ~34 req/s at the KV target, a long-context one ~6."""
    return {
        "v4-short": PoolNeed("v4-short", 7, 7, 7, 0.5, 0.5, 1000.0, 200.0, urgent_share=0.2),
        "v4-long": PoolNeed("v4-long", 5, 5, 5, 0.74, 0.74, 600.0, 36.0, urgent_share=0.2),
    }


def _calm() -> dict[str, PoolNeed]:
    """A calm day: arrivals served, KV well under the trigger (the long pool's fullest node at 0.64)."""
    return {
        "v4-short": PoolNeed("v4-short", 7, 7, 7, 0.35, 0.39, 172.0, 171.0, urgent_share=0.2),
        "v4-long": PoolNeed("v4-long", 5, 5, 5, 0.64, 0.64, 29.5, 29.0, urgent_share=0.2, waiting=2.0),
    }


def test_the_onset_sends_every_standby_node_where_a_node_serves_most():
    plan = plan_reserve(615.0, _onset(), 4)
    assert plan.floors == {"v4-short": 11, "v4-long": 5}
    # no free node is left, so the long pool's autoscaler cannot start one of the short pool's
    assert plan.ceilings == {"v4-short": 11, "v4-long": 5}
    assert "4 of 4 reserve nodes" in plan.reasons["v4-short"]


def test_a_calm_day_plans_what_the_autoscaler_already_has():
    plan = plan_reserve(300.0, _calm(), 4)
    assert plan.bounds() == standing_plan({"v4-short": 7, "v4-long": 5}, 4).bounds()
    assert plan.earmarks == {"v4-short": 0, "v4-long": 0}


def test_a_kv_forecast_over_the_trigger_asks_for_nodes_before_any_request_is_unserved():
    n = PoolNeed("p", 5, 5, 5, 0.5, 0.9, 30.0, 30.0)
    assert nodes_needed(n, ReserveSettings()) == pytest.approx(5 * 0.9 / 0.6 - 5)
    # under the trigger the same forecast asks for nothing: the HPA's own target does that on the present
    assert nodes_needed(PoolNeed("p", 5, 5, 5, 0.5, 0.7, 30.0, 30.0), ReserveSettings()) == 0.0


def test_nodes_starting_count_against_the_need():
    # a node starting counts as one the pool has, within the autoscaler's tolerance, as the HPA counts it
    s = ReserveSettings()
    starting = PoolNeed("p", 7, 9, 7, 0.5, 0.5, 400.0, 200.0)
    none = PoolNeed("p", 7, 7, 7, 0.5, 0.5, 400.0, 200.0)
    assert nodes_needed(starting, s) == pytest.approx(nodes_needed(none, s) - 2 * (1 + s.tolerance))


def test_the_demand_need_is_what_neither_the_answers_nor_the_replicas_cover():
    # a node serves 200 / (7 x 0.5) x 0.6 = 34.3 req/s at the target: 400 req/s want 11.67 nodes; 7 x 1.1 are had
    # (the answers, 200 req/s x 1.1, would leave 5.25 nodes' worth unanswered: the smaller reading wins)
    s = ReserveSettings()
    n = PoolNeed("p", 7, 7, 7, 0.5, 0.5, 400.0, 200.0)
    cap = 200.0 / (7 * 0.5) * s.kv_target
    assert nodes_needed(n, s) == pytest.approx(400.0 / cap - 7 * (1 + s.tolerance))
    # arrivals within a tenth over what the replicas serve at the target ask for nothing (the HPA's tolerance),
    # though the answers leave 0.9 of a node's worth unanswered this scrape
    assert nodes_needed(PoolNeed("p", 7, 7, 7, 0.5, 0.5, 7 * cap * 1.05, 200.0), s) == 0.0
    # a pool answering all it is sent asks nothing of the reserve, even at a KV over the target (its own
    # autoscaler scales on that), as a fleet filling from empty reads: few answers yet, KV already held
    assert nodes_needed(PoolNeed("p", 7, 7, 7, 0.7, 0.7, 200.0, 200.0), s) == 0.0


def test_an_earmark_is_held_through_a_lull_and_released_after_the_hold():
    s = ReserveSettings(release_hold_seconds=300.0)
    plan = plan_reserve(615.0, _onset(), 4, settings=s)
    calm = _calm()
    held = plan_reserve(700.0, calm, 4, plan, s)
    assert held.floors == plan.floors, "a floor was dropped the first scrape the need paused"
    assert plan_reserve(914.0, calm, 4, held, s).floors == plan.floors
    released = plan_reserve(916.0, calm, 4, held, s)
    assert released.floors == {"v4-short": 7, "v4-long": 5}
    assert released.ceilings == {"v4-short": 11, "v4-long": 9}


def test_an_earmark_moves_only_for_clearly_more_value():
    # each scrape's capacity as read (no average), so that one scrape's figures decide
    s = ReserveSettings(switch_margin=0.25, capacity_seconds=1e-9)
    plan = plan_reserve(615.0, _onset(), 4, settings=s)
    # the long pool's node becomes a little more valuable than the short one's: not enough to move a node
    close = {
        "v4-short": PoolNeed("v4-short", 7, 11, 11, 0.5, 0.5, 1000.0, 300.0, urgent_share=0.2),
        "v4-long": PoolNeed("v4-long", 5, 5, 5, 0.13, 0.74, 600.0, 36.0, urgent_share=0.2),
    }
    assert capacity(close["v4-long"], s) > capacity(close["v4-short"], s)
    assert capacity(close["v4-long"], s) < capacity(close["v4-short"], s) * 1.25
    assert plan_reserve(630.0, close, 4, plan, s).floors == plan.floors
    # twice as valuable: one node moves (the largest gain first, one at a time)
    far = dict(close, **{"v4-long": PoolNeed("v4-long", 5, 5, 5, 0.05, 0.74, 600.0, 36.0, urgent_share=0.2)})
    moved = plan_reserve(630.0, far, 4, plan, s)
    assert sum(moved.earmarks.values()) == 4 and moved.earmarks["v4-long"] >= 1


def test_bad_signals_are_refused_with_the_field_named():
    with pytest.raises(ValueError, match="arrivals_rps"):
        PoolNeed("p", 1, 1, 1, 0.5, 0.5, math.nan, 1.0)
    with pytest.raises(ValueError, match="urgent_share"):
        PoolNeed("p", 1, 1, 1, 0.5, 0.5, 1.0, 1.0, urgent_share=1.5)
    with pytest.raises(ValueError, match="reserve"):
        plan_reserve(0.0, _calm(), -1)


# --- properties: for every input ----------------------------------------------------------------------------------
rate = st.floats(0.0, 5000.0, allow_nan=False)
kv = st.floats(0.0, 1.0, allow_nan=False)


@st.composite
def needs(draw, names=("a", "b", "c"), every: bool = False):
    out = {}
    for name in names[: draw(st.integers(len(names) if every else 1, len(names)))]:
        base = draw(st.integers(0, 12))
        replicas = draw(st.integers(0, 20))
        out[name] = PoolNeed(
            name,
            base,
            replicas,
            draw(st.integers(0, replicas)),
            draw(kv),
            draw(kv),
            draw(rate),
            draw(rate),
            demand_peak_rps=draw(rate),
            urgent_share=draw(st.floats(0.0, 1.0)),
            waiting=draw(st.floats(0.0, 500.0)),
            waiting_growth_rps=draw(st.floats(-50.0, 50.0)),
        )
    return out


@settings(max_examples=300, deadline=None)
@given(needs(), st.integers(0, 12), st.floats(0.0, 3600.0))
def test_floors_never_exceed_the_reserve_and_ceilings_never_cut_below_a_floor(ns, reserve, now):
    plan = plan_reserve(now, ns, reserve)
    assert sum(plan.floors[p] - ns[p].base for p in ns) <= reserve
    for p, n in ns.items():
        assert n.base <= plan.floors[p] <= plan.ceilings[p] <= n.base + reserve
        # a ceiling leaves a pool the free nodes only: never another pool's earmark
        assert plan.ceilings[p] - plan.floors[p] == plan.free
    assert sum(plan.earmarks.values()) + plan.free == reserve


@settings(max_examples=200, deadline=None)
@given(needs(), st.integers(0, 12), st.floats(0.0, 3600.0), st.floats(0.0, 299.0))
def test_the_same_signals_keep_the_same_plan(ns, reserve, now, later):
    """Steadiness: re-planned on unchanged signals (a scrape later, within the scale-down window after which a
    pool's idle started nodes are free to others), the plan does not move."""
    plan = plan_reserve(now, ns, reserve)
    again = plan_reserve(now + later, ns, reserve, plan)
    assert again.bounds() == plan.bounds()


@settings(max_examples=200, deadline=None)
@given(needs(), st.integers(0, 12), st.floats(0.0, 3600.0), st.floats(0.95, 1.05))
def test_noise_of_a_few_percent_never_moves_a_node_between_pools(ns, reserve, now, jitter):
    """Steadiness: ±5% on every rate (one scrape's noise) that leaves every pool's need at the same whole number of
    nodes never takes an earmarked node from one pool for another (that needs `switch_margin`, 25%, more value
    per node)."""
    plan = plan_reserve(now, ns, reserve)
    noisy = {
        p: PoolNeed(
            n.pool, n.base, n.replicas, n.ready, n.kv_now, n.kv_peak, n.arrivals_rps * jitter,
            n.served_rps / jitter, n.demand_peak_rps * jitter, n.urgent_share, n.waiting, n.waiting_growth_rps,
        )
        for p, n in ns.items()
    }  # fmt: skip
    s = ReserveSettings()
    assume(all(math.ceil(nodes_needed(ns[p], s) - 1e-9) == math.ceil(nodes_needed(noisy[p], s) - 1e-9) for p in ns))
    after = plan_reserve(now + 15.0, noisy, reserve, plan)
    for p in ns:
        assert after.earmarks[p] >= plan.earmarks[p], (p, plan.earmarks, after.earmarks)


@settings(max_examples=200, deadline=None)
@given(needs(), st.integers(1, 12))
def test_a_node_goes_first_where_it_is_worth_most(ns, reserve):
    """Greedy by value: no free node is left while some pool still values one (free: neither earmarked nor a node a
    pool's autoscaler started, which the first plan presumes recent), and a pool with no earmark never values its
    first node more than an earmarked pool's last by the switch margin."""
    s = ReserveSettings()
    plan = plan_reserve(0.0, ns, reserve, settings=s)
    need = {p: nodes_needed(n, s) for p, n in ns.items()}
    if reserve - sum(max(plan.earmarks[p], n.replicas - n.base) for p, n in ns.items()) > 0:
        assert all(node_value(ns[p], s, plan.earmarks[p] + 1, need[p]) <= 0 for p in ns)
    for p in ns:
        for q in ns:
            if p != q and plan.earmarks[q]:
                vp = node_value(ns[p], s, plan.earmarks[p] + 1, need[p])
                vq = node_value(ns[q], s, plan.earmarks[q], need[q])
                assert not (vp > vq * (1 + s.switch_margin) and vp - vq > 1e-9)


@st.composite
def short_of_nodes(draw):
    """Two pools both short of more nodes than any reservoir holds, each scrape's figures drawn anew (their values
    per node cross at random), nodes up at random."""
    out = {}
    for name in ("a", "b"):
        base = draw(st.integers(0, 6))
        replicas = draw(st.integers(0, 20))
        served = draw(st.floats(1.0, 200.0))
        out[name] = PoolNeed(
            name, base, replicas, draw(st.integers(1, max(1, replicas))) if replicas else 0, draw(st.floats(0.05, 1.0)),
            0.0, served * 100.0, served, urgent_share=draw(st.floats(0.05, 1.0)),
        )  # fmt: skip
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(short_of_nodes(), min_size=2, max_size=12), st.integers(1, 12), st.floats(1.0, 600.0))
def test_a_node_moved_to_a_pool_is_not_moved_back_within_the_switch_hold(seq, reserve, hold):
    """Steadiness for every sequence of signals, one scrape (15 s) apart: a pool that received earmarks by a move
    gives none back within `switch_hold_seconds` (a moved node drains on one pool and serves on the other only
    after a cold start: on a ServeGen surge the plan moved all eight standby nodes back and forth every 15-60 s when
    both pools' values crossed with every scrape, and served a third of reactive's urgent requests).  Moves the
    same way are free: a surge that grows keeps drawing nodes to the pool it hits."""
    s = ReserveSettings(switch_hold_seconds=hold, capacity_seconds=1e-9)
    plan = plan_reserve(0.0, seq[0], reserve, settings=s)
    for i, ns in enumerate(seq[1:], start=1):
        now = 15.0 * i
        before = plan
        plan = plan_reserve(now, ns, reserve, before, s)
        for p in ns:
            assert plan.gained_at.get(p, -math.inf) in (before.gained_at.get(p, -math.inf), now)
            if now - before.gained_at.get(p, -math.inf) < hold:
                assert plan.earmarks[p] >= before.earmarks[p], (now, p, before.earmarks, plan.earmarks)


def test_values_that_cross_every_scrape_move_the_reserve_once_in_the_hold():
    """Two pools both short of nodes, their next node's value crossing with every scrape: the plan moves earmarks
    once, then holds them until the switch hold has run out."""
    s = ReserveSettings(switch_hold_seconds=300.0, capacity_seconds=1e-9)
    short_wins = {
        "s": PoolNeed("s", 2, 2, 2, 0.1, 0.1, 5000.0, 100.0, urgent_share=0.2),
        "l": PoolNeed("l", 2, 2, 2, 0.9, 0.9, 5000.0, 20.0, urgent_share=0.2),
    }
    long_wins = {
        "s": PoolNeed("s", 2, 2, 2, 0.9, 0.9, 5000.0, 100.0, urgent_share=0.2),
        "l": PoolNeed("l", 2, 2, 2, 0.1, 0.1, 5000.0, 200.0, urgent_share=0.2),
    }
    plan = plan_reserve(0.0, short_wins, 8, settings=s)
    assert plan.earmarks == {"s": 8, "l": 0}
    moved = plan_reserve(15.0, long_wins, 8, plan, s)
    assert moved.earmarks["l"] > 0 and moved.gained_at["l"] == 15.0
    back = plan_reserve(30.0, short_wins, 8, moved, s)
    assert back.earmarks == moved.earmarks, "moved back within the hold"
    assert plan_reserve(315.0, short_wins, 8, back, s).earmarks == {"s": 8, "l": 0}


def test_a_pool_keeps_the_reservoir_nodes_it_runs_and_needs():
    """The Mooncake surge (seed 700): the long-context pool's autoscaler had started ten standby nodes, all still
    needed, when the first plan was made; the short pool's next node was worth a little more (2.1 against 1.8
    req/s).  Before, the plan earmarked all twelve for the short pool and set the long pool's ceiling to its own
    five nodes: its autoscaler drained ten serving nodes while cold ones started elsewhere.  Now they stay, and
    only the free two go to the short pool (a move needs `switch_margin` more value)."""
    ns = {
        "short": PoolNeed("short", 7, 7, 7, 0.19, 0.19, 58.5, 4.73),
        "long": PoolNeed("long", 5, 15, 15, 0.29, 0.29, 53.7, 13.07),
    }
    s = ReserveSettings()
    assert capacity(ns["short"], s) > capacity(ns["long"], s)
    plan = plan_reserve(315.0, ns, 12, settings=s)
    assert plan.earmarks == {"short": 2, "long": 10}
    assert plan.floors["long"] == 15


def test_a_pools_idle_started_nodes_go_to_another_pool_only_after_its_scale_down_window():
    """The ServeGen surge (seed 700): two minutes before the surge, the short pool's autoscaler runs eight standby
    nodes it does not need now and the long pool needs four.  Before, the plan earmarked five of them for the long
    pool and set the short pool's ceiling to five: the surge then hit the short pool (a node there serves ten times
    what one serves on the long pool) with three nodes up.  Now they stay the short pool's until its autoscaler's
    own scale-down window has passed since it last started one; then the long pool may have them."""
    s = ReserveSettings(release_hold_seconds=300.0)
    idle_short = {
        "short": PoolNeed("short", 2, 10, 10, 0.09, 0.09, 30.0, 30.0),
        "long": PoolNeed("long", 2, 2, 2, 0.6, 0.6, 14.0, 4.9),
    }
    first = plan_reserve(285.0, idle_short, 8, settings=s)
    assert first.earmarks == {"short": 0, "long": 0}
    assert first.ceilings["short"] >= 10
    assert plan_reserve(570.0, idle_short, 8, first, s).earmarks["long"] == 0
    assert plan_reserve(600.0, idle_short, 8, first, s).earmarks["long"] > 0


def test_a_quiet_scrape_does_not_give_away_the_nodes_a_pool_runs():
    """The Mooncake surge (seed 700, perfect forecast): the long pool ran its earmarked reservoir nodes and needed
    them, read no need for one scrape at 360 s between two that asked for 15-23 more, and the short pool asked for 3
    on a one-scrape forecast peak.  Valued at the least positive value, the long pool's running earmarks went to the
    short pool, and the switch hold kept them there through the surge.  What the user sees now: the floors stay
    while the pool's nodes run and it needed them within the hold; an earmark whose node has not started yet may
    still move."""
    s = ReserveSettings(release_hold_seconds=300.0)
    busy = {
        "short": PoolNeed("short", 7, 7, 7, 0.2, 0.2, 20.0, 20.0, urgent_share=0.2),
        "long": PoolNeed("long", 5, 17, 17, 0.5, 0.9, 20.0, 20.0, urgent_share=0.2),  # KV band over the trigger
    }
    first = plan_reserve(300.0, busy, 12, settings=s)
    assert first.earmarks["long"] > 0 and first.earmarks["short"] == 0
    quiet_long = {
        "short": PoolNeed("short", 7, 7, 7, 0.2, 0.2, 100.0, 20.0, urgent_share=0.2),  # asks for nodes
        "long": PoolNeed("long", 5, 17, 17, 0.3, 0.3, 20.0, 20.0, urgent_share=0.2),  # no need this scrape
    }
    assert nodes_needed(quiet_long["short"], s) > 0 and nodes_needed(quiet_long["long"], s) == 0
    kept = plan_reserve(360.0, quiet_long, 12, first, s)
    assert kept.earmarks == first.earmarks and kept.floors == first.floors
    # the same earmarks not started yet (the long pool at its own five nodes): the short pool may take them
    not_started = dict(quiet_long, long=PoolNeed("long", 5, 5, 5, 0.3, 0.3, 20.0, 20.0, urgent_share=0.2))
    moved = plan_reserve(360.0, not_started, 12, first, s)
    assert moved.earmarks["short"] > 0 and moved.earmarks["long"] < first.earmarks["long"]


def test_nodes_a_pool_runs_but_does_not_need_are_not_held():
    """A calm day after the autoscaler started two standby nodes on its own: nothing is earmarked (nothing written)."""
    calm = dict(_calm(), **{"v4-long": PoolNeed("v4-long", 5, 7, 7, 0.5, 0.5, 29.5, 29.0, urgent_share=0.2)})
    assert plan_reserve(300.0, calm, 4).earmarks == {"v4-short": 0, "v4-long": 0}


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.floats(0.0, 500.0), st.floats(0.0, 1.0), st.integers(1, 20)), min_size=1, max_size=30))
def test_what_a_node_serves_is_always_within_what_the_scrapes_said(readings):
    """The averaged capacity is never outside the range of the single scrapes' readings (a ratio of averages is a
    weighted mean of the ratios): one scrape that reads an empty KV cache between two bursts cannot make a node
    worth ten times what every other scrape says."""
    s = ReserveSettings()
    plan, caps = None, []
    for i, (served, kv_now, ready) in enumerate(readings):
        ns = {"p": PoolNeed("p", 1, ready, ready, kv_now, kv_now, served, served)}
        caps.append(capacity(ns["p"], s))
        plan = plan_reserve(15.0 * i, ns, 4, plan, s)
    got = capacity(ns["p"], s, plan.throughput["p"])
    assert min(caps) * (1 - 1e-9) <= got <= max(caps) * (1 + 1e-9)
