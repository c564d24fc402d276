"""The predictive page's lead end to end, ten runs: `tests/alerting/test_end_to_end.py` (real exporter, predictor,
Prometheus and Alertmanager over the flash-sale twin at 5x) run N times, each writing its figures as JSON.

    nice -n 10 .venv/bin/python bench/e2e.py [--runs 10] [--json OUT]

Goal (issue 10): the predictive page at least 120 simulated seconds before the first v4 instance crosses 0.75 in at
least 9 of 10 runs.  Publishes docs/results/e2e.json and the `bench:e2e:*` blocks (bench/results.py).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEST = "tests/alerting/test_end_to_end.py"
GOAL_LEAD_S = 120.0
GOAL_RUNS = 9


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=10)
    p.add_argument("--json", type=Path, default=None, help="write here instead of publishing")
    args = p.parse_args(argv)
    runs = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.runs):
            out = Path(tmp) / f"run{i}.json"
            env = {**os.environ, "INFERCAST_E2E_REPORT": str(out)}
            r = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", TEST],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                check=False,
            )
            rep = json.loads(out.read_text()) if out.exists() else {"error": r.stdout[-600:]}
            rep["passed"] = r.returncode == 0
            runs.append(rep)
            print(json.dumps(rep), flush=True)
    leads = [r["lead_vs_first_instance_s"] for r in runs if "lead_vs_first_instance_s" in r]
    result = {
        "runs": runs,
        "leads_vs_first_instance_s": leads,
        "met": sum(lead >= GOAL_LEAD_S for lead in leads),
        "of": len(runs),
        "median_lead_s": statistics.median(leads) if leads else None,
        "wall_seconds": round(time.perf_counter() - t0, 1),
        "command": "nice -n 10 .venv/bin/python bench/e2e.py",
    }
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}))
    sys.path.insert(0, str(ROOT))
    from bench import results

    results.publish_or_write("e2e", result, TABLES, args.json)
    return 0


def render_runs(result: dict) -> str:
    rows = ["| run | page (sim s) | first instance > 0.75 | lead | pool mean > 0.75 | lead over the threshold page |"]
    rows.append("|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(result["runs"], 1):
        if "lead_vs_first_instance_s" not in r:
            rows.append(f"| {i} | failed | | | | |")
            continue
        over = r.get("lead_over_reactive_alert_s")
        rows.append(
            f"| {i} | {r['page_sim_s']:.0f} | {r['first_instance_crossed_sim_s']:.0f} | "
            f"{r['lead_vs_first_instance_s']:.0f} s | {r['pool_mean_crossed_sim_s'] or '-'} | "
            f"{'-' if over is None else f'{over:.0f} s'} |"
        )
    med = result["median_lead_s"]
    rows.append("")
    rows.append(
        f"Lead of at least {GOAL_LEAD_S:.0f} s over the first instance's crossing in **{result['met']} of "
        f"{result['of']}** runs (goal {GOAL_RUNS} of 10); median lead {'-' if med is None else f'{med:.0f} s'}."
    )
    return "\n".join(rows)


TABLES = {"runs": render_runs}


if __name__ == "__main__":
    sys.exit(main())
