"""One driver on one clock: the twin, the exporter, the store, the predictors and the control loop stepped together
in simulated time: one path, one clock (docs/architecture.md).

    fleet.advance(15 s) -> exporter scrape -> store -> PredictorLoop.tick -> ControlLoop.tick -> TwinAdmin.apply

`run_arm(cfg, "predictive")` is that loop over the in-memory store; `infercast twin run --control ARM`, the demo and
the control bench call it; the daemon (`daemon.py`) runs the same `ControlLoop` on the wall clock against
Prometheus and a real backend.  Arms by name (`ARMS`; `arms.py`, `plans.py`):

- `none`, `basic`, `reactive`: no control, the gateway's token bucket, the seeds' fixes with an HPA;
- `scheduled`, `last-value`, `predict-linear`, `predictive`, `perfect-forecast`: `reactive` plus infercast's control
  loop, one decision logic (the reserve plan and the predictive policy), reading the present through the same
  pipeline and told five futures (`actuators/futures.py`): the calendar's announced peaks (`scheduled`), the last
  value with the calendar prior, Prometheus' `predict_linear` over 15 m (no calendar: what a Prometheus user has),
  the LSTM + the traffic combination with the calendar (`FORECASTS`), and the true future (`perfect-forecast`: the
  run's own offered traffic and the KV series of the `reactive` run of the same seed).  `perfect-forecast` was
  called `oracle`, which is still accepted; it is not an upper bound (the policy is the same heuristic);
- `hindsight`: the best plan of floors found by trying every candidate on the same arrivals, knowing the whole
  future (`plans.py`): the bound the control bench measures captured gain against.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from infercast.actuators.futures import CalendarInputs, TruthOverlay
from infercast.actuators.inputs import InputSource, StoreInputs, TruthInputs, reference_series
from infercast.actuators.ledger import action_ledger
from infercast.arm_names import ARMS, canonical
from infercast.config import FleetConfig
from infercast.simulator.control.arms import STEP_SECONDS, BasicArm, LoopArm, NoArm, ReactiveArm
from infercast.simulator.control.plans import (
    Plan,
    PlanArm,
    _challenge,
    better,
    candidate_plans,
    finish_search,
    search_hindsight,
    staged_search,
)
from infercast.simulator.twin.fleet import Fleet, build_fleet, trace_fleet
from infercast.simulator.twin.layout import protected_layout
from infercast.simulator.twin.run import RunResult, run_scenario, run_trace

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ForecastSpec:
    """What a forecast arm's predictor runs: the KV model (None: the deployed LSTM), the traffic model (None:
    the traffic model as deployed) and whether it reads the fleet file's event calendar."""

    kv: str | None
    rps: str | None
    calendar: bool


FORECASTS = {
    "last-value": ForecastSpec("last_value", "last_value", calendar=True),
    "predict-linear": ForecastSpec("predict_linear", "predict_linear", calendar=False),
    "predictive": ForecastSpec(None, None, calendar=True),
}
#: the pipeline of the arms told their future another way (`scheduled`: the calendar; `perfect-forecast`: the
#: truth): it reads the present like every other arm's and forecasts nothing they use (`actuators/futures.py`)
PRESENT = ForecastSpec("last_value", "last_value", calendar=False)


class Pipeline:
    """The embedded observability path over one fleet: its exporter scrapes the twin into the in-memory store, and
    the predictor service's loop forecasts from the store back into it — exactly what Prometheus would hold."""

    def __init__(self, cfg: FleetConfig, recorder, spec: ForecastSpec = FORECASTS["predictive"]) -> None:
        from infercast.predictors.service import PredictorLoop
        from infercast.store.memory import MemoryStore

        self.cfg = cfg
        self.recorder = recorder
        self.store = MemoryStore()
        read = cfg if spec.calendar else cfg.model_copy(update={"events": ()})
        self.predictor = PredictorLoop.from_config(read, kv_model=spec.kv, rps_model=spec.rps)
        self.exporter = None
        self.forecasts: list[tuple[float, object]] = []  # (time, forecast sample) as published

    def attach(self, fleet: Fleet) -> None:
        from infercast.exporters.server import Exporter
        from infercast.simulator.twin.source import TwinSource

        self.exporter = Exporter(
            fleet.cfg, [TwinSource(fleet.cfg, fleet=fleet)], recorder=self.recorder, clock=lambda: fleet.now
        )

    def step(self, now: float) -> None:
        self.exporter.scrape()
        for family in self.exporter.collect():
            for s in family.samples:
                if not s.name.endswith("_created"):
                    self.store.write(s.name, dict(s.labels), now, s.value)
        for s in self.predictor.tick(now, self.store):
            self.store.write(s.name, s.label_dict, now, s.value)
            self.forecasts.append((now, s))
        self.store.prune(now - self.cfg.predictor.history_seconds - 600.0)

    def close(self) -> None:
        if self.exporter is not None:
            self.exporter.close()


class ForecastArm(LoopArm):
    """`reactive` plus the control loop on forecasts made through the whole pipeline: the embedded one by default,
    or `pipeline(cfg, recorder)` with the same interface (the demo's live one through real servers).  The forecast
    arms differ only in `spec`, what the predictor runs."""

    def __init__(
        self,
        cfg: FleetConfig,
        name: str = "predictive",
        pipeline: Callable[[FleetConfig, object], Pipeline] | None = None,
        *,
        told: Callable[[object, Fleet], InputSource] | None = None,
        reserve: bool = True,
    ) -> None:
        """`told(live, fleet)`: the inputs the loop reads, built on the store's (`live`) by what the arm is told
        about the future (`actuators/futures.py`; None: the pipeline's own forecasts)."""
        from infercast.exporters.router import RouterRecorder

        self.recorder = RouterRecorder()
        make = pipeline or functools.partial(Pipeline, spec=FORECASTS.get(name, PRESENT))
        self.pipeline = make(protected_layout(cfg), self.recorder)

        def inputs(fleet: Fleet) -> InputSource:
            live = StoreInputs(self.pipeline.store, fleet.cfg, STEP_SECONDS)
            return live if told is None else told(live, fleet)

        super().__init__(cfg, name, inputs, reserve=reserve)

    def configure(self, fleet: Fleet) -> None:
        self.pipeline.attach(fleet)
        super().configure(fleet)

    def tick(self, fleet: Fleet) -> None:
        self.pipeline.step(fleet.now)
        super().tick(fleet)


def make_arm(name: str, cfg: FleetConfig, reference: dict | None = None, pipeline=None, *, reserve: bool = True):
    """An arm by name; `hindsight` is a search, not one arm: `run_arm` runs it.  Every controlled arm is the same
    control loop told a different future (`actuators/futures.py`); `reserve=False` is the ablation of the
    controller's reserve plan (`arms.LoopArm`)."""
    name = canonical(name)
    if name == "none":
        return NoArm()
    if name == "basic":
        return BasicArm(cfg)
    if name == "reactive":
        return ReactiveArm(cfg)
    if name == "scheduled":
        return ForecastArm(cfg, name, told=lambda live, fleet: CalendarInputs(live, fleet.cfg), reserve=reserve)
    if name in FORECASTS:
        return ForecastArm(cfg, name, pipeline if name == "predictive" else None, reserve=reserve)
    if name == "perfect-forecast":
        if reference is None:
            raise ValueError("arm 'perfect-forecast' reads the future from a reference run (run_arm makes it)")
        return ForecastArm(
            cfg,
            name,
            told=lambda live, fleet: TruthOverlay(
                live, TruthInputs(fleet.cfg, fleet, fleet.traffic, reference), fleet.cfg
            ),
            reserve=reserve,
        )
    if name == "hindsight":
        raise ValueError("arm 'hindsight' is a search over plans: run it with run_arm")
    raise ValueError(f"unknown arm {name!r}; use one of {', '.join(ARMS)}")


class Watched:
    """An arm with an observer: `watch(fleet, arm)` runs after each of the arm's ticks (the demo's progress bars and
    narration).  It only reads; the run is the same with or without it."""

    def __init__(self, arm, watch: Callable[[Fleet, object], None]) -> None:
        self.arm, self.watch = arm, watch
        self.name, self.step_seconds = arm.name, arm.step_seconds

    def layout(self, cfg: FleetConfig) -> FleetConfig:
        return self.arm.layout(cfg)

    def configure(self, fleet: Fleet) -> None:
        self.arm.configure(fleet)

    def tick(self, fleet: Fleet) -> None:
        self.arm.tick(fleet)
        self.watch(fleet, self.arm)


def run_arm(
    cfg: FleetConfig,
    arm: str = "none",
    seed: int | None = None,
    trace=None,
    step_seconds: float | None = None,
    *,
    reference: dict | None = None,
    watch: Callable[[Fleet, object], None] | None = None,
    pipeline: Callable[[FleetConfig, object], Pipeline] | None = None,
    search: str = "full",
    plans: Sequence[Plan] | None = None,
    reserve: bool = True,
) -> RunResult:
    """Run a scenario (or a trace) under an arm.  `perfect-forecast` reads the future from `reference`
    (`inputs.reference_series` of a `reactive` run on the same seed), which it runs first when not given;
    `hindsight` runs every candidate plan (`search`: `full` or `fast`, `plans.candidate_plans`; or exactly `plans`)
    and returns the best.  `pipeline` replaces the predictive arm's embedded pipeline (`ForecastArm`)."""
    arm = canonical(arm)
    step = step_seconds if step_seconds is not None else (5.0 if trace is None else 15.0)
    if arm == "hindsight":
        return run_hindsight(cfg, seed, trace, step, search=search, watch=watch, plans=plans)
    if arm == "perfect-forecast" and reference is None:
        reference = reference_series(run_arm(cfg, "reactive", seed, trace, step).timeseries)
    return _run(make_arm(arm, cfg, reference, pipeline, reserve=reserve), cfg, seed, trace, step, watch)


def _run(a, cfg: FleetConfig, seed, trace, step: float, watch=None) -> RunResult:
    driven = a if watch is None else Watched(a, watch)
    recorder = getattr(a, "recorder", None)
    try:
        if trace is None:
            result = run_scenario(cfg, driven, seed, step, recorder=recorder)
        else:
            result = run_trace(trace, cfg, driven, seed or 0, step, recorder=recorder)
    finally:
        if isinstance(a, ForecastArm):
            a.pipeline.close()
    loop = getattr(a, "loop", None)
    if loop is not None:
        result.events = sorted(result.events + loop.log, key=lambda e: e["t"])
        result.summary["decisions"] = sum(1 for e in loop.log if e["outcome"] == "applied")
    result.summary["actions"] = sum(1 for e in result.events if e.get("event") == "action")
    result.summary.update(action_ledger(cfg, getattr(getattr(a, "admin", None), "history", []), result.summary))
    return result


def true_traffic(cfg: FleetConfig, seed, trace):
    """(the traffic a run of this seed will be offered, its duration): what hindsight knows ahead."""
    if trace is None:
        fleet = build_fleet(protected_layout(cfg), seed)
        return fleet.traffic, cfg.scenario.duration_seconds
    fleet = trace_fleet(protected_layout(cfg), trace, seed or 0)
    return fleet.traffic, fleet.traffic.duration_s


def run_hindsight(
    cfg: FleetConfig,
    seed,
    trace,
    step: float,
    *,
    search: str = "full",
    watch=None,
    plans=None,
    check: bool = True,
    max_passes: int = 3,
    reactive: RunResult | None = None,
    journal=None,
    guarded: bool = False,
    starts: Sequence[Plan] = (),
) -> RunResult:
    """The best plan in hindsight (`plans.py`): every candidate on the same arrivals, the best kept; its summary
    says which plan won (`plan`), what every candidate scored (`candidates`), its single-lever check (`check`:
    `levers.descend`, with `check`), the best causal plan (`causal`: its change point at or after the surge's
    onset, with its own check) and what the search cost (`search_cost`: runs, pruned runs, simulated seconds against
    full replays; `forks.Forks`).  `search`: `full`, `fast` or `quick` (`levers.quick_search`, no check).
    `reactive`: the `reactive` run of the same seed, when the caller has it (the empty plan's run: not run again).
    `journal`: a file where every candidate's end is written as it comes, and read back, so that a search stopped
    half-way resumes where it was (`forks.Forks`); the result is the same as the search run at one go.  `guarded`:
    the descents never loosen a guard past the fleet file (`levers.guard_limits`): the plans the control loop, which
    only tightens them, can reach (the stages before the descent loosen none).  `starts`: plans found elsewhere (the
    guarded search's winner, which is a plan of the unguarded search too) run beside the search's own winner
    before the descent, which starts from the best of them."""
    from infercast.simulator.control.forks import Forks
    from infercast.simulator.control.levers import causal_search, descend, onset, onset_tick, quick_search

    if search not in ("fast", "full", "quick"):
        raise ValueError(f"unknown search {search!r}; use fast, full or quick")
    traffic, duration = true_traffic(cfg, seed, trace)

    # one plan given (the demo replays the plan a bench found): run it once, watched
    once = watch if plans is not None and len(plans) == 1 else None
    if once is not None:
        best = _run(PlanArm(cfg, "hindsight", plans[0]), cfg, seed, trace, step, once)
        return _describe(best, plans[0], search, [], None)
    run = Forks(cfg, seed, trace, step, journal=journal)
    if reactive is not None:
        run.know(Plan(), reactive)
    explicit = plans is not None
    started = onset(traffic, trace)
    at = onset_tick(started) if started is not None else None
    causal = None
    if explicit:
        plan, best, tried = search_hindsight(run, plans)
    elif search == "quick":
        plan, best, tried = quick_search(cfg, run, traffic, duration, at)
    elif search == "fast":
        plan, best, tried = staged_search(cfg, duration, traffic, run)
    else:
        plan, best, tried = search_hindsight(run, candidate_plans(cfg, duration, traffic))
        plan, best, tried = finish_search(cfg, run, plan, best, tried, traffic, duration)
    if starts and not explicit:
        plan, best, tried = _challenge(run, plan, best, tried, list(starts))
    verdict = None
    if check and not explicit and search != "quick":
        plan, best, tried, verdict = descend(
            cfg, run, plan, best, tried, duration, max_passes=max_passes, guarded=guarded
        )
        if at is not None:
            reactive = run(Plan())
            cplan, cres, ctried = causal_search(cfg, run, traffic, duration, at, reactive)
            cplan, cres, ctried, cverdict = descend(
                cfg, run, cplan, cres, ctried, duration, earliest=at, max_passes=max_passes, guarded=guarded
            )
            causal = {
                "onset_seconds": started,
                "plan": cplan.to_dict(),
                "plan_text": cplan.describe(),
                "check": cverdict.to_dict(),
                "candidates": len(ctried),
                "summary": {k: v for k, v in cres.summary.items() if not isinstance(v, dict | list)}
                | {"tiers": cres.summary.get("tiers")},
            }
            tried = tried + ctried
            if better(cres.summary, best.summary):  # a causal plan is a hindsight candidate too
                # ... checked again without the onset's constraint (its change point may move earlier); the
                # neighbours the causal descent ran are answered from the runs kept (`Forks`)
                plan, best, tried, verdict = descend(
                    cfg, run, cplan, cres, tried, duration, max_passes=max_passes, guarded=guarded
                )
    if watch is not None and once is None:  # the demo's progress and narration follow the winning plan's run
        best = _run(PlanArm(cfg, "hindsight", plan), cfg, seed, trace, step, watch)
    else:  # a winner answered from the journal has figures only: its run made again, in full
        best = run.materialize(plan, best)
    best.summary["search_cost"] = run.cost.to_dict()
    if guarded:
        best.summary["guarded"] = True
    return _describe(best, plan, search, tried, verdict, causal)


def _describe(best: RunResult, plan: Plan, search: str, tried: list[dict], verdict, causal=None) -> RunResult:
    best.summary["plan"] = plan.to_dict()
    best.summary["plan_text"] = plan.describe()
    best.summary["search"] = search
    best.summary["candidates"] = tried
    best.summary["check"] = verdict.to_dict() if verdict is not None else None
    # a plan is a bound only when its single-lever check passed; otherwise the best found (issue 42 item 3)
    best.summary["plan_is"] = verdict.label if verdict is not None else "best found"
    if causal is not None:
        best.summary["causal"] = causal
    return best


__all__ = [
    "ARMS",
    "FORECASTS",
    "ForecastArm",
    "Pipeline",
    "Watched",
    "canonical",
    "make_arm",
    "run_arm",
    "run_hindsight",
]
