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

A candidate need not fork from the plan-less run: two plans act alike until the first moment their timelines
differ (`diverge`: a floor, the admission and settings taken, their release, the scale-down), so a candidate that
differs from a plan already run only late (a release 30 s later, a scale-down added at the surge's end) is forked
from that plan's own run there (`_source`: whichever run shares the longest prefix, counting what it costs to
bring that run's trunk there).  A pruned candidate's bound is kept too: asked again against an incumbent that
bound cannot beat, it is pruned without a run (it would be, at the same minute).  With a `journal` (a JSON-lines
file), every finished or pruned candidate is written down as it ends, so a search stopped half-way resumes where
it was: the candidates already journalled are answered from it (`resumed`), and the winner, when it is one of
them, is run again in full (`materialize`) and must come out the same to the last digit.
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from infercast.actuators.ledger import action_ledger
from infercast.config import FleetConfig
from infercast.simulator.control.plans import Plan, PlanArm, could_win
from infercast.simulator.twin.fleet import Fleet, build_fleet, trace_fleet
from infercast.simulator.twin.run import RunResult, _result

#: how often (simulated seconds) a forked run checks whether it can still win
PRUNE_EVERY_SECONDS = 60.0
#: snapshots of plans' own runs (not the plan-less trunk's) kept at most, the oldest dropped first: each is a copy
#: of the whole twin, and a candidate that differs late is mostly one of the last incumbent's few neighbours
PLAN_SNAPSHOTS_KEPT = 12


@dataclass
class SearchCost:
    runs: int = 0
    pruned: int = 0
    simulated_seconds: float = 0.0  # what the forks and the trunk drove
    replay_seconds: float = 0.0  # what the same runs replayed from the start would have driven
    wall_seconds: float = 0.0
    snapshots: int = 0
    cached: int = 0  # candidates asked for again, answered from a run (or a pruned run) already made
    resumed: int = 0  # candidates answered from the journal of an interrupted search
    forked_late: int = 0  # candidates forked from another plan's run, not the plan-less one (`diverge`)
    late_fork_seconds: float = 0.0  # what those forks skipped past the plan-less run's fork point ...
    redriven_seconds: float = 0.0  # ... less what driving other plans' runs to there cost: the net is item 2's gain

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
            "resumed": self.resumed,
            "forked_late": self.forked_late,
            # simulated seconds the late forks saved, net of driving the plans they forked from again
            "late_fork_saved_seconds": round(self.late_fork_seconds - self.redriven_seconds, 1),
        }


@dataclass
class _State:
    fleet: Fleet
    arm: PlanArm


EMPTY = Plan()


def timeline(plan: Plan) -> list[tuple[float, str, str]]:
    """What `PlanArm` does with `plan`, as (time, what, how) sorted: each step's floors, the admission and settings
    taken at the plan's start and put back at `admission_until`, the scale-down.  At a tick the arm reads only the
    entries at or before it, so two plans act alike until the first entry where their timelines differ."""
    out = [(float(at), "floors", repr(floors)) for at, floors in plan.steps]
    if plan.admission or plan.settings:  # `PlanArm.tick`: nothing is taken (nor put back) without them
        out.append((plan.start, "hold", repr((plan.admission, plan.settings))))
        if plan.admission_until is not None:
            out.append((float(plan.admission_until), "put back", ""))
    if plan.scale_down_at is not None:
        out.append((float(plan.scale_down_at), "scale down", plan.scale_down_to))
    return sorted(out)


def diverge(a: Plan, b: Plan) -> float | None:
    """The first time at which the arms of plans `a` and `b` may act differently; None when they act alike
    throughout (`timeline`)."""
    ta, tb = timeline(a), timeline(b)
    for x, y in zip(ta, tb, strict=False):
        if x != y:
            return min(x[0], y[0])
    if len(ta) != len(tb):
        return (ta if len(ta) > len(tb) else tb)[min(len(ta), len(tb))][0]
    return None


def _key(plan: Plan) -> str:
    """A plan as the journal names it: its exact repr (floats in full)."""
    return repr(plan)


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
    journal: Path | None = None  # every candidate's end written here as it comes; read back to resume a search
    share: bool = True  # fork a candidate from the run of another plan that shares a longer prefix (`diverge`)

    @property
    def prunes(self) -> bool:
        """`plans.search_hindsight` passes the incumbent to `run` when this is true."""
        return self.prune

    def __call__(self, plan: Plan, incumbent: dict | list[dict] | None = None) -> RunResult | None:
        return self.run(plan, incumbent)

    def know(self, plan: Plan, result: RunResult) -> None:
        """A run of `plan` made elsewhere (the bench's `reactive` run is the empty plan's): `run` returns a copy of it
        (its summary's `control` this arm's name) instead of running it again."""
        self._known[plan] = result

    def __post_init__(self) -> None:
        self._known: dict[Plan, RunResult] = {}
        self._pruned: dict[Plan, float] = {}  # a pruned candidate -> its bound when it was stopped
        self._snapshots: dict[Plan, dict[float, _State]] = {}  # plan -> tick -> its run just before that tick
        self._trunks: dict[Plan, _State] = {}  # plan -> its run as far as it has been driven for others
        self._origin: dict[Plan, tuple[Plan, float]] = {}  # plan run -> (the plan it was forked from, at)
        self._stubs: set[Plan] = set()  # answered from the journal: figures only, no time series
        self._kept: list[tuple[Plan, float]] = []  # plans' own snapshots, oldest first (`PLAN_SNAPSHOTS_KEPT`)
        probe = PlanArm(self.cfg, self.name)
        self.tick_seconds = probe.step_seconds
        laid = probe.layout(self.cfg)
        self.duration = (
            float(self.cfg.scenario.duration_seconds)
            if self.trace is None
            else float(self._fresh(laid, probe).fleet.traffic.duration_s)
        )
        self._journalled: dict[str, dict] = self._read_journal()

    # --- the journal -----------------------------------------------------------------------------------------
    def fingerprint(self) -> str:
        """What a journal line was made on: the fleet, the seed, the arrivals, the steps (a line of another search
        is never read)."""
        h = hashlib.sha256()
        h.update(self.cfg.model_dump_json().encode())
        h.update(repr((self.seed, self.step, self.name, self.duration)).encode())
        if self.trace is not None:
            for attr in ("arrivals_s", "prompt_tokens", "output_tokens"):
                arr = getattr(self.trace, attr, None)
                if arr is not None:
                    h.update(memoryview(arr.tobytes()))
            h.update(repr(getattr(self.trace, "surges", ())).encode())
        return h.hexdigest()[:16]

    def _read_journal(self) -> dict[str, dict]:
        if self.journal is None or not Path(self.journal).exists():
            return {}
        mine = self.fingerprint()
        out: dict[str, dict] = {}
        for line in Path(self.journal).read_text().splitlines():
            try:
                row = json.loads(line)
            except json.JSONDecodeError:  # a line cut short when the search was stopped
                continue
            if row.get("fingerprint") == mine:
                out[row["plan"]] = row
        return out

    def _write_journal(self, plan: Plan, **row) -> None:
        if self.journal is None:
            return
        Path(self.journal).parent.mkdir(parents=True, exist_ok=True)
        line = json.dumps({"fingerprint": self.fingerprint(), "plan": _key(plan), **row})
        with Path(self.journal).open("a") as f:
            f.write(line + "\n")

    # --- the trunks and their snapshots ----------------------------------------------------------------------
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
        first = diverge(plan, EMPTY)
        return self._tick_at_or_after(self.duration if first is None else first)

    def _tick_at_or_after(self, t: float) -> float:
        k = -(-(t - 1e-9) // self.tick_seconds)  # ceil
        return min(max(0.0, k * self.tick_seconds), self._last_tick())

    def _last_tick(self) -> float:
        """The end of the run (the trunk's last advance ends there)."""
        return self.duration

    def _state_at(self, at: float, plan: Plan = EMPTY) -> _State:
        """A private copy of `plan`'s run just before its tick at `at` (0: a fresh run).  The plan-less run is the
        trunk every search starts from; another plan's run is driven again from where it was forked (its origin),
        once, and kept as far as it went."""
        if at <= 0:
            state = self._start()
            state.arm.plan = plan
            return state
        snaps = self._snapshots.setdefault(plan, {})
        if at not in snaps:
            trunk = self._trunks.get(plan)
            if trunk is None or trunk.fleet.now > at + 1e-9:
                earlier = [t for t in snaps if t <= at]
                if earlier:
                    trunk = copy.deepcopy(snaps[max(earlier)])
                elif plan == EMPTY:
                    trunk = self._start()
                else:
                    source, t0 = self._origin[plan]
                    trunk = self._state_at(t0, source)
                    trunk.arm.plan = plan
            before = trunk.fleet.now
            _drive(trunk, at)
            self.cost.simulated_seconds += trunk.fleet.now - before
            if plan != EMPTY:
                self.cost.redriven_seconds += trunk.fleet.now - before
            self._trunks[plan] = trunk
            snaps[at] = copy.deepcopy(trunk)
            self.cost.snapshots += 1
            if plan != EMPTY:
                self._kept.append((plan, at))
                state = snaps[at]
                self._forget()
                return copy.deepcopy(state)
        return copy.deepcopy(snaps[at])

    def _forget(self) -> None:
        """Drop the oldest snapshots of plans' own runs beyond `PLAN_SNAPSHOTS_KEPT` (and a plan's trunk with its
        last one): a later candidate needing one drives that plan's run again from its origin."""
        while len(self._kept) > PLAN_SNAPSHOTS_KEPT:
            plan, at = self._kept.pop(0)
            snaps = self._snapshots.get(plan, {})
            snaps.pop(at, None)
            if not snaps:
                self._snapshots.pop(plan, None)
                self._trunks.pop(plan, None)

    def _reach_cost(self, plan: Plan, at: float) -> float:
        """Simulated seconds `_state_at(at, plan)` would drive."""
        snaps = self._snapshots.get(plan, {})
        if at in snaps:
            return 0.0
        trunk = self._trunks.get(plan)
        if trunk is not None and trunk.fleet.now <= at + 1e-9:
            return at - trunk.fleet.now
        earlier = [t for t in snaps if t <= at]
        if earlier:
            return at - max(earlier)
        if plan == EMPTY:
            return at
        return at - self._origin[plan][1]

    def _source(self, plan: Plan) -> tuple[Plan, float]:
        """(the run to fork `plan` from, the tick): the plan-less run at the plan's first action, or a run already
        made that acts like `plan` for longer, where what it saves is more than what reaching it costs."""
        at = self.fork_time(plan)
        best, best_at, gain = EMPTY, at, 0.0
        if not self.share:
            return best, best_at
        for other in self._origin:
            if other == plan:
                continue
            d = diverge(plan, other)
            if d is None:
                continue
            tick = self._tick_at_or_after(d)
            if tick <= best_at:
                continue
            # what forking there saves over forking from the plan-less run, less what it costs to get there
            g = (tick - at) - self._reach_cost(other, tick)
            if g >= gain:
                best, best_at, gain = other, tick, g
        return best, best_at

    # --- a candidate ------------------------------------------------------------------------------------------
    def run(self, plan: Plan, incumbent: dict | list[dict] | None = None) -> RunResult | None:
        """The plan's run, forked at its first action (or from a run that acts alike for longer); None when it was
        pruned (it cannot beat `incumbent`'s urgent goodput by more than the tie margin; given several, none of
        them: `plans.search_hindsight`'s `checked`)."""
        if plan in self._known:  # run before (a stage's winner, a neighbour two descents share) or handed in
            known = copy.deepcopy(self._known[plan])
            known.summary["control"] = self.name
            self.cost.cached += 1
            return known
        incs = [] if incumbent is None else [incumbent] if isinstance(incumbent, dict) else list(incumbent)
        prunable = self.prune and bool(incs) and not self._faults()
        if plan in self._pruned and prunable and not _could_win_any(self._pruned[plan], incs):
            # stopped before against an incumbent it could not reach; this one is no easier: it would stop again
            self.cost.cached += 1
            self.cost.pruned += 1
            return None
        row = self._journalled.get(_key(plan))
        if row is not None:
            if "summary" in row:
                self.cost.resumed += 1
                res = RunResult(copy.deepcopy(row["summary"]), pd.DataFrame(), pd.DataFrame(), [])
                res.summary["control"] = self.name
                self._known[plan] = copy.deepcopy(res)
                self._stubs.add(plan)
                return res
            if prunable and not _could_win_any(float(row["pruned_bound"]), incs):
                self.cost.resumed += 1
                self.cost.pruned += 1
                self._pruned[plan] = float(row["pruned_bound"])
                return None
        return self._run(plan, incs if prunable else None)

    def _run(self, plan: Plan, incumbents: list[dict] | None) -> RunResult | None:
        t0 = time.perf_counter()
        source, at = self._source(plan)
        if source != EMPTY:
            self.cost.forked_late += 1
            self.cost.late_fork_seconds += at - self.fork_time(plan)
        state = self._state_at(at, source)
        state.arm.plan = plan
        self._origin[plan] = (source, at)
        start = state.fleet.now
        total = None
        if incumbents:
            total = (incumbents[0].get("tiers") or {}).get("urgent", {}).get("offered")
        pruned = None
        while state.fleet.now < self.duration - 1e-9:
            _drive(state, min(self.duration, state.fleet.now + PRUNE_EVERY_SECONDS))
            if total is not None and incumbents:
                bound = self.bound(state.fleet, total)
                if not _could_win_any(bound, incumbents):
                    pruned = bound
                    break
        self.cost.runs += 1
        self.cost.simulated_seconds += state.fleet.now - start
        self.cost.replay_seconds += self.duration
        self.cost.wall_seconds += time.perf_counter() - t0
        if pruned is not None:
            self.cost.pruned += 1
            self._pruned[plan] = pruned
            self._write_journal(plan, pruned_bound=pruned, forked_at=at, ended_at=state.fleet.now, late=source != EMPTY)
            return None
        res = self.result(state)
        self._known[plan] = copy.deepcopy(res)  # callers annotate the summary they get
        self._write_journal(plan, summary=res.summary, forked_at=at, ended_at=state.fleet.now, late=source != EMPTY)
        return res

    def materialize(self, plan: Plan, res: RunResult) -> RunResult:
        """`res` with its time series and events: a plan answered from the journal is run again in full (from the
        start of its own prefix), and must give the figures the journal holds, or the journal is stale."""
        if plan not in self._stubs:
            return res
        self._stubs.discard(plan)
        self._known.pop(plan, None)
        full = self._run(plan, None)
        assert full is not None
        a = json.dumps(full.summary, sort_keys=True, default=str)
        b = json.dumps({**res.summary, "control": full.summary.get("control")}, sort_keys=True, default=str)
        if json.loads(a) != json.loads(b):
            raise RuntimeError(
                f"the search journal {self.journal} does not match a run of {plan.describe()} made now (the twin "
                "changed since it was written): remove it and run the search again"
            )
        for k, v in res.summary.items():  # what the caller added to the figures (plan, check...) kept
            full.summary.setdefault(k, v)
        return full

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


def _could_win_any(bound: float, incumbents: list[dict]) -> bool:
    return any(could_win(bound, inc) for inc in incumbents)


def _drive(state: _State, until: float) -> None:
    """`run._drive` after `configure`: the arm ticks, then the fleet advances one arm step, to `until`."""
    fleet, arm = state.fleet, state.arm
    while fleet.now < until - 1e-9:
        arm.tick(fleet)
        fleet.advance(min(arm.step_seconds, until - fleet.now))


__all__ = ["PRUNE_EVERY_SECONDS", "Forks", "SearchCost", "diverge", "timeline"]
