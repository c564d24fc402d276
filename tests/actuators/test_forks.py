"""Hindsight's candidates forked from one plan-less run (`infercast/simulator/control/forks.py`, issue 41 item 2): every
forked run is the same, to the last digit, as the plan replayed from the start; a candidate that cannot win is stopped
by a bound that never under-estimates; the search reports what it saved."""

from __future__ import annotations

import pytest

from infercast.config import load_config
from infercast.simulator.control.driver import _run
from infercast.simulator.control.forks import Forks
from infercast.simulator.control.plans import Plan, PlanArm, _base_nodes
from infercast.simulator.replay.traces import Surge, load_trace
from infercast.simulator.twin.tracefleet import surged_trace_run


@pytest.fixture(scope="module")
def surged(repo_root, data_dir):
    """A Mooncake slice sized for itself, with a 3x surge from 120 s: (fleet, trace)."""
    cfg = load_config(repo_root / "examples" / "flash-sale.yaml")
    trace = load_trace(data_dir / "traces/mooncake/conversation_trace.jsonl", lengths=cfg.scenario.lengths)
    cfg, trace, _ = surged_trace_run(trace, cfg, [Surge(120.0, 90.0, 3.0, 15.0)], size_fleet=True)
    return cfg, trace


def _plans(cfg) -> list[Plan]:
    base, spare = _base_nodes(cfg)
    short, long_ = sorted(base, key=lambda p: not p.endswith("short"))
    return [
        Plan(((105.0, ((long_, base[long_]), (short, base[short] + spare))),), (("memory_limit", 0.7),), None, None,
             "hpa", (("breaker", long_, 0.4), ("ceiling", long_, float(base[long_])), ("weight", short, 0.75))),
        Plan(),
        Plan(((120.0, ((long_, base[long_] + spare), (short, base[short]))), (240.0, ())),
             (("low_queue_seconds", 0.0),), 240.0, 240.0, "base"),
        Plan(((0.0, ((long_, base[long_]), (short, base[short] + spare))),)),
    ]  # fmt: skip


def test_a_forked_run_is_the_plan_replayed_from_the_start_to_the_last_digit(surged):
    cfg, trace = surged
    forks = Forks(cfg, 0, trace, 15.0, prune=False)
    for plan in _plans(cfg):
        forked = forks.run(plan)
        replayed = _run(PlanArm(cfg, "hindsight", plan), cfg, 0, trace, 15.0)
        assert forked.summary == replayed.summary, plan.describe()
        assert forked.timeseries.equals(replayed.timeseries) and forked.nodes.equals(replayed.nodes)
        assert forked.events == replayed.events
    cost = forks.cost.to_dict()
    # the prefixes before 105 s and 120 s were simulated once, not once a candidate
    assert cost["runs"] == 4 and cost["pruned"] == 0 and 0 < cost["saved_share"] < 1
    assert cost["simulated_seconds"] < cost["replay_seconds"]


def test_the_bound_never_falls_below_what_the_run_ends_with_and_a_loser_is_stopped(surged):
    cfg, trace = surged
    forks = Forks(cfg, 0, trace, 15.0)
    plan = _plans(cfg)[2]
    final = forks.run(plan)
    total = final.summary["tiers"]["urgent"]["offered"]
    state = forks._state_at(0.0)
    state.arm.plan = plan
    from infercast.simulator.control.forks import _drive

    bounds = []
    while state.fleet.now < forks.duration - 1e-9:
        _drive(state, min(forks.duration, state.fleet.now + 30.0))
        bounds.append(forks.bound(state.fleet, total))
    assert all(b >= final.summary["urgent_goodput_rps"] - 1e-9 for b in bounds)
    assert bounds == sorted(bounds, reverse=True)  # what is served late or lost stays so
    assert bounds[-1] == pytest.approx(final.summary["urgent_goodput_rps"], abs=0.02)
    # an incumbent no run can reach: the candidate is stopped, and counted as pruned
    out_of_reach = {**final.summary, "urgent_goodput_rps": total / forks.duration + 1.0}
    assert forks.run(_plans(cfg)[0], out_of_reach) is None and forks.cost.pruned == 1
    # an incumbent it ties (its own figures): it runs to the end, with the same result
    own = forks.run(_plans(cfg)[0]).summary
    fresh = Forks(cfg, 0, trace, 15.0)
    again = fresh.run(_plans(cfg)[0], own)
    assert again is not None and again.summary == own and fresh.cost.pruned == 0
    # a plan asked for again is answered from the run already made
    assert forks.run(_plans(cfg)[0]).summary == own and forks.cost.cached == 1


def test_a_run_made_elsewhere_is_not_run_again(surged):
    """The bench hands hindsight its `reactive` run: the empty plan's, to the last digit."""
    from infercast.simulator.control.driver import run_arm

    cfg, trace = surged
    reactive = run_arm(cfg, "reactive", 0, trace)
    forks = Forks(cfg, 0, trace, 15.0)
    forks.know(Plan(), reactive)
    again = forks.run(Plan())
    assert again.summary == {**reactive.summary, "control": "hindsight"} and forks.cost.runs == 0
    assert reactive.summary["control"] == "reactive"  # the caller's copy is left as it was
    replayed = Forks(cfg, 0, trace, 15.0).run(Plan())
    assert replayed.summary == again.summary
    assert replayed.timeseries.equals(again.timeseries) and replayed.events == again.events


def _late_variants(cfg) -> tuple[Plan, list[Plan]]:
    """A plan with floors and admission from 105 s, and plans that differ from it only late: let go at 240 s or
    270 s, scaled down there to the HPA's wish or the base (what `with_release` and the descent's release moves
    try)."""
    base, spare = _base_nodes(cfg)
    short, long_ = sorted(base, key=lambda p: not p.endswith("short"))
    floors = ((long_, base[long_]), (short, base[short] + spare))
    adm = (("memory_limit", 0.7),)
    head = Plan(((105.0, floors),), adm)
    late = [
        Plan(((105.0, floors), (240.0, ())), adm, 240.0),
        Plan(((105.0, floors), (240.0, ())), adm, 240.0, 240.0, "base"),
        Plan(((105.0, floors), (270.0, ())), adm, 270.0, 270.0, "hpa"),
    ]
    return head, late


def test_a_plan_differing_late_forks_from_the_plan_already_run_and_is_the_same_as_a_replay(surged):
    """Candidates that differ from a plan already run only in their release are forked from that plan's own run
    where they first differ (not from the plan-less run at 105 s), and each is still its replay to the last digit."""
    from infercast.simulator.control.forks import diverge

    cfg, trace = surged
    head, late = _late_variants(cfg)
    assert [diverge(p, head) for p in late] == [240.0, 240.0, 270.0]
    assert diverge(late[0], late[1]) == 240.0 and diverge(head, head) is None
    forks = Forks(cfg, 0, trace, 15.0, prune=False)
    forks.run(head)
    for plan in late:
        forked = forks.run(plan)
        replayed = _run(PlanArm(cfg, "hindsight", plan), cfg, 0, trace, 15.0)
        assert forked.summary == replayed.summary, plan.describe()
        assert forked.timeseries.equals(replayed.timeseries) and forked.nodes.equals(replayed.nodes)
        assert forked.events == replayed.events
    shared = forks.cost.to_dict()
    assert shared["forked_late"] == 3
    alone = Forks(cfg, 0, trace, 15.0, prune=False, share=False)
    for plan in [head, *late]:
        alone.run(plan)
    # the same runs, fewer simulated seconds: 240 - 105 s saved for two, 270 - 105 s for one, less the head's run
    # driven again to 240 s and 270 s once
    assert shared["simulated_seconds"] < alone.cost.to_dict()["simulated_seconds"]
    saved = alone.cost.to_dict()["simulated_seconds"] - shared["simulated_seconds"]
    assert shared["late_fork_saved_seconds"] == pytest.approx(saved, abs=0.2) and saved > 0


def test_a_search_stopped_half_way_resumes_from_its_journal_with_the_same_result(surged, tmp_path):
    """A search with a journal, run again (as after an interruption), asks for no run but the winner's (made
    again in full: its time series and events), and finds the same plan with the same figures."""
    from infercast.simulator.control.plans import search_hindsight

    cfg, trace = surged
    head, late = _late_variants(cfg)
    plans = [*_plans(cfg), head, *late]
    journal = tmp_path / "search.jsonl"
    first = Forks(cfg, 0, trace, 15.0, journal=journal)
    plan, res, tried = search_hindsight(first, plans)
    assert first.cost.pruned > 0  # losers stopped: the journal keeps them as stopped
    again = Forks(cfg, 0, trace, 15.0, journal=journal)
    plan2, res2, tried2 = search_hindsight(again, plans)
    assert plan2 == plan and tried2 == tried and again.cost.runs == 0 and again.cost.resumed == len(plans)
    full = again.materialize(plan2, res2)
    assert full.summary == res.summary and full.timeseries.equals(res.timeseries) and full.events == res.events
    # a journal of another seed is not read
    other = Forks(cfg, 1, trace, 15.0, journal=journal)
    assert other.run(plans[0]) is not None and other.cost.resumed == 0 and other.cost.runs == 1


def test_a_pruned_candidate_asked_again_is_not_run_again(surged):
    cfg, trace = surged
    forks = Forks(cfg, 0, trace, 15.0)
    own = forks.run(_plans(cfg)[2]).summary
    total = own["tiers"]["urgent"]["offered"]
    out_of_reach = {**own, "urgent_goodput_rps": total / forks.duration + 1.0}
    assert forks.run(_plans(cfg)[0], out_of_reach) is None
    runs = forks.cost.runs
    assert forks.run(_plans(cfg)[0], out_of_reach) is None
    assert forks.cost.runs == runs and forks.cost.cached == 1 and forks.cost.pruned == 2
    # against an incumbent it might beat, it runs
    assert forks.run(_plans(cfg)[0], {**own, "urgent_goodput_rps": 0.0}) is not None
    assert forks.cost.runs == runs + 1


def test_late_forks_save_simulated_seconds_on_the_sales_whole_search_and_find_the_same_plan(monkeypatch):
    """The flash sale's whole hindsight search (staged search, a 3-pass descent, causal and its descent: ~180
    candidates) with the twin replaced by a score of each plan, so that only the forking arithmetic runs: forking
    late candidates from the plan they share a prefix with drives ~10% fewer simulated seconds than forking every
    one from the plan-less run, and the search takes the same path to the same plan."""
    from dataclasses import dataclass

    import pandas as pd

    import infercast.simulator.control.forks as forks_module
    from infercast.simulator.control.driver import run_hindsight
    from infercast.simulator.twin.run import RunResult
    from infercast.simulator.twin.variants import load_scenario

    @dataclass
    class Clock:
        now: float = 0.0

    def score(plan: Plan) -> dict:
        """Urgent goodput best with the reservoir at 510 s and the memory limit at 0.65; letting go saves GPUs."""
        memory = dict(plan.admission).get("memory_limit", 0.8)
        floors = dict(plan.steps[0][1]) if plan.steps else {}
        let_go = len(plan.steps) > 1 and not plan.steps[-1][1]
        u = 97.4 + (15.0 if floors else 0.0) + 0.5 * floors.get("v4-short", 0) - 0.02 * abs(plan.start - 510.0)
        u += 5.0 - 40 * abs(memory - 0.65) + (0.3 if plan.admission else 0.0)
        gpu = 110000.0 - (3000.0 if let_go else 0.0) - (1000.0 if plan.scale_down_at else 0.0)
        return {"urgent_goodput_rps": round(u, 2), "goodput_rps": round(u + 76.0, 2), "gpu_seconds": gpu,
                "tiers": {"urgent": {"offered": 10**6}}, "control": "hindsight"}  # fmt: skip

    class Scored(Forks):
        sharing = True

        def __post_init__(self) -> None:
            self.prune, self.share = False, Scored.sharing
            self._known, self._pruned, self._snapshots, self._trunks, self._origin = {}, {}, {}, {}, {}
            self._stubs, self._kept, self._journalled = set(), [], {}
            self.tick_seconds, self.duration = 15.0, float(self.cfg.scenario.duration_seconds)

        def _start(self):
            return forks_module._State(Clock(), PlanArm.__new__(PlanArm))

        def result(self, state):
            return RunResult(score(state.arm.plan), pd.DataFrame(), pd.DataFrame(), [])

    def drive(state, until: float) -> None:
        state.fleet.now = until

    monkeypatch.setattr(forks_module, "_drive", drive)
    cfg = load_scenario("flash-sale-unannounced")
    found = {}
    for share in (True, False):
        Scored.sharing = share
        monkeypatch.setattr(forks_module, "Forks", Scored)
        reactive = RunResult(score(Plan()), pd.DataFrame(), pd.DataFrame(), [])
        res = run_hindsight(cfg, 0, None, 5.0, search="fast", check=True, max_passes=3, reactive=reactive)
        found[share] = (res.summary["plan"], [t["plan"] for t in res.summary["candidates"]], res.summary["search_cost"])
    (plan, path, shared), (plan2, path2, alone) = found[True], found[False]
    assert plan == plan2 and path == path2 and shared["runs"] == alone["runs"] > 150
    assert shared["forked_late"] > 20 and alone["forked_late"] == 0
    saved = alone["simulated_seconds"] - shared["simulated_seconds"]
    assert saved == pytest.approx(shared["late_fork_saved_seconds"]) and saved > 0.08 * alone["simulated_seconds"]
