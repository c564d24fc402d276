"""One driver on one clock: the twin, the exporter, the store, the predictors and the control loop stepped together
in simulated time: one path, one clock (docs/architecture.md).

    fleet.advance(15 s) -> exporter scrape -> store -> PredictorLoop.tick -> ControlLoop.tick -> TwinAdmin.apply

`run_arm(cfg, "predictive")` is that loop over the in-memory store; `infercast twin run --control ARM` and the demo
call it; the daemon (`daemon.py`) runs the same `ControlLoop` on the wall clock against Prometheus and a real
backend.  Arms by name: `none`, `basic`, `reactive`, `predictive`, `oracle` (`arms.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from actuators.arms import STEP_SECONDS, BasicArm, LoopArm, NoArm, ReactiveArm
from actuators.inputs import StoreInputs, TruthInputs, reference_series
from infercast.config import FleetConfig
from infercast.twin.fleet import Fleet
from infercast.twin.layout import protected_layout
from infercast.twin.run import RunResult, run_scenario, run_trace

log = logging.getLogger(__name__)

ARMS = ("none", "basic", "reactive", "predictive", "oracle")


class Pipeline:
    """The embedded observability path over one fleet: its exporter scrapes the twin into the in-memory store, and
    the predictor service's loop forecasts from the store back into it — exactly what Prometheus would hold."""

    def __init__(self, cfg: FleetConfig, recorder) -> None:
        from infercast.store.memory import MemoryStore
        from predictors.service import PredictorLoop

        self.cfg = cfg
        self.recorder = recorder
        self.store = MemoryStore()
        self.predictor = PredictorLoop.from_config(cfg)
        self.exporter = None
        self.forecasts: list[tuple[float, object]] = []  # (time, forecast sample) as published

    def attach(self, fleet: Fleet) -> None:
        from exporters.server import Exporter
        from exporters.twin import TwinSource

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


class PredictiveArm(LoopArm):
    """`reactive` plus the control loop on infercast's forecasts, through the whole pipeline: the embedded one by
    default, or `pipeline(cfg, recorder)` with the same interface (the demo's live one through real servers)."""

    def __init__(self, cfg: FleetConfig, pipeline: Callable[[FleetConfig, object], Pipeline] | None = None) -> None:
        from exporters.router import RouterRecorder

        self.recorder = RouterRecorder()
        self.pipeline = (pipeline or Pipeline)(protected_layout(cfg), self.recorder)
        super().__init__(cfg, "predictive", lambda fleet: StoreInputs(self.pipeline.store, fleet.cfg, STEP_SECONDS))

    def configure(self, fleet: Fleet) -> None:
        self.pipeline.attach(fleet)
        super().configure(fleet)

    def tick(self, fleet: Fleet) -> None:
        self.pipeline.step(fleet.now)
        super().tick(fleet)


def make_arm(name: str, cfg: FleetConfig, reference: dict | None = None, pipeline=None):
    if name == "none":
        return NoArm()
    if name == "basic":
        return BasicArm(cfg)
    if name == "reactive":
        return ReactiveArm(cfg)
    if name == "predictive":
        return PredictiveArm(cfg, pipeline)
    if name == "oracle":
        if reference is None:
            raise ValueError("arm 'oracle' reads the future from a reference run (run_arm makes it)")
        return LoopArm(cfg, "oracle", lambda fleet: TruthInputs(fleet.cfg, fleet, fleet.traffic, reference))
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
) -> RunResult:
    """Run a scenario (or a trace) under an arm.  The oracle reads the future from `reference`
    (`inputs.reference_series` of a `reactive` run on the same seed), which it runs first when not given.
    `pipeline` replaces the predictive arm's embedded pipeline (`PredictiveArm`)."""
    step = step_seconds if step_seconds is not None else (5.0 if trace is None else 15.0)
    if arm == "oracle" and reference is None:
        reference = reference_series(run_arm(cfg, "reactive", seed, trace, step).timeseries)
    a = make_arm(arm, cfg, reference, pipeline)
    driven = a if watch is None else Watched(a, watch)
    recorder = getattr(a, "recorder", None)
    try:
        if trace is None:
            result = run_scenario(cfg, driven, seed, step, recorder=recorder)
        else:
            result = run_trace(trace, cfg, driven, seed or 0, step, recorder=recorder)
    finally:
        if isinstance(a, PredictiveArm):
            a.pipeline.close()
    loop = getattr(a, "loop", None)
    if loop is not None:
        result.events = sorted(result.events + loop.log, key=lambda e: e["t"])
        result.summary["decisions"] = sum(1 for e in loop.log if e["outcome"] == "applied")
    return result


__all__ = ["ARMS", "Pipeline", "Watched", "make_arm", "run_arm"]
