"""What `infercast backtest` costs a user who brings a trace (issue 37: the harm table in under a minute for an hour).

    .venv/bin/python bench/backtest_cost.py --traces /work/shared/traces  # run; publish docs/results/backtest_cost.json
    .venv/bin/python bench/backtest_cost.py --traces DIR --no-publish     # print only

Runs the command as a user runs it, `infercast backtest --trace F --series kv --json` (a subprocess: the import of
torch and every model's fit are in the figure), on the harm slices of `bench/forecast.py --harm` (the same files and
the same defaults, so the same samples), and beside it, in the same run, the floor any KV backtest costs: the same
command with one forecaster (`--models last_value --no-lstm --no-prophet`): loading the trace, sizing the fleet,
the twin's replay and marking its harm.  Wall seconds, and CPU seconds of the child (user + system).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
INFERCAST = ROOT / ".venv" / "bin" / "infercast"

FLOOR = ["--models", "last_value", "--no-lstm", "--no-prophet"]
TARGET_S = 60.0  # issue 37: the harm table in under a minute for an hour of trace


def timed(args: list[str]) -> tuple[float, float, dict]:
    """Wall and CPU seconds of one `infercast backtest` run, and its JSON."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(
        [str(INFERCAST), "backtest", *args, "--series", "kv", "--json"], capture_output=True, text=True
    )
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"infercast backtest {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, json.loads(done.stdout)


def measure(traces: Path) -> dict:
    # the harm slices as bench/forecast.py names them (importing it is cheap: its heavy imports are in functions)
    from forecast import HARM_SLICES, KV_TRACES, LABELS
    from results import commit_of

    rows = {}
    load = [round(os.getloadavg()[0], 1)]
    for name in HARM_SLICES:
        label, rel = LABELS[name], KV_TRACES[name]
        trace = ["--trace", str(traces / rel)]
        wall, cpu, res = timed(trace)
        floor_wall, floor_cpu, _ = timed(trace + FLOOR)
        harm = res["models"].get("lstm_aci", {}).get("harm") or {}
        rows[name] = {
            "label": label,
            "trace": rel,
            "samples": res["samples"],
            "span_s": res["span_s"],
            "models": sorted(res["models"]),
            "harm_episodes": harm.get("episodes"),
            "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1),
            "floor_wall_s": round(floor_wall, 1),
            "floor_cpu_s": round(floor_cpu, 1),
        }
        print(f"{name}: {wall:.1f} s wall, {cpu:.1f} s CPU; floor {floor_wall:.1f} s wall", flush=True)
    load.append(round(os.getloadavg()[0], 1))
    return {
        "slices": rows,
        "target_s": TARGET_S,
        "load_average": load,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}",
        "commit": commit_of(ROOT),
        "measured": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def table_slices(result: dict) -> str:
    lines = [
        "| slice | span s | samples | harm episodes scored | `infercast backtest` wall s | CPU s "
        "| floor (one forecaster) wall s | x floor | an hour's wall, scaled s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    worst = 0.0
    for r in result["slices"].values():
        hour = r["wall_s"] * 3600.0 / r["span_s"]  # the slices run 29-60 minutes: what an hour of the same costs
        worst = max(worst, hour)
        lines.append(
            f"| {r['label']} | {r['span_s']:,.0f} | {r['samples']} | {r['harm_episodes']} | {r['wall_s']:.1f} | "
            f"{r['cpu_s']:.1f} | {r['floor_wall_s']:.1f} | {r['wall_s'] / r['floor_wall_s']:.1f} | {hour:.0f} |"
        )
    met = "met" if worst < result["target_s"] else "not met"
    lo, hi = result["load_average"]
    return "\n".join(lines) + (
        f"\n\nTarget: the harm table in under {result['target_s']:.0f} s for an hour of trace: **{met}** on this "
        f"machine (the slowest slice at {worst:.0f} s an hour, scaled by its span). Models run: "
        f"{', '.join(next(iter(result['slices'].values()))['models'])}. {result['machine']}; load average "
        f"{lo} before, {hi} after. _Measured {result['measured']} at commit `{result['commit']}`; "
        "`bench/backtest_cost.py --traces /work/shared/traces`._"
    )


TABLES = {"slices": table_slices}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--traces", type=Path, required=True, help="the folder of the full public traces")
    ap.add_argument("--no-publish", action="store_true", help="print the table only")
    args = ap.parse_args()
    result = measure(args.traces)
    print(table_slices(result))
    if not args.no_publish:
        from results import publish

        print("published", publish("backtest_cost", result, TABLES))


if __name__ == "__main__":
    main()
