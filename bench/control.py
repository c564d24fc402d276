"""The control benchmark: does the forecast, not the calendar, earn the gain?  Every scenario x arm x seed, one table.

    .venv/bin/python bench/control.py                       # every scenario and arm, seeds 0-2; publishes
    .venv/bin/python bench/control.py --scenarios calm-day --arms reactive,predictive --seeds 0 --no-publish
    .venv/bin/python bench/control.py --search full         # hindsight over every static and one-change plan
    .venv/bin/python bench/control.py --quick               # seed 0, a few arms, the quick search: < 5 min quiet
    .venv/bin/python bench/control.py --rerender            # the tables again from docs/results/control.json
    nice -n 10 .venv/bin/python bench/control.py --cells runs/control_cells.jsonl --arms reactive,hindsight
                                                            # resumable: cells kept, each search journalled
    .venv/bin/python bench/control.py --cells runs/control_cells.jsonl --measured-only   # publish what is measured

Arms (`infercast/simulator/control/driver.py`): `reactive` (the seeds' fixes and an HPA), `scheduled` (pre-scale before
each calendar event, from its expected peak), `last-value` (with the calendar prior), `predict-linear` (Prometheus'
`predict_linear` over 15 m, no calendar), `predictive` (LSTM + Prophet, with the calendar), `perfect-forecast` (the
same policy fed the true future) and `hindsight` (the best plan knowing the run's whole future; a bound only where
its single-lever check passed, `infercast/simulator/control/levers.py`), with `causal` beside it (the best plan acting
only after the surge's onset, found by the same search).  The forecast arms share one policy and differ only in the
forecast they are fed.  Hindsight's candidates are forked from one plan-less run
(`infercast/simulator/control/forks.py`); the bench prints its wall time per arm and per cell, and the search's own cost
per cell.

Scenarios (chosen before any tuning, and none was tuned on: `SCENARIOS` says why each is here):
- `flash-sale`: seed 000's sale, announced in the calendar with its expected peak;
- `flash-sale-unannounced`: the same surge with an empty calendar (what the forecast alone can do);
- `calm-day`: the regular traffic only: every action is a false one, every extra GPU-second a cost;
- three surges cut from the real traces shipped in tests/data/traces (`--traces DIR` for the full ones), replayed on
  a fleet sized for them (`infercast twin run --trace F --size-fleet`: always-on pools for the median load, standby
  for the peak at KV <= 0.85), where a node's 90 s cold start is longer than the surge's ramp;
- three surges laid on those traces (`--surge START,SECONDS,FACTOR,RAMP`: the trace's own rate times FACTOR), the
  fleet sized for the trace without them, from three different traces (Azure code, Mooncake, ServeGen).

Per arm, the mean over seeds and the spread (max - min): urgent goodput (first token within the urgent SLO, per
second), goodput, token-weighted goodput, urgent P99 TTFT, OOMs, GPU-seconds held, actions, false actions per hour
(a scale-up, tightening or shift after which the `reactive` run of the same seed has no pool's fullest instance
at or over the trigger within the horizon: nothing to protect against) and captured gain = (arm - reactive) /
(hindsight - reactive) on urgent goodput (blank where hindsight gains less than 2% of reactive's: nothing to
capture).

`--publish` (the default for a full run) writes docs/results/control.json and the marked tables of docs/control.md
and the README (bench/results.py).  With `--cells FILE` each scenario x seed is kept as it finishes, with the arms it
ran (the plan arms can be measured first and the loop arms later: a rerun runs only the arms a cell lacks), and
hindsight's search journals every candidate beside it (`FILE`'s stem + `_search/`), so that a cell stopped half-way
resumes its search where it was.  `--measured-only` tables and publishes the cells kept, running none: each row names
the seeds it covers, and an arm with none reads "not measured" (never an older run's figures, unless
`--import-hindsight docs/results/control.json` asks for that run's hindsight plans where a cell has none: each such
row and plan is marked †, and only cells whose `reactive` is the same in both runs take one).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

ARMS = (
    "reactive", "scheduled", "last-value", "predict-linear", "predictive", "perfect-forecast", "hindsight",
    "hindsight-guarded",
)  # fmt: skip
#: the plan searches (each brings its causal plan, a row of its own) and how the rows of a cell are ordered: the
#: loop arms, then causal and hindsight, then the same two within the fleet file's guards (`levers.guard_limits`)
SEARCHES = {"hindsight": "causal", "hindsight-guarded": "causal-guarded"}
PLAN_ROWS = tuple(row for search, causal in SEARCHES.items() for row in (causal, search))
SEEDS = (0, 1, 2)
#: `--quick`: seed 0 of these, hindsight's quick search (the reservoir's splits from the onset and the first change
#: point: a best found, no check)
QUICK_ARMS = ("reactive", "predictive", "hindsight")
QUICK_SCENARIOS = ("flash-sale-unannounced", "calm-day")
KEYS = (
    "urgent_goodput_rps", "goodput_rps", "token_goodput_tps", "p99_latency_ms", "p99_latency_ms_pre", "oom_events",
    "gpu_seconds", "actions", "offered", "served", "rejected", "failed", "in_flight", "simulated_seconds",
)  # fmt: skip
#: figures a run result may carry and the table shows when any row has them: changes to the fleet and flaps (a change
#: undone within the controller's hold), per arm (`twin run`'s summary, where the control loop reports them)
HOOK_KEYS = ("changes", "flaps")
#: passes of hindsight's and causal's descent over every lever (`levers.descend`): the last is the plan's check
MAX_PASSES = 3
#: hindsight's gain over reactive below this share of reactive's urgent goodput (or 0.05 req/s) is nothing to
#: capture: captured gain is left blank rather than a ratio of noise
NOTHING_TO_CAPTURE = 0.02


@dataclass(frozen=True)
class Scenario:
    name: str
    why: str
    scenario: str | None = None  # a shipped scenario or a variant (infercast.simulator.twin.variants)
    trace: str | None = None  # a trace under the traces directory
    window: tuple[float, float] | None = None  # seconds of the trace to cut, before any speed-up
    time_scale: float = 1.0  # replay this many times faster
    rate_scale: float = 1.0  # and with this many times the requests (public traces are samples of a fleet's traffic)
    # surges laid on the trace as replayed (`infercast twin run --surge START,SECONDS,FACTOR,RAMP`), the fleet sized
    # without them
    surges: tuple[tuple[float, float, float, float], ...] = ()


SCENARIOS = (
    Scenario("flash-sale", "seed 000's sale, announced: a calendar entry with its expected 12,000 req/s", "flash-sale"),
    Scenario(
        "flash-sale-unannounced",
        "the same surge with an empty calendar: any gain over reactive is the forecast's own",
        "flash-sale-unannounced",
    ),
    Scenario("calm-day", "regular traffic only: the cost of false actions", "calm-day"),
    Scenario(
        "azure-code-bursts",
        "Azure code, the shipped 10 minutes at half speed and 20x the requests (a 12-node fleet at its peak): "
        "on/off bursts from nothing to their peak within a minute, twice; no calendar",
        trace="azure/AzureLLMInferenceTrace_code.csv",
        time_scale=0.5,
        rate_scale=20.0,
    ),
    Scenario(
        "servegen-afternoon-rise",
        "ServeGen language (3 clients), day 0 10:00-16:00 at 30x speed and 12x the requests (11 nodes at its "
        "peak): the 14:00 rise to 3.5x within an hour (120 s replayed, after 8 min of history)",
        trace="servegen/language/m-large",
        window=(36000.0, 57600.0),
        time_scale=30.0,
        rate_scale=12.0,
    ),
    Scenario(
        "servegen-morning-jump",
        "ServeGen language (3 clients), day 1 06:00-12:00 at 30x speed and 8x the requests (12 nodes at its peak): "
        "the morning ramp from near zero and the 10:00 jump to 3.9x in one 10-minute window (20 s replayed)",
        trace="servegen/language/m-large",
        window=(108000.0, 129600.0),
        time_scale=30.0,
        rate_scale=8.0,
    ),
    # surges laid on real traces (issue 42 item 5: `infercast twin run --trace F --size-fleet --surge ...`), the
    # fleet sized for the trace without them; each surge keeps the offered rate under the gateway's bucket (1.1x the
    # unsurged busiest minute) where it can, so that what the fleet does in the cold start, not the bucket, decides
    Scenario(
        "azure-code-surge",
        "Azure code, the shipped 10 minutes at half speed and 20x the requests (2 nodes always on, 9 standby), and a "
        "4x surge of its own requests from 480 s for 5 minutes (20 s ramp): over the gateway's bucket, so what "
        "wins is the bucket raised with the standby nodes split ahead (a plan doing both serves 15% more urgent "
        "requests than reactive on seed 0)",
        trace="azure/AzureLLMInferenceTrace_code.csv",
        time_scale=0.5,
        rate_scale=20.0,
        surges=((480.0, 300.0, 4.0, 20.0),),
    ),
    Scenario(
        "mooncake-surge",
        "Mooncake conversation (half of its prompts over 8k tokens), the shipped 5 minutes at quarter speed and 40x "
        "the requests, and a 1.5x surge from 480 s for 5 minutes (20 s ramp): to about its busiest minute, at the "
        "gateway's bucket",
        trace="mooncake/conversation_trace.jsonl",
        time_scale=0.25,
        rate_scale=40.0,
        surges=((480.0, 300.0, 1.5, 20.0),),
    ),
    Scenario(
        "servegen-surge",
        "ServeGen language (3 clients), day 0 10:00-16:00 at 30x speed and 12x the requests (4 nodes always on, 8 "
        "standby), and an 8x surge from 420 s for 5 minutes (20 s ramp), onto the 14:00 rise: over the gateway's "
        "bucket.  Chosen on seed 700 (never scored) from reactive runs only, before any other arm ran on it: the "
        "urgent tier's priority absorbs smaller surges (reactive served within the SLO all but 13.1%, 15.2% and "
        "19.5% of the urgent requests offered at 4x, 6x and 8x; the 3x at 200 s this scenario had before left no "
        "10% to win), and 8x is the smallest where winning back half the lost urgent requests is a 10% gain",
        trace="servegen/language/m-large",
        window=(36000.0, 57600.0),
        time_scale=30.0,
        rate_scale=12.0,
        surges=((420.0, 300.0, 8.0, 20.0),),
    ),
)


def search_step(trace) -> float:
    """The sample step the hindsight searches replay at: `run_arm`'s (5 s on a scenario, 15 s on a trace)."""
    return 5.0 if trace is None else 15.0


def load(sc: Scenario, traces: Path, seed: int):
    """(fleet config, trace or None) for a scenario."""
    from infercast.simulator.twin.variants import load_scenario

    if sc.trace is None:
        return load_scenario(sc.scenario), None
    from infercast.simulator.replay.traces import load_trace
    from infercast.simulator.twin.tracefleet import sized_trace_fleet

    base = load_scenario("flash-sale")
    trace = load_trace(traces / sc.trace, lengths=base.scenario.lengths, seed=seed)
    if sc.window is not None:
        trace = trace.window(*sc.window)
    if sc.time_scale != 1.0 or sc.rate_scale != 1.0:
        trace = trace.scaled(sc.time_scale, sc.rate_scale, seed=seed)
    if sc.surges:
        from infercast.simulator.replay.traces import Surge
        from infercast.simulator.twin.tracefleet import surged_trace_run

        cfg, trace, _ = surged_trace_run(trace, base, [Surge(*x) for x in sc.surges], size_fleet=True, seed=seed)
    else:
        cfg, _ = sized_trace_fleet(trace, base)
    return cfg.model_copy(update={"events": ()}), trace


def run_cell(
    sc: Scenario,
    arms: tuple[str, ...],
    seed: int,
    traces: Path,
    search: str,
    max_passes: int = MAX_PASSES,
    journals: Path | None = None,
    starts: list[dict] | None = None,
) -> dict:
    """Every arm on one scenario and seed; `reactive` first (perfect-forecast reads its future, false actions are
    judged against it).  `hindsight` also brings `causal` (the best plan acting only after the onset, found by the
    same search: `infercast/simulator/control/levers.py`), which gets a row of its own.  `journals`: a directory where
    hindsight's search writes each candidate as it ends (`forks.Forks`), so that a cell stopped half-way resumes
    there.  The guarded search runs before the unguarded one, whose search also tries the guarded winner (a plan it
    may hold too: the unguarded bound is never below the guarded one); `starts`: that winner's plan (`plan_steps`)
    where the cell kept it from an earlier run."""
    from infercast.actuators.inputs import reference_series
    from infercast.simulator.control.driver import run_arm, run_hindsight
    from infercast.simulator.control.plans import Plan

    cfg, trace = load(sc, traces, seed)
    step = None
    out: dict[str, dict] = {}
    t0 = time.perf_counter()
    reactive = run_arm(cfg, "reactive", seed, trace, step)
    reference = reference_series(reactive.timeseries)
    reactive_wall = round(time.perf_counter() - t0, 1)
    starts = list(starts or ())
    for arm in sorted(arms, key=lambda a: a != "hindsight-guarded"):
        t = time.perf_counter()
        if arm == "reactive":
            res = reactive
        elif arm in SEARCHES:
            step_s = search_step(trace)
            guarded = arm == "hindsight-guarded"
            name = f"{sc.name}-seed{seed}-{search}-p{max_passes}" + ("-guarded" if guarded else "")
            journal = None if journals is None else journals / f"{name}.jsonl"
            res = run_hindsight(cfg, seed, trace, step_s, search=search, check=search != "quick",
                                max_passes=max_passes, reactive=reactive, journal=journal, guarded=guarded,
                                starts=[] if guarded else [Plan.from_dict(x) for x in starts])  # fmt: skip
            if guarded:
                starts.append(res.summary["plan"])
        else:
            res = run_arm(cfg, arm, seed, trace, step, reference=reference, search=search)
        s = res.summary
        row = _row(s)
        row["false_actions"] = false_actions(res.events, reactive.timeseries, cfg)
        row["wall_s"] = reactive_wall if arm == "reactive" else round(time.perf_counter() - t, 1)
        if arm in SEARCHES:
            row["plan"] = s.get("plan_text")
            row["plan_steps"] = s.get("plan")  # what `infercast demo` replays (`demo.run.stored_hindsight_plan`)
            row["candidates"] = len(s.get("candidates") or ())
            row["check"] = s.get("check")
            row["plan_is"] = s.get("plan_is")
            row["search_cost"] = s.get("search_cost")
            causal = s.get("causal")
            if causal is not None:
                crow = _row(causal["summary"])
                crow |= {"plan": causal["plan_text"], "plan_steps": causal["plan"], "check": causal["check"],
                         "onset_seconds": causal["onset_seconds"], "candidates": causal["candidates"]}  # fmt: skip
                crow["plan_is"] = "bound" if causal["check"] and causal["check"]["passed"] else "best found"
                out[SEARCHES[arm]] = crow
        out[arm] = row
    return {"scenario": sc.name, "seed": seed, "arms": ordered(out), "wall_s": round(time.perf_counter() - t0, 1)}


def ordered(arms: dict[str, dict]) -> dict[str, dict]:
    """A cell's rows in the tables' order: the loop arms as run, then each search's causal plan beside it."""
    return {a: arms[a] for a in (*[a for a in arms if a not in PLAN_ROWS], *PLAN_ROWS) if a in arms}


def arm_groups(arms: tuple[str, ...], split: bool) -> list[tuple[str, ...]]:
    """The arms of one cell as the jobs that run them, each with `reactive` first (every arm's reference): one job,
    or (`split`, what `--quick` does) one job per arm, so that a cell's slow `hindsight` and its other arms run on
    different cores at the cost of one more `reactive` run each (on 2 cores, the quick bench's sale cell alone was
    its wall time, the calm day's cell done long before)."""
    rest = [a for a in arms if a != "reactive"]
    if not split or len(rest) <= 1:
        return [("reactive", *rest)]
    return [("reactive", a) for a in rest]


def merge_cell(done: dict[tuple[str, int], dict], cell: dict) -> None:
    """Add a cell's arms to what is kept for its scenario and seed (a later measurement of an arm replaces an
    earlier one; the cell's wall time is the sum of its measurements')."""
    key = (cell["scenario"], cell["seed"])
    have = done.get(key)
    if have is None:
        done[key] = {**cell, "arms": dict(cell["arms"])}
        return
    have["arms"] = {**have["arms"], **cell["arms"]}
    have["wall_s"] = round(float(have.get("wall_s", 0.0)) + float(cell.get("wall_s", 0.0)), 1)


def read_cells(path: Path | None, search: str, max_passes: int) -> dict[tuple[str, int], dict]:
    """(scenario, seed) -> the arms measured so far in the cells file (`--cells`: one JSON line per `run_cell`,
    each with some of the arms), for this search and these passes of the descent (a line without `max_passes`
    was written with the default)."""
    done: dict[tuple[str, int], dict] = {}
    if path is None or not path.exists():
        return done
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            c = json.loads(line)
        except json.JSONDecodeError:  # a line cut short when a run was stopped while writing it: not a cell
            print(f"{path}: a line that is not a whole cell, skipped", file=sys.stderr)
            continue
        if c.get("search") == search and c.get("max_passes", MAX_PASSES) == max_passes:
            merge_cell(done, c)
    return done


def import_hindsight(done: dict[tuple[str, int], dict], path: Path, jobs: list[tuple[str, int]]) -> int:
    """Add, where a kept cell has no `hindsight`, the hindsight arm (its plan and figures) of the same scenario and
    seed from an earlier run's published results (`docs/results/control.json`), each marked with where it came from
    (`provenance`): the tables say so beside every row and plan that uses one.  A plan's figures are what the twin
    made of it then, so one is taken only where the cell's `reactive` is the same as that run's (`REACTIVE_SAME`).
    Returns how many were added."""
    doc = json.loads(path.read_text())
    where = f"an earlier run of this bench, published in {path} before this one (search `{doc.get('search')}`"
    where += (
        ", before hindsight's search was widened: no single-lever check, no `causal`)"
        if "max_passes" not in doc
        else ")"
    )
    added, wanted = 0, set(jobs)
    for cell in doc.get("cells", []):
        key = (cell.get("scenario"), cell.get("seed"))
        theirs_arms = cell.get("arms") or {}
        mine_arms = done.get(key, {}).get("arms", {})
        h = theirs_arms.get("hindsight")
        if h is None or key not in wanted or "hindsight" in mine_arms:
            continue
        mine, theirs = mine_arms.get("reactive"), theirs_arms.get("reactive")
        if mine is None or theirs is None or any(mine.get(k) != theirs.get(k) for k in REACTIVE_SAME):
            print(f"{key}: no reactive, or not the same as {path}'s: its hindsight not taken", file=sys.stderr)
            continue
        merge_cell(done, {"scenario": key[0], "seed": key[1], "wall_s": 0.0,
                          "arms": {"hindsight": {**h, "provenance": h.get("provenance", where)}}})  # fmt: skip
        added += 1
    return added


#: what must be the same in `reactive` for an earlier run's plan figures to stand beside this run's
REACTIVE_SAME = ("urgent_goodput_rps", "goodput_rps", "gpu_seconds", "p99_latency_ms", "served", "rejected")


def _row(s: dict) -> dict:
    row = {k: s.get(k) for k in KEYS}
    row["tiers"] = s.get("tiers")
    # onset to the first action (issue 42's decision delay; null without a surge or an action), kept per cell
    row["decision_delay_seconds"] = s.get("decision_delay_seconds")
    for k in HOOK_KEYS:  # per-arm changes and flaps, where the run result reports them
        if s.get(k) is not None:
            row[k] = s[k]
    return row


def false_actions(events: list[dict], reactive_ts, cfg) -> int:
    """Protective actions (scale-ups, tightenings, weight shifts) after which the `reactive` run of the same seed shows
    no pool's fullest instance at or over the trigger within the horizon.  Steps back are not protective: a scale-down,
    an admission limit raised again (memory 0.75 -> 0.8, a context limit lifted), a weight moved back toward the
    pool's configured one."""
    import numpy as np

    trigger = cfg.thresholds.kv_forecast_trigger
    horizon = cfg.predictor.horizon_seconds
    ts = reactive_ts.groupby("t")["kv_usage_max"].max()
    t, kv = ts.index.to_numpy(dtype=float), np.nan_to_num(ts.to_numpy(dtype=float))
    replicas: dict[str, int] = {}
    limits = {"memory_limit": math.inf, "max_context_tokens": math.inf}  # the admission limits as last set
    from infercast.simulator.twin.layout import protected_layout

    base = {name: float(pool.weight) for name, pool in protected_layout(cfg).pools.items()}  # the pools the arms run
    weights = dict(base)
    n = 0
    for e in events:
        if e.get("event") != "action":
            continue
        kind, pool = e.get("action"), e.get("pool")
        protective = kind == "prewarm_pool"
        if kind == "scale_pool":
            up = e.get("replicas", 0) > replicas.get(pool, -1) if pool in replicas else True
            replicas[pool] = e.get("replicas", 0)
            protective = up
        if kind == "set_admission":  # gateway waits alone: the mildest step, or a step back; not counted
            for key, was in limits.items():
                if e.get(key) is not None:
                    protective |= float(e[key]) < was
                    limits[key] = float(e[key])
        if kind == "set_pool_weight" and pool in weights:
            was, now = weights[pool], float(e.get("weight", weights[pool]))
            protective = abs(now - base[pool]) > abs(was - base[pool])
            weights[pool] = now
        if not protective:
            continue
        ahead = (t >= e["t"]) & (t <= e["t"] + horizon)
        if not (kv[ahead] >= trigger).any():
            n += 1
    return n


# --- the tables -------------------------------------------------------------------------------------------------
def _figure(value) -> float:
    """A row's figure as a number: the run's changes and flaps come as the ledger's {"total", "by_setting", ...}
    (`actuators/ledger.py`), counted by their total."""
    return float(value["total"]) if isinstance(value, dict) else float(value)


def _stats(rows: list[dict], key: str) -> tuple[float, float]:
    vals = [_figure(r[key]) for r in rows if r.get(key) is not None]
    if not vals:
        return math.nan, math.nan
    return sum(vals) / len(vals), max(vals) - min(vals)


def aggregate(result: dict) -> dict:
    """scenario -> arm -> mean and spread of each figure over the seeds it was measured on (`seeds`), and captured
    gain; an arm measured on no seed of the scenario -> None (the table says "not measured")."""
    out: dict[str, dict] = {}
    for sc in result["scenarios"]:
        cells = [c for c in result["cells"] if c["scenario"] == sc]
        arms: dict[str, dict | None] = {}
        for arm in result["arms"]:
            rows = [c["arms"][arm] for c in cells if arm in c["arms"]]
            if not rows:
                arms[arm] = None
                continue
            agg: dict = {k: _stats(rows, k) for k in (*KEYS, *HOOK_KEYS, "false_actions")}
            hours = agg["simulated_seconds"][0] / 3600.0
            agg["false_per_hour"] = (agg["false_actions"][0] / hours if hours else math.nan, 0.0)
            agg["seeds"] = sorted(c["seed"] for c in cells if arm in c["arms"])
            agg["captured"] = _captured(cells, arm, "hindsight")
            agg["captured_guarded"] = _captured(cells, arm, "hindsight-guarded")
            arms[arm] = agg
        out[sc] = arms
    return out


def _captured(cells: list[dict], arm: str, top_arm: str) -> float:
    """(arm - reactive) / (top_arm - reactive) on urgent goodput, over the seeds where all three were measured
    (paired); NaN where there is none, or where the top arm gains nothing worth a ratio (`NOTHING_TO_CAPTURE`)."""
    both = [c for c in cells if {arm, "reactive", top_arm} <= set(c["arms"])]
    if not both:
        return math.nan
    base = _stats([c["arms"]["reactive"] for c in both], "urgent_goodput_rps")[0]
    top = _stats([c["arms"][top_arm] for c in both], "urgent_goodput_rps")[0]
    mine = _stats([c["arms"][arm] for c in both], "urgent_goodput_rps")[0] - base
    gain = top - base
    return mine / gain if gain >= max(0.05, NOTHING_TO_CAPTURE * base) else math.nan


def _pct(x: float) -> str:
    return "" if math.isnan(x) else f"{x:.0%}"


def _seeds(seeds: list[int]) -> str:
    """0, 1, 2 -> "0-2"; 0, 2 -> "0, 2"."""
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}-{seeds[-1]}"
    return ", ".join(str(x) for x in seeds)


def _f(x: float, digits: int = 1) -> str:
    return "" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:,.{digits}f}"


def _ms(pair) -> str:
    m, s = pair
    return f"{_f(m)} ± {_f(s / 2)}" if not math.isnan(m) else ""


def _p99(a: dict) -> str:
    pre = a["p99_latency_ms_pre"][0]
    return _f(a["p99_latency_ms"][0], 0) + ("" if math.isnan(pre) else f" ({_f(pre, 0)})")


def _hooks(result: dict) -> list[str]:
    """The per-arm figures some runs report (`HOOK_KEYS`): a column each where any row has them."""
    return [k for k in HOOK_KEYS if any(k in row for c in result["cells"] for row in c["arms"].values())]


def table_arms(result: dict) -> str:
    agg = aggregate(result)
    hooks = _hooks(result)
    lines = [
        "| scenario | arm | seeds | urgent goodput req/s | goodput req/s | token goodput ktok/s | urgent P99 ms (pre) "
        "| OOM | GPU-hours | actions | " + "".join(f"{k} | " for k in hooks) + "false / h | captured | "
        "captured within the guards |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|" + "---:|" * len(hooks) + "---:|---:|---:|",
    ]
    missing = 0
    # (scenario, arm) -> where an earlier run measured it (`import_hindsight`), for the † beside its row
    imported = {(c["scenario"], a): r["provenance"] for c in result["cells"] for a, r in c["arms"].items()
                if r.get("provenance")}  # fmt: skip
    for sc, arms in agg.items():
        for arm, a in arms.items():
            if a is None:  # never an older run's figures in its place
                missing += 1
                lines.append(f"| {sc} | `{arm}` | none | not measured |" + " |" * (9 + len(hooks)))
                continue
            extra = "".join(f"{_f(a[k][0], 1)} | " for k in hooks)
            mark = " †" if (sc, arm) in imported else ""
            lines.append(
                f"| {sc} | `{arm}`{mark} | {_seeds(a['seeds'])} | {_ms(a['urgent_goodput_rps'])} | "
                f"{_ms(a['goodput_rps'])} | "
                f"{_f(a['token_goodput_tps'][0] / 1000)} | {_p99(a)} | {_f(a['oom_events'][0], 1)} | "
                f"{_f(a['gpu_seconds'][0] / 3600, 1)} | {_f(a['actions'][0], 1)} | {extra}"
                f"{_f(a['false_per_hour'][0], 1)} | {_pct(a['captured'])} | {_pct(a['captured_guarded'])} |"
            )
    lines.append("")
    lines.append(
        "Mean over the seeds each row names ± half the spread (max - min)"
        + (
            f"; {missing} rows not measured in this run of the bench (left blank, never filled from an older run)"
            if missing
            else ""
        )
        + f"; hindsight search `{result['search']}`; captured = (arm - reactive) / (hindsight - reactive) on urgent "
        "goodput, on the seeds where all three were measured"
        + (
            "; `causal` is the best plan acting only after the surge's onset (the same search)"
            if any("causal" in c["arms"] for c in result["cells"])
            else ""
        )
        + (
            "; `hindsight-guarded` and `causal-guarded` are the same searches never loosening a guard past the fleet "
            "file (the memory admission limit, the quota lanes' rates, the pools' breakers: the control loop only "
            "tightens those), and captured within the guards = (arm - reactive) / (hindsight-guarded - reactive)"
            if any("hindsight-guarded" in c["arms"] for c in result["cells"])
            else ""
        )
        + f". {result['machine']}; `bench/control.py`."
        + "".join(
            f" † not measured in this run: {where}; `reactive`, replayed here, is the same on every such cell."
            for where in sorted(set(imported.values()))
        )
        + (
            " These cells were measured before hindsight's search was widened (no single-lever check, no `causal`): "
            "its rows are what that narrower search found, not re-measured since."
            if "max_passes" not in result
            else ""
        )
    )
    return "\n".join(lines)


def table_scenarios(result: dict) -> str:
    lines = ["| scenario | why it is here |", "|---|---|"]
    lines += [f"| {s['name']} | {s['why']} |" for s in result["scenario_notes"]]
    return "\n".join(lines)


def beaten_by(arms: dict[str, dict], top: str = "hindsight") -> list[str]:
    """The arms of a cell that beat a search's plan (`plans.better`): where its search is too narrow.  Against the
    guarded search only the arms that keep the guards count (not the unguarded plans)."""
    from infercast.simulator.control.plans import better

    h = arms.get(top)
    skip = {top} | ({"hindsight", "causal"} if top == "hindsight-guarded" else set())
    return [a for a, r in arms.items() if h is not None and a not in skip and better(r, h)]


def check_text(row: dict) -> str:
    """A plan's single-lever check in words: a bound only when it passed (issue 42 item 3)."""
    check = row.get("check")
    if not check:
        return "best found (not checked" + (", an earlier run's †)" if row.get("provenance") else ")")
    if check["passed"]:
        return f"bound (no single-lever move of {check['neighbours']} beats it)"
    return "best found (beaten by " + ", ".join(check["beaten_by"]) + ")"


def _gap(a: dict | None, b: dict | None) -> str:
    if a is None or b is None or a.get("urgent_goodput_rps") is None or b.get("urgent_goodput_rps") is None:
        return ""
    return f"{float(b['urgent_goodput_rps']) - float(a['urgent_goodput_rps']):+.2f}"


def _cost(row: dict) -> str:
    c = row.get("search_cost")
    if not c:
        return ""
    more = "".join(
        f", {c[k]} {what}"
        for k, what in (("cached", "answered again"), ("forked_late", "forked late"), ("resumed", "resumed"))
        if c.get(k)
    )
    if c.get("late_fork_saved_seconds"):
        more += f", late forks saved {c['late_fork_saved_seconds']:,.0f} simulated s"
    return (
        f"{c['runs']} runs ({c['pruned']} pruned{more}), {c['saved_share']:.0%} of replay saved, "
        f"{c['wall_seconds']:,.0f} s"
    )


def table_plans(result: dict, top: str = "hindsight") -> str:
    """Each cell's plan of one search (`top`: hindsight, or hindsight-guarded) with its causal plan beside it."""
    side = SEARCHES[top]
    causal = any(side in c["arms"] for c in result["cells"])
    head = f"| scenario | seed | {top}'s plan | is | candidates run |"
    rule = "|---|---:|---|---|---:|"
    if causal:
        head += f" {side}'s plan (is) | reactive → causal | causal → hindsight |"
        rule += "---|---:|---:|"
    head += " search's cost | arms that beat it |"
    rule += "---|---|"
    lines = [head, rule]
    for c in result["cells"]:
        h = c["arms"].get(top)
        if not h:
            continue
        beaten = ", ".join(f"`{a}`" for a in beaten_by(c["arms"], top)) or "none"
        line = f"| {c['scenario']} | {c['seed']} | {h['plan']} | {check_text(h)} | {h['candidates']} |"
        if causal:
            cz = c["arms"].get(side)
            # an earlier run's plan (†) came without causal: not measured, which says nothing of an onset
            text = f"{cz['plan']} ({check_text(cz)})" if cz else "not measured" if h.get("provenance") else "no onset"
            line += f" {text} | {_gap(c['arms'].get('reactive'), cz)} | {_gap(cz, h)} |"
        lines.append(line + f" {_cost(h)} | {beaten} |")
    lines.append("")
    lines.append(
        "A plan is called a bound only where its single-lever check passed (every lever moved one step either way, "
        "none beating it by more than the tie margin); otherwise it is the best found. Gaps in urgent goodput "
        "(req/s): reactive → causal is what a perfect decision at the onset adds (decision quality), causal → "
        "hindsight what knowing the future adds (foresight)."
        + (
            " Within the guards the check moves each lever one step either way too, but never a guard above the "
            "fleet file's value."
            if top == "hindsight-guarded"
            else ""
        )
    )
    return "\n".join(lines)


def wall_times(result: dict) -> str:
    """The bench's own budget (issue 41 item 3): wall seconds per arm (summed over cells), per cell, and what
    hindsight's search cost in each cell (runs, pruned, simulated seconds saved by forking)."""
    per_arm: dict[str, float] = {}
    lines = ["wall time per cell (s):"]
    for c in result["cells"]:
        for arm, row in c["arms"].items():
            # causal comes with hindsight's search; a plan taken from an earlier run (†) was not run here
            if "wall_s" in row and arm not in SEARCHES.values() and not row.get("provenance"):
                per_arm[arm] = per_arm.get(arm, 0.0) + float(row["wall_s"])
        h = c["arms"].get("hindsight") or {}
        lines.append(f"  {c['scenario']} seed {c['seed']}: {c.get('wall_s', 0):,.0f}" + (
            f"; hindsight's search {_cost(h)}" if h.get("search_cost") else ""))  # fmt: skip
    lines.append("wall time per arm, all cells (s): " + ", ".join(f"{a} {w:,.0f}" for a, w in per_arm.items()))
    lines.append(f"whole bench: {result['wall_s']:,.0f} s")
    return "\n".join(lines)


# --- seed 004's levers, one at a time (--ablation) ----------------------------------------------------------------
#: the arms the ablation runs each lever under, and the scenario: the announced flash sale
ABLATION_ARMS = ("reactive", "predictive")
ABLATION_SCENARIO = "flash-sale"


def seed004_levers() -> dict[str, dict]:
    """Each lever's `protections` settings, every figure taken from seed 004 (docs/control.md, "Seed 004's levers"
    says how each maps); `all` is every lever together.  None was fitted to a cell of any table."""
    from infercast.config import ApiKeyTiers, DrfTenant, KvPartitions, LengthGates

    # who is who: the seed names a VIP tier (long-text lane, DRF's `vip`) but not which customer; the twin's
    # `regular` stream is the fleet's contracted customers, whose service the protections exist to keep, and the
    # flash-sale customer already holds the platinum API-key tier's 1,000 QPS in the fleet file (quota_lanes)
    levers = {
        "length-gates": {"length_gates": LengthGates(retry_above_tokens=1024, drop_above_tokens=2048,
                                                     long_text_streams=("regular",))},
        "api-key-tiers": {"api_key_tiers": ApiKeyTiers(streams={"flash-sale": "platinum", "regular": "gold"})},
        "kv-partitions": {"kv_partitions": KvPartitions(urgent=0.70, normal=0.25, low=0.05)},
        "drf-tenants": {"drf_tenants": {"regular": DrfTenant(weight=3.0, min_quota=0.2),
                                        "flash-sale": DrfTenant(weight=1.0, max_quota=0.8)}},
        "max-seq-len": {"max_seq_len": 4096},
    }  # fmt: skip
    everything: dict = {}
    for lever in levers.values():
        everything.update(lever)
    return {"none": {}, **levers, "all": everything}


ABLATION_KEYS = ("urgent_goodput_rps", "goodput_rps", "p99_latency_ms", "oom_events", "gpu_seconds", "rejected",
                 "offered", "served", "failed")  # fmt: skip


def run_ablation_cell(lever: str, arm: str, seed: int) -> dict:
    """One arm on the flash sale with one lever (or none, or all) switched on."""
    from infercast.simulator.control.driver import run_arm
    from infercast.simulator.twin.variants import load_scenario

    cfg = load_scenario(ABLATION_SCENARIO)
    settings = seed004_levers()[lever]
    if settings:
        cfg = cfg.model_copy(update={"protections": cfg.protections.model_copy(update=settings)})
    t = time.perf_counter()
    s = run_arm(cfg, arm, seed, None, None).summary
    row = {k: s.get(k) for k in ABLATION_KEYS}
    return {"lever": lever, "arm": arm, "seed": seed, "row": row, "wall_s": round(time.perf_counter() - t, 1)}


def table_ablation(result: dict) -> str:
    lines = [
        "| lever | arm | seeds | urgent goodput req/s | goodput req/s | urgent P99 ms | OOM | GPU-hours | rejected |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for lever in result["levers"]:
        for arm in result["arms"]:
            rows = [c["row"] for c in result["cells"] if c["lever"] == lever and c["arm"] == arm]
            if not rows:
                continue
            st = {k: _stats(rows, k) for k in ABLATION_KEYS}
            lines.append(
                f"| {lever} | `{arm}` | {len(rows)} | {_ms(st['urgent_goodput_rps'])} | {_ms(st['goodput_rps'])} | "
                f"{_f(st['p99_latency_ms'][0], 0)} | {_f(st['oom_events'][0], 1)} | "
                f"{_f(st['gpu_seconds'][0] / 3600, 1)} | {_f(st['rejected'][0], 0)} |"
            )
    lines.append("")
    lines.append(
        f"`{result['scenario']}` (announced); mean over the seeds run ± half the spread (max - min); `none` is the "
        f"fleet file's protections alone, `all` every lever together. {result['machine']}; "
        "`bench/control.py --ablation`."
    )
    return "\n".join(lines)


def ablation(args) -> int:
    """Every lever x arm x seed; cells are kept in `--cells` (JSON lines) and reused, so an interrupted run resumes.
    Runs the reactive rows of every seed before the (slower) predictive ones."""
    import platform

    from infercast import __version__

    levers = list(seed004_levers())
    seeds = tuple(int(x) for x in args.seeds.split(","))
    cells_path = args.cells or ROOT / "runs" / "control_ablation_cells.jsonl"
    cells_path.parent.mkdir(parents=True, exist_ok=True)
    done: dict[tuple[str, str, int], dict] = {}
    if cells_path.exists():
        for line in cells_path.read_text().splitlines():
            c = json.loads(line)
            done[(c["lever"], c["arm"], c["seed"])] = c
    jobs = [(lv, arm, seed) for arm in ABLATION_ARMS for seed in seeds for lv in levers]
    todo = [] if args.cached_only else [j for j in jobs if j not in done]
    started = time.perf_counter()
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for cell in pool.map(run_ablation_cell, *zip(*todo, strict=True)) if todo else ():
            print(f"{cell['lever']} {cell['arm']} seed {cell['seed']}: {cell['wall_s']:.0f} s", file=sys.stderr,
                  flush=True)  # fmt: skip
            done[(cell["lever"], cell["arm"], cell["seed"])] = cell
            with cells_path.open("a") as f:
                f.write(json.dumps(cell) + "\n")
    result = {
        "scenario": ABLATION_SCENARIO,
        "levers": levers,
        "arms": list(ABLATION_ARMS),
        "seeds": list(seeds),
        "settings": {k: {p: _jsonable(v) for p, v in s.items()} for k, s in seed004_levers().items()},
        "cells": [done[j] for j in jobs if j in done],
        "wall_s": round(time.perf_counter() - started, 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"infercast {__version__}",
    }
    print(table_ablation(result))
    if not args.no_publish:
        from results import publish

        print("published", publish("control_ablation", result, TABLES), file=sys.stderr)
    return 0


def _jsonable(v):
    return v.model_dump(mode="json") if hasattr(v, "model_dump") else (
        {k: _jsonable(x) for k, x in v.items()} if isinstance(v, dict) else v)  # fmt: skip


# `rows` is the ablation's table (published under `control_ablation`; tests/test_results_tables.py finds it here)
TABLES = {
    "arms": table_arms,
    "scenarios": table_scenarios,
    "plans": table_plans,
    "plans-guarded": lambda result: table_plans(result, "hindsight-guarded"),
    "rows": table_ablation,
}


def _parser() -> argparse.ArgumentParser:
    """The bench's command line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default=",".join(s.name for s in SCENARIOS))
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--seeds", default=",".join(str(s) for s in SEEDS))
    ap.add_argument("--traces", type=Path, default=ROOT / "tests" / "data" / "traces", help="traces directory")
    ap.add_argument("--search", choices=("fast", "full", "quick"), default="fast", help="hindsight's search")
    ap.add_argument(
        "--max-passes",
        type=int,
        default=MAX_PASSES,
        help="passes of the descent over every lever that ends hindsight's and causal's searches (the last is the "
        "plan's single-lever check)",
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"what to run before a commit that touches the controller: seed 0, arms {','.join(QUICK_ARMS)}, "
        f"scenarios {','.join(QUICK_SCENARIOS)}, hindsight's quick search (no check); never publishes",
    )
    ap.add_argument(
        "--rerender",
        action="store_true",
        help="run nothing: render and publish the tables again from docs/results/control.json",
    )
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    ap.add_argument(
        "--split-arms",
        action="store_true",
        help="run each arm of a cell as its own job (with its own reactive run), the slowest first: shorter wall "
        "time when there are fewer cells than cores' worth of work (--quick does)",
    )
    ap.add_argument("--json", type=Path, help="also write the result here")
    ap.add_argument(
        "--cells", type=Path, help="keep each finished scenario x seed here (JSON lines) and reuse those already there"
    )
    ap.add_argument("--no-publish", action="store_true")
    ap.add_argument(
        "--measured-only",
        action="store_true",
        help="run nothing: table (and publish, unless --no-publish) the cells already in --cells; every scenario x "
        "arm with no seed measured reads 'not measured', and each row names the seeds it covers",
    )
    ap.add_argument(
        "--import-hindsight",
        type=Path,
        metavar="RESULTS_JSON",
        help="with --measured-only: where a kept cell has no hindsight, take its plan and figures from an earlier "
        "run's published results (docs/results/control.json), marked † in the tables, and only where that run's "
        "reactive is the same as the cell's",
    )
    ap.add_argument(
        "--ablation",
        action="store_true",
        help="seed 004's levers one at a time on the flash sale (reactive and predictive); publishes "
        "docs/results/control_ablation.json",
    )
    ap.add_argument(
        "--cached-only",
        action="store_true",
        help="with --ablation: table and publish the cells already kept in --cells, running none",
    )
    return ap


def _choices(ap: argparse.ArgumentParser, args: argparse.Namespace):
    """(scenarios, arms, seeds) the command line asks for; a clear error for an unknown scenario or a bad mix."""
    # in the order given (a resumable run can put the cell it most needs first)
    by_name = {s.name: s for s in SCENARIOS}
    chosen = list({n: by_name[n] for n in args.scenarios.split(",") if n in by_name}.values())
    unknown = set(args.scenarios.split(",")) - {s.name for s in SCENARIOS}
    if unknown:
        ap.error(f"unknown scenario(s) {', '.join(sorted(unknown))}; known: {', '.join(s.name for s in SCENARIOS)}")
    if args.measured_only and args.cells is None:
        ap.error("--measured-only tables the cells of --cells FILE: give it")
    if args.import_hindsight is not None and not args.measured_only:
        ap.error("--import-hindsight goes with --measured-only (a run measures its own hindsight)")
    arms = tuple(a for a in args.arms.split(",") if a)
    if "reactive" not in arms:
        arms = ("reactive", *arms)
    seeds = tuple(int(x) for x in args.seeds.split(","))
    return chosen, arms, seeds


def _measure(args: argparse.Namespace, chosen: list, arms: tuple[str, ...], seeds: tuple[int, ...]):
    """Run the cells not kept yet (in parallel, each kept in --cells as it finishes); (cells to table, the arms
    shown, every scenario x seed asked for)."""
    cells = []
    done = read_cells(args.cells, args.search, args.max_passes)
    # hindsight's searches journal their candidates beside the cells: a cell stopped half-way resumes its search
    journals = None if args.cells is None else args.cells.with_name(args.cells.stem + "_search")
    # every scenario on the first seed before any on the second: an interrupted run has whole seeds; in a cell,
    # only the arms not measured yet (reactive runs again anyway: every arm's false actions are judged on it)
    jobs = [(sc, seed) for seed in seeds for sc in chosen]
    if args.import_hindsight is not None:
        n = import_hindsight(done, args.import_hindsight, [(sc.name, seed) for sc, seed in jobs])
        print(f"{n} hindsight plans taken from {args.import_hindsight}", file=sys.stderr)
    todo = []
    for sc, seed in jobs:
        kept = done.get((sc.name, seed), {}).get("arms", {})
        missing = tuple(a for a in arms if a not in kept)
        # the unguarded search also tries the guarded winner this cell kept (`run_cell`)
        starts = [kept["hindsight-guarded"]["plan_steps"]] if "hindsight-guarded" in kept else []
        if missing and not args.measured_only:
            todo += [(sc, group, seed, args.traces, args.search, args.max_passes, journals, starts)
                     for group in arm_groups(missing, args.split_arms)]  # fmt: skip
    if args.split_arms:  # the longest first, so that the shorter ones fill the other cores around it
        todo.sort(key=lambda j: not set(SEARCHES) & set(j[1]))
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for cell in pool.map(run_cell, *zip(*todo, strict=True)) if todo else ():
            walls = ", ".join(f"{a} {r['wall_s']:.0f}" for a, r in cell["arms"].items() if "wall_s" in r)
            print(f"{cell['scenario']} seed {cell['seed']}: {cell['wall_s']:.0f} s ({walls})", file=sys.stderr,
                  flush=True)  # fmt: skip
            cell["search"] = args.search
            cell["max_passes"] = args.max_passes
            if args.cells is not None:
                with args.cells.open("a") as f:
                    f.write(json.dumps(cell) + "\n")
            merge_cell(done, cell)
    shown = tuple(ordered({a: {} for a in (*arms, *(SEARCHES[a] for a in arms if a in SEARCHES))}))
    for sc, seed in jobs:
        if (sc.name, seed) not in done:  # nothing of it measured: every row of it says so
            continue
        cell = dict(done[(sc.name, seed)])
        cell["arms"] = {a: cell["arms"][a] for a in shown if a in cell["arms"]}
        cells.append(cell)
    return cells, shown, jobs


def _result(args: argparse.Namespace, chosen: list, arms, seeds, cells: list, shown, jobs, started: float) -> dict:
    """What the bench publishes: the cells, which seeds of each row were measured, and how the run was made."""
    import platform

    from infercast import __version__

    return {
        "scenarios": [s.name for s in chosen],
        "scenario_notes": [{"name": s.name, "why": s.why} for s in chosen],
        "arms": [a for a in shown if a not in SEARCHES.values() or any(a in c["arms"] for c in cells)],
        "seeds": list(seeds),
        "search": args.search,
        "max_passes": args.max_passes,
        "tuning": "one choice was made after reading these results: the policy's split of a reservoir that cannot "
        "cover every pool's ask (by requests served per node, actuators/policy.py; shared with the scheduled arm) "
        "was chosen from hindsight's plan on flash-sale.  No setting was fitted, and the trace surges were not "
        "used for it: they are the held-apart check of that choice.  The surges laid on traces (`*-surge`) were "
        "sized with runs of reactive and hindsight only, never of a forecast arm, so that hindsight has something "
        "to win over reactive (issue 42: at least 10% urgent goodput)",
        "cells": cells,
        # which seeds of each scenario x arm were measured (the rest of the grid is "not measured", never an older
        # run's figures)
        "measured": {
            sc.name: {a: sorted(c["seed"] for c in cells if c["scenario"] == sc.name and a in c["arms"]) for a in shown}
            for sc in chosen
        },
        # which of them an earlier run measured (`--import-hindsight`: marked † in the tables)
        "imported": sorted(
            {
                f"{c['scenario']} seed {c['seed']}: {a}"
                for c in cells
                for a, r in c["arms"].items()
                if r.get("provenance")
            }
        ),
        # a whole run: every arm of every cell measured here (a plan taken from an earlier run is not)
        "complete": all(set(arms) <= set(c["arms"]) for c in cells)
        and len(cells) == len(jobs)
        and not any(r.get("provenance") for c in cells for r in c["arms"].values()),
        "wall_s": round(time.perf_counter() - started, 1)
        if not args.measured_only
        else round(sum(float(c.get("wall_s", 0.0)) for c in cells), 1),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
        f"infercast {__version__}",
    }


def main() -> int:
    ap = _parser()
    args = ap.parse_args()
    if args.ablation:
        return ablation(args)
    if args.rerender:
        from results import load, publish

        print("published", publish("control", load("control"), TABLES), file=sys.stderr)
        return 0
    if args.quick:
        args.seeds, args.arms, args.scenarios, args.search = (
            "0",
            ",".join(QUICK_ARMS),
            ",".join(QUICK_SCENARIOS),
            "quick",
        )
        args.no_publish = True
        args.split_arms = True
    chosen, arms, seeds = _choices(ap, args)
    started = time.perf_counter()
    cells, shown, jobs = _measure(args, chosen, arms, seeds)
    result = _result(args, chosen, arms, seeds, cells, shown, jobs, started)
    print(table_arms(result))
    print(wall_times(result), file=sys.stderr)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    if not args.no_publish:
        from results import publish

        print("published", publish("control", result, TABLES), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
