"""Run every arm of the demo on the same arrivals and collect what the report and the table show.

Each arm goes through the one driver (`infercast.simulator.control.driver.run_arm`): `predictive` is the whole pipeline
(twin -> exporter -> in-memory store -> predictors -> control loop -> the twin's admin API), `perfect-forecast` the same
control loop fed the true future (read from the `reactive` run, which the demo has already made).  A `Watched`
observer reads the fleet after each tick for the progress bar and the narration; it never acts.

Alert lead (`alert_lead_seconds`): how long before the avalanche each arm's page fires.  The avalanche is the moment
the unprotected fleet (`none`, the same arrivals) first has an instance over the predictive trigger (0.75 KV usage):
every arm faces the same surge, so one reference time makes the leads comparable.  The page is what that arm's
operator gets: with no forecaster (`none`, `basic`, `reactive`), the threshold alert `InfercastKVCacheUsageHigh` as
`alertrules` writes it (the fullest instance's median over the last `for_kv_usage` above the memory breaker);
`predictive` gets infercast's `InfercastKVCacheForecastBreach` (the published upper band over the trigger for the
rule's `for:`, `infercast.predictors.alarm`); `perfect-forecast` pages when the true future crosses within the horizon.
Negative means the page came after the avalanche started; None, that the arm was never paged.  An arm run live
(`live.py`: through real Prometheus and Alertmanager) is paged when Alertmanager's notification reached the demo
instead, and its summary says so (`alert_source`: "alertmanager" rather than "computed").
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from infercast.catalog import FORECAST_KV_CACHE_USAGE_RATIO
from infercast.config import FleetConfig, PredictorConfig, Thresholds
from infercast.runfiles import write_json, write_run

P99_WINDOW_SECONDS = 30.0
RESULTS = Path(__file__).resolve().parents[3] / "docs" / "results"  # the benches' results, in a checkout
#: the causal plans the demo replays (`bench/demo.py --causal` writes them, with the command that made them)
CAUSAL_FILE = "demo-causal.json"
#: what every arm reports under "arms" in summary.json (the first seven are the issue's; the rest help read them)
SUMMARY_KEYS = (
    "oom_events", "p99_latency_ms", "p99_latency_ms_pre", "goodput_rps", "recovery_seconds", "memory_efficiency",
    "alert_lead_seconds", "urgent_goodput_rps", "gpu_seconds", "recovered", "offered", "served", "rejected", "failed",
    "in_flight", "actions",
    "first_oom_seconds", "wall_seconds", "alert_source",
)  # fmt: skip


@dataclass
class ArmRun:
    """One arm's run: its summary (SUMMARY_KEYS), its pools' samples, its events and what the report plots."""

    name: str
    summary: dict
    timeseries: pd.DataFrame  # per pool and sample: kv_usage (mean), kv_usage_max, rps, long_share, ...
    events: list[dict]  # oom, killed, degradation, action (applied to the fleet), decision (the control loop's)
    p99: pd.DataFrame  # urgent P99 per window: t (window end), p99_ms
    forecasts: pd.DataFrame  # predictive only: t, pool, version, aggregate, yhat, yhat_lower, yhat_upper
    page_seconds: float | None = None
    page_alert: str = ""
    live: dict | None = None  # run through real servers (live.py): how, and the page Alertmanager delivered

    def write(self, out: Path) -> None:
        """OUT/timeseries.csv, events.json, forecasts.csv (predictive) and live.json (a live run)."""
        write_run(out, self.timeseries, self.events, forecasts=self.forecasts)
        if self.live is not None:
            write_json(out / "live.json", self.live, indent=1)


@dataclass
class DemoResult:
    scenario: str
    seed: int
    arms: dict[str, ArmRun] = field(default_factory=dict)
    avalanche_seconds: float | None = None  # the reference time of the alert leads (see the module docstring)
    surge_start_seconds: float | None = None
    trigger: float = Thresholds().kv_forecast_trigger
    horizon_seconds: float = PredictorConfig().horizon_seconds
    #: what the calendar knew: the fleet file's `events` on the run's clock (name, start, end, expected_rps)
    events: list[dict] = field(default_factory=list)
    #: predictor.event_onset_seconds: when an announced event's ceiling starts
    event_onset_seconds: float = PredictorConfig().event_onset_seconds

    def summary(self) -> dict:
        return {
            "scenario": self.scenario,
            "seed": self.seed,
            "avalanche_seconds": self.avalanche_seconds,
            "surge_start_seconds": self.surge_start_seconds,
            "arms": {name: {k: run.summary.get(k) for k in SUMMARY_KEYS} for name, run in self.arms.items()},
            "live": next((run.live for run in self.arms.values() if run.live is not None), None),
        }


# --- what happened, in plain words --------------------------------------------------------------------------------
_NOT_FIELDS = {"t", "event", "outcome", "action", "intent", "reason", "detail"}


def _what(e: dict) -> str:
    fields = ", ".join(f"{k}={v}" for k, v in e.items() if k not in _NOT_FIELDS and v is not None)
    return f"{e.get('action', 'action')} {fields}".strip()


def describe_event(e: dict) -> str | None:
    """One line for the narration and the report's timeline (None: not worth a line)."""
    if e["event"] == "decision":
        if e["outcome"] not in ("applied", "rolled_back", "failed", "refused"):
            return None
        why = e.get("reason") or ""
        return f"{e['outcome']}: {_what(e)}" + (f" ({why})" if why else "")
    if e["event"] == "action":
        return _what(e)
    if e["event"] == "oom":
        return f"OOM on {e['node']} ({e['pool']}) at memory {e['memory_usage']:.2f}"
    if e["event"] == "killed":
        return f"node {e['node']} ({e['pool']}) killed (injected fault)"
    if e["event"] == "degradation":
        return f"failover {e['from_pool']} -> {e['to_pool']} ({e['reason']}, {e['requests']} requests)"
    return None


class Narrator:
    """Reads the fleet after each tick: advances the arm's progress and reports its new actions and OOMs."""

    def __init__(self, arm: str, until: float, progress: Callable[[str, float, list[str]], None]) -> None:
        self.arm, self.until, self.progress = arm, until, progress
        self.fleet = None
        self.seen_actions = 0
        self.seen_decisions = 0
        self.seen_ooms = 0

    def __call__(self, fleet, arm) -> None:
        self.fleet = fleet
        lines = []
        loop = getattr(arm, "loop", None)
        decided = loop.log[self.seen_decisions :] if loop is not None else []
        self.seen_decisions += len(decided)
        # what the control loop applied is said once, with its reason; the rest (the HPA's) as the fleet saw it
        by_loop = {(e["t"], e["action"]) for e in decided if e["outcome"] in ("applied", "rolled_back")}
        for t, a in fleet.actions[self.seen_actions :]:
            if (t, getattr(a, "kind", "")) not in by_loop:
                lines.append(f"t={t:5.0f}s {a.describe() if hasattr(a, 'describe') else a}")
        self.seen_actions = len(fleet.actions)
        for e in decided:
            if e["outcome"] in ("applied", "rolled_back", "failed"):
                lines.append(f"t={e['t']:5.0f}s {describe_event(e)}")
        ooms = sum(n.oom_events for n in fleet.nodes)
        if ooms > self.seen_ooms:
            lines.append(f"t={fleet.now:5.0f}s {ooms - self.seen_ooms} OOM (total {ooms})")
            self.seen_ooms = ooms
        self.progress(self.arm, min(1.0, fleet.now / self.until), lines)


def urgent_p99(fleet, until: float, window: float = P99_WINDOW_SECONDS) -> pd.DataFrame:
    """Urgent P99 latency per `window` seconds of first sends (NaN where nothing urgent finished)."""
    ends = np.arange(window, until + 1e-9, window)
    p99 = [fleet.book.quantile(0.99, 0, t - window, t) * 1000.0 for t in ends]
    return pd.DataFrame({"t": ends, "p99_ms": p99})


#: the frame's column of each published `band` (the report and runs/demo/*/forecasts.csv keep these names)
BAND_COLUMNS = {"point": "yhat", "lower": "yhat_lower", "upper": "yhat_upper"}


def published_kv_forecasts(arm) -> pd.DataFrame:
    """The KV forecasts the predictive pipeline published (at the horizon), one row per time, pool and aggregate."""
    rows: dict[tuple, dict] = {}
    for t, s in getattr(getattr(arm, "pipeline", None), "forecasts", ()):
        if s.name != FORECAST_KV_CACHE_USAGE_RATIO:
            continue
        lab = s.label_dict
        key = (t, lab["pool"], lab["version"], lab.get("aggregate", "mean"), lab.get("forecaster", ""))
        rows.setdefault(key, {})[BAND_COLUMNS[lab["band"]]] = s.value
    out = [
        {"t": t, "pool": p, "version": v, "aggregate": a, "model": m, **vals}
        for (t, p, v, a, m), vals in sorted(rows.items())
    ]
    cols = ["t", "pool", "version", "aggregate", "model", "yhat", "yhat_lower", "yhat_upper"]
    return pd.DataFrame(out, columns=cols)


# --- pages --------------------------------------------------------------------------------------------------------
def first_crossing(ts: pd.DataFrame, level: float, after: float = 0.0) -> float | None:
    """First sample time at which some pool's fullest instance is at or over `level`."""
    hit = ts[(ts["t"] >= after) & (ts["kv_usage_max"] >= level)]
    return float(hit["t"].min()) if len(hit) else None


def threshold_page(ts: pd.DataFrame, breaker: float, window_s: float) -> float | None:
    """When `InfercastKVCacheUsageHigh` first fires: some pool's fullest instance has a median over the last
    `window_s` above the memory breaker (the rule's `quantile_over_time(0.5, ...[window]) > breaker`)."""
    first = None
    for _, g in ts.sort_values("t").groupby("pool"):
        s = pd.Series(g["kv_usage_max"].to_numpy(), index=pd.to_timedelta(g["t"].to_numpy(), unit="s"))
        med = s.rolling(f"{window_s:g}s").median()
        fired = med.index[(med > breaker).to_numpy()]
        if len(fired):
            t = fired[0].total_seconds()
            first = t if first is None else min(first, t)
    return first


def forecast_page(fc: pd.DataFrame, policy) -> float | None:
    """When `InfercastKVCacheForecastBreach` first fires on the published upper bands (the max aggregate, the most
    pessimistic model, per pool), with the rule's persistence."""
    if fc.empty:
        return None
    first = None
    worst = fc[fc["aggregate"] == "max"].groupby(["pool", "t"])["yhat_upper"].max().reset_index()
    for _, g in worst.groupby("pool"):
        g = g.sort_values("t")
        firing = policy.run(g["yhat_upper"].to_numpy())
        if firing.any():
            t = float(g["t"].to_numpy()[int(np.argmax(firing))])
            first = t if first is None else min(first, t)
    return first


def calendar(cfg: FleetConfig) -> list[dict]:
    """The fleet file's events whose times are seconds on the run's clock (an ISO date is another run's)."""
    out = []
    for e in cfg.events:
        try:
            start, end = float(e.start), float(e.end)
        except ValueError:
            continue
        out.append({"name": e.name, "start": start, "end": end, "expected_rps": e.expected_rps})
    return out


# --- running ------------------------------------------------------------------------------------------------------
def stored_hindsight_plan(scenario: str, seed: int, results: Path = RESULTS) -> tuple[object, str] | None:
    """(the plan, where it comes from) that `bench/control.py` found for `hindsight` on this scenario and seed, as
    `docs/results/control.json` holds it; None where the bench did not run them (a trace, a scenario of your own, an
    installed package without the checkout's docs).  Replaying it costs one run of the twin; searching, several."""
    from infercast.simulator.control.plans import Plan

    cell = published_hindsight_cell(scenario, seed, results)
    if cell is None:
        return None
    plan = Plan.from_dict(cell["arms"]["hindsight"]["plan_steps"])
    return plan, f"the plan bench/control.py found (control.json, search {cell.get('search')})"


def published_hindsight_cell(scenario: str, seed: int, results: Path = RESULTS) -> dict | None:
    """The cell of `docs/results/control.json` for this scenario and seed whose `hindsight` row holds a plan
    (`plan_steps`, with the row's figures beside it); None where there is none or the file cannot be read."""
    try:
        cells = json.loads((results / "control.json").read_text())["cells"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for cell in cells:
        plan = (cell.get("arms", {}).get("hindsight") or {}).get("plan_steps")
        if cell.get("scenario") == scenario and cell.get("seed") == seed and plan is not None:
            return cell
    return None


def stored_causal_plan(scenario: str, seed: int, results: Path = RESULTS) -> tuple[object, str] | None:
    """(the plan, where it comes from) of `causal` -- the best plan found whose change point is at or after the
    surge's onset (`levers.causal_search`: a controller that sees the surge when it starts and decides perfectly
    from there) -- as `bench/demo.py --causal` stored it for this scenario and seed in `docs/results/demo-causal.json`;
    None where none is stored (another scenario or seed, a trace, an installed package)."""
    from infercast.simulator.control.plans import Plan

    path = results / CAUSAL_FILE
    try:
        doc = json.loads(path.read_text())
        cells, command = doc["cells"], doc["command"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    for cell in cells:
        if cell.get("scenario") == scenario and cell.get("seed") == seed and cell.get("plan") is not None:
            return Plan.from_dict(
                cell["plan"]
            ), f"the causal plan {cell.get('search', 'found')} ({path.name}: {command})"
    return None


class _TagArm(logging.Filter):
    """Puts `[arm] ` before every record a handler of this process prints while the arm runs."""

    def __init__(self, arm: str) -> None:
        super().__init__()
        self.arm = arm

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "demo_arm", None):
            record.msg, record.args, record.demo_arm = f"[{self.arm}] {record.getMessage()}", None, self.arm
        return True


class _ToProgress(logging.Handler):
    """A worker process's log records (warnings and worse, what it printed before) sent to the parent as the arm's
    lines: printed under the arm's name with its progress, never as a bare line under another arm's bar."""

    def __init__(self, arm: str, progress) -> None:
        super().__init__(logging.WARNING)
        self.arm, self.progress = arm, progress

    def emit(self, record: logging.LogRecord) -> None:
        try:
            self.progress(self.arm, None, [f"{record.levelname.lower()}: {record.getMessage()}"])
        except Exception:  # a closed queue at shutdown: the line is lost, the run is not
            self.handleError(record)


@contextmanager
def arm_logs(arm: str, progress) -> Iterator[None]:
    """Every log line of the arm's run says which arm it is (issue 38: `actuator frozen at 0: ...` printed under
    another arm's heading).  In a process with logging set up (the command line's), its handlers tag each line
    `[arm]`; in a worker process with none, the lines go to `progress` as the arm's lines."""
    root = logging.getLogger()
    if root.handlers:
        tag = _TagArm(arm)
        handlers = list(root.handlers)
        for h in handlers:
            h.addFilter(tag)
        try:
            yield
        finally:
            for h in handlers:
                h.removeFilter(tag)
    else:
        handler = _ToProgress(arm, progress)
        root.addHandler(handler)
        try:
            yield
        finally:
            root.removeHandler(handler)


def run_one(
    cfg: FleetConfig, name: str, seed: int, trace, reference: dict | None, progress, pipeline=None, plans=None
) -> ArmRun:
    """One arm through the one driver, watched by a `Narrator` that reports to `progress(arm, fraction, lines)`;
    `pipeline` replaces the predictive arm's embedded one (`run_arm`); `plans`, hindsight's search (exactly those
    plans: the demo replays the bench's)."""
    from infercast.simulator.control.driver import run_arm

    until = trace.duration_s if trace is not None else cfg.scenario.duration_seconds
    step = 15.0 if trace is not None else 5.0
    # `causal` is a plan replayed as hindsight's are (the driver's plan arm), under its own name
    driven = "hindsight" if name == "causal" else name
    narrator = Narrator(name, until, progress)
    holder: dict = {}

    def watch(fleet, arm) -> None:
        holder["arm"] = arm
        narrator(fleet, arm)

    t0 = time.perf_counter()
    with arm_logs(name, progress):
        res = run_arm(
            cfg, driven, seed, trace, step, reference=reference, watch=watch, pipeline=pipeline, search="fast",
            plans=plans,
        )  # fmt: skip
    s = dict(res.summary)
    if name == "causal":
        s["control"] = "causal"
    s["actions"] = sum(1 for e in res.events if e["event"] == "action")
    s["wall_seconds"] = round(time.perf_counter() - t0, 1)
    fleet = narrator.fleet
    return ArmRun(
        name=name,
        summary=s,
        timeseries=res.timeseries,
        events=res.events,
        p99=urgent_p99(fleet, until) if fleet is not None else pd.DataFrame(columns=["t", "p99_ms"]),
        forecasts=published_kv_forecasts(holder.get("arm")),
    )


class _QueueProgress:
    """`progress` for a worker process: the messages go to the parent through a queue (a picklable callable)."""

    def __init__(self, queue) -> None:
        self.queue = queue

    def __call__(self, arm: str, frac: float | None, lines: list[str]) -> None:
        self.queue.put((arm, frac, lines))


def _run_in_worker(cfg, name, seed, trace, reference, queue, plans=None) -> ArmRun:
    return run_one(cfg, name, seed, trace, reference, _QueueProgress(queue), plans=plans)


def run_demo(
    cfg: FleetConfig,
    arms: Sequence[str],
    seed: int,
    scenario: str,
    progress: Callable[[str, float, list[str]], None] = lambda arm, frac, lines: None,
    trace=None,
    jobs: int = 1,
    live=None,
    done: Callable[[ArmRun], None] = lambda run: None,
) -> DemoResult:
    """Every arm on the same arrivals, `jobs` at a time (processes; the arms share nothing, so the results are the
    same for any `jobs`).  The perfect-forecast arm reads the future from the `reactive` run, so it starts once that
    is done.
    With `live` (a `live.Live`), its arms run first, in this process, through the real servers.  `done(run)` is
    called as each arm finishes."""
    from infercast.actuators.inputs import reference_series
    from infercast.alertrules.settings import AlertSettings
    from infercast.predictors.deployed import alarm_policy

    out = DemoResult(
        scenario,
        seed,
        trigger=cfg.thresholds.kv_forecast_trigger,
        horizon_seconds=cfg.predictor.horizon_seconds,
        events=calendar(cfg),
        event_onset_seconds=cfg.predictor.event_onset_seconds,
    )
    runs: dict[str, ArmRun] = {}
    for name in [a for a in arms if live is not None and a in live.arms]:
        runs[name] = live.run(cfg, seed, trace, progress)
        progress(name, 1.0, [])
        done(runs[name])

    def reference() -> dict | None:  # without `reactive` among the arms, run_arm makes its own reference run
        return reference_series(runs["reactive"].timeseries) if "reactive" in runs else None

    stored = stored_hindsight_plan(scenario, seed) if "hindsight" in arms and trace is None else None
    plans = {"hindsight": [stored[0]]} if stored is not None else {}
    causal = stored_causal_plan(scenario, seed) if "causal" in arms and trace is None else None
    if "causal" in arms and causal is None:
        raise ValueError(
            f"no causal plan is stored for {scenario} seed {seed} (bench/demo.py --causal --scenario {scenario} "
            f"--seed {seed} finds and stores one); leave causal out with --arms"
        )
    if causal is not None:
        plans["causal"] = [causal[0]]
    first = [a for a in arms if a != "perfect-forecast" and a not in runs]
    if jobs <= 1:
        for name in [*first, *(["perfect-forecast"] if "perfect-forecast" in arms else [])]:
            ref = reference() if name == "perfect-forecast" else None
            runs[name] = run_one(cfg, name, seed, trace, ref, progress, plans=plans.get(name))
            progress(name, 1.0, [])
            done(runs[name])
    else:
        _run_parallel(cfg, arms, first, seed, trace, jobs, progress, runs, reference, finished=done, plans=plans)
    if stored is not None:
        runs["hindsight"].summary["search"] = stored[1]
    if causal is not None:
        runs["causal"].summary["search"] = causal[1]
    out.arms = {a: runs[a] for a in arms}  # in the order asked
    out.surge_start_seconds = next(iter(runs.values())).summary.get("surge_start_seconds")
    _alert_leads(out, cfg, AlertSettings(thresholds=cfg.thresholds), alarm_policy(cfg.thresholds, 15.0))
    return out


def _run_parallel(cfg, arms, first, seed, trace, jobs, progress, runs, reference, finished, plans) -> None:
    import multiprocessing as mp
    import queue as queue_mod
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    ctx = mp.get_context("spawn")  # no fork of a process that may hold torch's or BLAS's threads
    with ctx.Manager() as manager, ProcessPoolExecutor(max_workers=jobs, mp_context=ctx) as pool:
        q = manager.Queue()
        # the slow arms first, so perfect-forecast (which waits for reactive) is not left alone at the end
        order = sorted(first, key=lambda a: a not in ("reactive", "predictive"))
        pending = {pool.submit(_run_in_worker, cfg, a, seed, trace, None, q, plans.get(a)): a for a in order}
        perfect_due = "perfect-forecast" in arms
        if perfect_due and "reactive" not in first:
            pending[pool.submit(_run_in_worker, cfg, "perfect-forecast", seed, trace, None, q)] = "perfect-forecast"
            perfect_due = False
        while pending:
            done, _ = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
            _drain(q, progress, queue_mod.Empty)
            for f in done:
                name = pending.pop(f)
                runs[name] = f.result()
                progress(name, 1.0, [])
                finished(runs[name])
                if name == "reactive" and perfect_due:
                    pending[pool.submit(_run_in_worker, cfg, "perfect-forecast", seed, trace, reference(), q)] = (
                        "perfect-forecast"
                    )
                    perfect_due = False
        _drain(q, progress, queue_mod.Empty)


def _drain(q, progress, empty) -> None:
    while True:
        try:
            arm, frac, lines = q.get_nowait()
        except empty:
            return
        if frac is None or frac < 1.0 or lines:
            progress(arm, None if frac is None else min(frac, 0.99), lines)


def _alert_leads(out: DemoResult, cfg: FleetConfig, rules, policy) -> None:
    ref = out.arms.get("none") or next(iter(out.arms.values()))
    out.avalanche_seconds = first_crossing(ref.timeseries, out.trigger)
    for name, run in out.arms.items():
        run.summary["alert_source"] = "computed" if run.live is None else "alertmanager"
        if run.live is not None:  # paged by what Alertmanager delivered (live.py); the same forecasts, computed:
            run.live["page_computed_seconds"] = forecast_page(run.forecasts, policy)
        elif name == "predictive":
            run.page_seconds, run.page_alert = forecast_page(run.forecasts, policy), "InfercastKVCacheForecastBreach"
        elif name == "perfect-forecast":
            # the true future crosses within the horizon from (avalanche - horizon) on
            page = None if out.avalanche_seconds is None else max(0.0, out.avalanche_seconds - out.horizon_seconds)
            run.page_seconds, run.page_alert = page, "the true future (no alert rule)"
        else:
            page = threshold_page(run.timeseries, cfg.thresholds.memory_breaker, float(rules.for_kv_usage))
            run.page_seconds, run.page_alert = page, "InfercastKVCacheUsageHigh"
        lead = None
        if run.page_seconds is not None and out.avalanche_seconds is not None:
            lead = round(out.avalanche_seconds - run.page_seconds, 1)
        run.summary["alert_lead_seconds"] = lead


__all__ = ["SUMMARY_KEYS", "ArmRun", "DemoResult", "describe_event", "run_demo"]
