"""A published hindsight plan put through its single-lever check (a diagnostic, not a scored bench).

    .venv/bin/python bench/check_plan.py --scenario calm-day --seed 0                  # the check: one pass
    .venv/bin/python bench/check_plan.py --scenario flash-sale-unannounced --seed 0 --passes 3

Reads the `hindsight` plan `bench/control.py` published for the cell (docs/results/control.json), replays it (the
figures must be the published ones: the bench refuses otherwise), then runs `levers.descend` from it as the bench's
own search does after its stages: every lever moved one step either way, the best neighbour that beats the plan by
more than the tie margin taken, again, up to `--passes` passes.  A plan no neighbour beats passed its check (a bound,
in docs/control.md's sense); one whose last pass still found a better neighbour is the best found.  The plans the
bench imported from a run before its search was widened (the † cells: the sales and the calm day) were never checked;
this checks them at the cost of one descent, not the widened search (about an hour a pass on a sale cell, on 2
cores, where the full search does not fit).  Each run's end goes to a journal (`--journal-dir`), so a check stopped
half-way resumes where it was.  Prints every neighbour's figures, the check, and the plan it ends on.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import control as cb  # noqa: E402

from infercast.simulator.control.driver import run_arm, true_traffic  # noqa: E402
from infercast.simulator.control.forks import Forks  # noqa: E402
from infercast.simulator.control.levers import descend  # noqa: E402
from infercast.simulator.control.plans import Plan, search_hindsight  # noqa: E402
from infercast.simulator.demo.run import published_hindsight_cell  # noqa: E402

KEYS = ("urgent_goodput_rps", "goodput_rps", "gpu_seconds")


def published_plan(results: Path, scenario: str, seed: int) -> tuple[Plan, dict]:
    """The cell's published `hindsight` plan and figures (what `infercast demo` replays); a clear error where the
    bench published none.  `results`: the folder of control.json (docs/results)."""
    cell = published_hindsight_cell(scenario, seed, results)
    if cell is None:
        raise SystemExit(
            f"bench/check_plan.py: {results / 'control.json'} has no hindsight plan for {scenario} seed {seed}"
        )
    row = cell["arms"]["hindsight"]
    return Plan.from_dict(row["plan_steps"]), row


def figures(summary: dict) -> str:
    return ", ".join(f"{k} {summary.get(k)}" for k in KEYS)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenario", required=True, help="a bench/control.py scenario")
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--passes", type=int, default=1, help="descent passes (1: the check alone; the bench uses 3)")
    p.add_argument("--results", type=Path, default=ROOT / "docs" / "results", help="the folder of control.json")
    p.add_argument("--traces", type=Path, default=ROOT / "tests" / "data" / "traces")
    p.add_argument("--journal-dir", type=Path, default=ROOT / "runs" / "check-plan")
    a = p.parse_args()
    if a.passes < 1:
        p.error("--passes must be 1 or more")
    sc = next((s for s in cb.SCENARIOS if s.name == a.scenario), None)
    if sc is None:
        p.error(f"unknown scenario {a.scenario!r}; one of {', '.join(s.name for s in cb.SCENARIOS)}")
    plan, published = published_plan(a.results, a.scenario, a.seed)
    print(f"published: {published.get('plan')}; {figures(published)}", flush=True)
    cfg, trace = cb.load(sc, a.traces, a.seed)
    step_s = cb.search_step(trace)
    _, duration = true_traffic(cfg, a.seed, trace)
    t0 = time.perf_counter()
    a.journal_dir.mkdir(parents=True, exist_ok=True)
    run = Forks(cfg, a.seed, trace, step_s, journal=a.journal_dir / f"{a.scenario}-seed{a.seed}.jsonl")
    run.know(Plan(), run_arm(cfg, "reactive", a.seed, trace, None))
    plan, best, tried = search_hindsight(run, [plan])
    if any(best.summary.get(k) != published.get(k) for k in KEYS):
        raise SystemExit(f"bench/check_plan.py: the plan replays to {figures(best.summary)}, not the published figures")
    plan, best, tried, check = descend(cfg, run, plan, best, tried, duration, max_passes=a.passes)
    for t in tried[1:]:  # the first is the published plan itself
        what = "stopped: could not beat the plan" if t.get("pruned") else figures(t)
        print(f"  {t.get('neighbour') or t['plan']}: {what}")
    verdict = "passed: no neighbour beats it" if check.passed else "best found: " + "; ".join(check.beaten_by)
    print(f"check after {check.passes} pass(es), {check.neighbours} neighbours in the last: {verdict}")
    print(f"ends on: {plan.describe()}; {figures(best.summary)}")
    print(f"{len(tried)} runs, {time.perf_counter() - t0:.0f} s; search cost {json.dumps(run.cost.to_dict())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
