"""The engine lab's bench: the same arrivals against real vLLM engines under none, reactive and predictive control.

    .venv/bin/python bench/lab.py [--runs N] [--publish]

One lab (2 engines, docs/lab.md) serves every run; between runs the proxy's limit is lifted and the engines and the
page are left to settle (`infercast.lab.run.settle`).  The slices were chosen before any run was scored, apart from
the first 60 s of the conversation trace used while building the lab: seconds 120-360 of the trace with a surge that
ramps over 180 s, seconds 360-510 with a step surge, and seconds 240-390 as they are (the calm slice: no surge).
The trace is tests/data's slice of Azure's 2023 conversation trace (its ATTRIBUTION.md).  Each run's report is
what `infercast lab run --json` prints; the tables are rendered from docs/results/lab.json.
"""

from __future__ import annotations

import argparse
import sys
import time
from argparse import Namespace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from results import publish  # noqa: E402

TRACE = ROOT / "tests" / "data" / "traces" / "azure" / "AzureLLMInferenceTrace_conv.csv"
#: name -> (start, seconds, surge or None); chosen before scoring
SLICES = {
    "ramp": (120.0, 240.0, "20,210,4,180"),
    "step": (360.0, 150.0, "20,120,4"),
    "calm": (240.0, 150.0, None),
}
CONTROLS = ("none", "reactive", "predictive")
KEYS = ("requests", "completed", "failed", "preemptions", "kv_peak", "ttft_p50_ms", "ttft_p99_ms", "goodput_rps",
        "first_preemption_s", "page_s", "page_lead_seconds")  # fmt: skip


def _cell(v) -> str:
    return "–" if v is None else (f"{v:g}" if isinstance(v, float) else str(v))


def table_runs(result: dict) -> str:
    lines = [
        "| slice | control | run | requests | failed | preemptions | KV peak | TTFT P50 ms | TTFT P99 ms | goodput rps "
        "| first preemption s | page s | page lead s | first action s |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["runs"]:
        first_action = next((a["at_s"] for a in r["actions"] if a["status"] == "applied"), None)
        cells = [r["slice"], r["control"], r["run"], *(r[k] for k in KEYS if k != "completed"), first_action]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def table_setup(result: dict) -> str:
    s = result["setup"]
    return "\n".join(
        [
            "| | |",
            "|---|---|",
            f"| engine | {s['engine']} |",
            f"| engines, KV pool each | {s['engines']} x {s['blocks']} blocks of {s['block_size']} tokens |",
            f"| lab start to engines ready | {s['start_seconds']:.0f} s |",
            f"| CPU seconds, whole bench (this process and its children) | {s['cpu_seconds']:.0f} |",
            f"| wall seconds, whole bench | {s['wall_seconds']:.0f} |",
            f"| install (scripts/install-engines.sh) | {s['install']} |",
        ]
    )


TABLES = {"runs": table_runs, "setup": table_setup}


def main(argv: list[str] | None = None) -> int:
    import resource

    from infercast.lab.cli import load_plan
    from infercast.lab.run import run_load, settle
    from infercast.lab.stack import LabSettings, start_lab
    from infercast.traces import Surge

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=1, help="runs of each slice and control (default 1)")
    p.add_argument("--slices", default=",".join(SLICES), help="which slices (default: all)")
    p.add_argument("--dir", type=Path, default=ROOT / "runs" / "lab-bench")
    p.add_argument("--publish", action="store_true", help="write docs/results/lab.json and the tables")
    args = p.parse_args(argv)
    settings = LabSettings(engines=2)
    wall0 = time.monotonic()
    runs = []
    t = time.monotonic()
    with start_lab(settings, args.dir, log=print) as lab:
        started = time.monotonic() - t
        for name in args.slices.split(","):
            start, seconds, surge = SLICES[name]
            plan, factor, _ = load_plan(
                Namespace(
                    trace=str(TRACE),
                    start=start,
                    seconds=seconds,
                    rate_scale=1.0,
                    seed=0,
                    surge=[Surge.parse(surge)] if surge else [],
                ),
                settings.shape.max_model_len,
            )
            controls = ("predictive",) if surge is None else CONTROLS
            for run in range(1, args.runs + 1):
                for control in controls:
                    settled = settle(lab, plan)
                    report = run_load(lab, plan, control, duration_s=seconds)
                    report.pop("kv_series", None)
                    report.update(slice=name, run=run, settled=settled, token_scale=round(factor, 4))
                    print({k: report[k] for k in ("slice", "control", *KEYS)}, flush=True)
                    runs.append(report)
    usage = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {
        "setup": {
            "engine": runs[0]["engine"] if runs else "",
            "engines": settings.engines,
            "blocks": settings.shape.blocks,
            "block_size": settings.shape.block_size,
            "start_seconds": started,
            "cpu_seconds": sum(u.ru_utime + u.ru_stime for u in usage),
            "wall_seconds": time.monotonic() - wall0,
            "install": "194 s, 3.5 GB (pip's cache warm; ~11 min cold per ../shared/ENGINES.md's trial)",
            "trace": TRACE.name,
            "slices": {k: list(v) for k, v in SLICES.items()},
        },
        "runs": runs,
    }
    if args.publish:
        publish("lab", result, TABLES)
    else:
        print(table_setup(result))
        print(table_runs(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
