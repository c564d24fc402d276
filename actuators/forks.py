"""Plan runs that share their prefix: a search's candidates forked from snapshots of one plan-less run.

Every plan of a change-point search (`plans.py`) runs exactly as `reactive` until its first action: a `PlanArm`
with no floors and no admission yet is `ReactiveArm`.  So `Forks` drives one plan-less run (the trunk), keeps a
deep copy of the twin and its arm at each tick a candidate changes something (`snapshot`), and runs each
candidate from a copy of the snapshot at its first action: the shared prefix is simulated once.  The result is the
same, to the last digit, as a replay from the start (the twin is deterministic, its random generators are copied
with it; `tests/actuators/test_forks.py` compares them field by field).

It also prunes: a candidate whose urgent goodput can no longer beat the incumbent's by the tie margin, whatever
happens after, is stopped (`bound`: the urgent requests of the whole run, known ahead because every candidate is
offered the same arrivals, minus those this run has already served late or lost).  And it keeps the search's own
cost (`cost`): runs, pruned runs, simulated seconds driven against what full replays would have driven, wall time,
and the candidates answered from a run already made (every finished run is kept by its plan).
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field

from infercast.actuators.ledger import action_ledger
from infercast.actuators.plans import Plan, PlanArm, could_win
from infercast.config import FleetConfig
from infercast.twin.fleet import Fleet, build_fleet, trace_fleet
from infercast.twin.run import RunResult, _result

#: how often (simulated seconds) a forked run checks whether it can still win
PRUNE_EVERY_SECONDS = 60.0


@dataclass
class SearchCost:
    runs: int = 0
    pruned: int = 0
    simulated_seconds: float = 0.0  # what the forks and the trunk drove
    replay_seconds: float = 0.0  # what the same runs replayed from the start would have driven
    wall_seconds: float = 0.0
    snapshots: int = 0
    cached: int = 0  # candidates asked for again, answered from a run already made

    def to_dict(self) -> dict:
        saved = 1.0 - self.simulated_seconds / self.replay_seconds if self.replay_seconds else 0.0
        return {
            "runs": self.runs,
            "pruned": self.pruned,
            "simulated_seconds": round(self.simulated_seconds, 1),
            "replay_seconds": round(self.replay_seconds, 1),
            "saved_share": round(saved, 3),
            "wall_seconds": round(self.wall_seconds, 1),
            "snapshots": self.snapshots,
            "cached": self.cached,
        }


@dataclass
class _State:
    fleet: Fleet
    arm: PlanArm


@dataclass
class Forks:
    """`run(plan)` for one config, seed and arrivals (a scenario, or `trace`), forking from the trunk."""

    cfg: FleetConfig
    seed: int | None
    trace: object | None
    step: float  # the sample step of the run (`driver.run_arm`'s `step_seconds`)
    name: str = "hindsight"
    prune: bool = True  # stop a candidate that cannot beat the incumbent it is given
    cost: SearchCost = field(default_factory=SearchCost)

    @property
    def prunes(self) -> bool:
        """`plans.search_hindsight` passes the incumbent to `run` when this is true."""
        return self.prune

    def __call__(self, plan: Plan, incumbent: dict | None = None) -> RunResult | None:
        return self.run(plan, incumbent)

    def know(self, plan: Plan, result: RunResult) -> None:
        """A run of `plan` made elsewhere (the bench's `reactive` run is the empty plan's): `run` returns a copy of it
        (its summary's `control` this arm's name) instead of running it again."""
        self._known[plan] = result

    def __post_init__(self) -> None:
        self._known: dict[Plan, RunResult] = {}
        self._snapshots: dict[float, _State] = {}
        self._trunk: _State | None = None
        probe = PlanArm(self.cfg, self.name)
        self.tick_seconds = probe.step_seconds
        laid = probe.layout(self.cfg)
        self.duration = (
            float(self.cfg.scenario.duration_seconds)
            if self.trace is None
            else float(self._fresh(laid, probe).fleet.traffic.duration_s)
        )

    # --- the trunk and its snapshots -------------------------------------------------------------------------
    def _fresh(self, laid: FleetConfig, arm: PlanArm) -> _State:
        if self.trace is None:
            fleet = build_fleet(laid, self.seed, None, sample_seconds=self.step)
        else:
            fleet = trace_fleet(laid, self.trace, self.seed or 0, None, sample_seconds=self.step)
        arm.configure(fleet)
        return _State(fleet, arm)

    def _start(self) -> _State:
        arm = PlanArm(self.cfg, self.name)
        return self._fresh(arm.layout(self.cfg), arm)

    def fork_time(self, plan: Plan) -> float:
        """The tick at which `plan` first acts (its first change point, rounded up to the arm's tick); the run's end
        for the empty plan."""
        times = [at for at, _ in plan.steps]
        if plan.admission or plan.settings:
            times.append(plan.start)
        if plan.scale_down_at is not None:
            times.append(plan.scale_down_at)
        if not times:
            return self._tick_at_or_after(self.duration)
        return self._tick_at_or_after(min(times))

    def _tick_at_or_after(self, t: float) -> float:
        k = -(-(t - 1e-9) // self.tick_seconds)  # ceil
        return min(max(0.0, k * self.tick_seconds), self._last_tick())

    def _last_tick(self) -> float:
        """The end of the run (the trunk's last advance ends there)."""
        return self.duration

    def _state_at(self, at: float) -> _State:
        """A private copy of the plan-less run just before its tick at `at` (0: a fresh run)."""
        if at <= 0:
            return self._start()
        if at not in self._snapshots:
            trunk = self._trunk
            if trunk is None or trunk.fleet.now > at + 1e-9:
                earlier = [t for t in self._snapshots if t <= at]
                trunk = copy.deepcopy(self._snapshots[max(earlier)]) if earlier else self._start()
            before = trunk.fleet.now
            _drive(trunk, at)
            self.cost.simulated_seconds += trunk.fleet.now - before
            self._trunk = trunk
            self._snapshots[at] = copy.deepcopy(trunk)
            self.cost.snapshots += 1
        return copy.deepcopy(self._snapshots[at])

    # --- a candidate ------------------------------------------------------------------------------------------
    def run(self, plan: Plan, incumbent: dict | None = None) -> RunResult | None:
        """The plan's run, forked at its first action; None when it was pruned (it cannot beat `incumbent`'s urgent
        goodput by more than the tie margin)."""
        if plan in self._known:  # run before (a stage's winner, a neighbour two descents share) or handed in
            known = copy.deepcopy(self._known[plan])
            known.summary["control"] = self.name
            self.cost.cached += 1
            return known
        t0 = time.perf_counter()
        at = self.fork_time(plan)
        state = self._state_at(at)
        state.arm.plan = plan
        start = state.fleet.now
        total = None
        if self.prune and incumbent is not None and not self._faults():
            total = (incumbent.get("tiers") or {}).get("urgent", {}).get("offered")
        pruned = False
        while state.fleet.now < self.duration - 1e-9:
            _drive(state, min(self.duration, state.fleet.now + PRUNE_EVERY_SECONDS))
            if total is not None and not could_win(self.bound(state.fleet, total), incumbent):
                pruned = True
                break
        self.cost.runs += 1
        self.cost.simulated_seconds += state.fleet.now - start
        self.cost.replay_seconds += self.duration
        self.cost.wall_seconds += time.perf_counter() - t0
        if pruned:
            self.cost.pruned += 1
            return None
        res = self.result(state)
        self._known[plan] = copy.deepcopy(res)  # callers annotate the summary they get
        return res

    def _faults(self) -> bool:
        return bool(self.cfg.scenario is not None and self.cfg.scenario.faults)

    def bound(self, fleet: Fleet, urgent_offered: int) -> float:
        """The most urgent goodput (req/s) this run can still reach: every urgent request of the run served within
        its SLO, but those already served late or lost (a request is served or lost once)."""
        book = fleet.book
        served, lost = book.counts(0, 0.0, fleet.now + book.window_s)
        late = served - book.within_slo_count(0.0, fleet.now + book.window_s, 0)
        # + half a step of the summaries' rounding (0.01 req/s): the run's own figure is rounded up to that much
        return (urgent_offered - late - lost) / max(self.duration, 1e-9) + 0.005

    def result(self, state: _State) -> RunResult:
        """The run's result as `driver.run_arm` reports a plan arm's."""
        fleet = state.fleet
        if self.trace is None:
            traffic = fleet.traffic
            res = _result(fleet, traffic.surge_start(), traffic.surge_end(), state.arm)
        else:
            surges = getattr(self.trace, "surges", ())
            start = min((x.start_s for x in surges), default=None)
            end = max((x.end_s for x in surges), default=None)
            res = _result(fleet, start, end, state.arm)
        res.summary["actions"] = sum(1 for e in res.events if e.get("event") == "action")
        # the changes, flaps and decision delay, as `driver.run_arm` reports them for a replayed plan
        res.summary.update(
            action_ledger(self.cfg, getattr(getattr(state.arm, "admin", None), "history", []), res.summary)
        )
        return res


def _drive(state: _State, until: float) -> None:
    """`run._drive` after `configure`: the arm ticks, then the fleet advances one arm step, to `until`."""
    fleet, arm = state.fleet, state.arm
    while fleet.now < until - 1e-9:
        arm.tick(fleet)
        fleet.advance(min(arm.step_seconds, until - fleet.now))


__all__ = ["PRUNE_EVERY_SECONDS", "Forks", "SearchCost"]
