"""How fast the twin runs: simulated seconds per wall second and requests per wall second.

    .venv/bin/python bench/twin.py                     # flash-sale scenario, all three controls
    .venv/bin/python bench/twin.py --trace PATH        # plus a real trace (default: the Azure conv hour if present)

Goals (issue: foundation and twin): the 30-minute flash sale (peak 12,000 req/s) at least 30x faster than real time
on one core, and a 1-hour real trace in under 30 s.  The baseline, measured in the same run on the same arrivals,
is the least a per-request discrete-event loop in Python does: push and pop two heap events per request (arrival
and completion), nothing else.  The ratio says how far the twin's cohort design is ahead of that floor.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from infercast.config import load_config  # noqa: E402
from infercast.twin.fleet import build_fleet  # noqa: E402
from infercast.twin.run import run_trace, size_fleet_for_trace  # noqa: E402

DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"


def per_request_event_loop(arrival_times: np.ndarray, service_s: float = 0.5) -> float:
    """Wall seconds for a bare per-request event loop over the arrivals (the baseline)."""
    t0 = time.perf_counter()
    heap: list[tuple[float, int, int]] = []
    for i, t in enumerate(arrival_times.tolist()):
        heapq.heappush(heap, (t, 0, i))
    while heap:
        t, kind, i = heapq.heappop(heap)
        if kind == 0:
            heapq.heappush(heap, (t + service_s, 1, i))
    return time.perf_counter() - t0


def bench_scenario(control: str) -> dict:
    cfg = load_config(ROOT / "examples" / "flash-sale.yaml")
    fleet = build_fleet(cfg, control, seed=0)
    t0 = time.perf_counter()
    fleet.advance(cfg.scenario.duration_seconds)
    wall = time.perf_counter() - t0
    offered = fleet.router.offered_total
    return {
        "run": f"flash-sale/{control}",
        "simulated_s": cfg.scenario.duration_seconds,
        "wall_s": round(wall, 2),
        "sim_s_per_wall_s": round(cfg.scenario.duration_seconds / wall, 1),
        "requests": offered,
        "requests_per_wall_s": round(offered / wall),
    }


def scenario_arrivals(seed: int = 0) -> np.ndarray:
    cfg = load_config(ROOT / "examples" / "flash-sale.yaml")
    fleet = build_fleet(cfg, "none", seed=seed)
    out = []
    dt = cfg.twin.tick_seconds
    for k in range(int(cfg.scenario.duration_seconds / dt)):
        out.append(fleet.traffic.arrivals(k * dt, (k + 1) * dt).orig_t)
    return np.concatenate(out)


def bench_trace(path: Path) -> dict:
    from infercast.traces import load_trace

    cfg = load_config(ROOT / "examples" / "flash-sale.yaml")
    trace = load_trace(path)
    t0 = time.perf_counter()
    sized = size_fleet_for_trace(trace, cfg)
    t_size = time.perf_counter() - t0
    t1 = time.perf_counter()
    result = run_trace(trace, sized, "none", seed=0)
    wall = time.perf_counter() - t1
    base = per_request_event_loop(np.asarray(trace.arrivals_s))
    return {
        "run": f"trace/{path.name}",
        "simulated_s": round(trace.duration_s, 1),
        "wall_s": round(wall, 2),
        "sizing_wall_s": round(t_size, 2),
        "sim_s_per_wall_s": round(trace.duration_s / wall, 1),
        "requests": len(trace),
        "requests_per_wall_s": round(len(trace) / wall),
        "baseline_event_loop_wall_s": round(base, 3),
        "served": result.summary["served_requests"],
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE if DEFAULT_TRACE.exists() else None)
    p.add_argument("--controls", default="none,reactive,oracle")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    rows = [bench_scenario(c) for c in args.controls.split(",")]
    arrivals = scenario_arrivals()
    base = per_request_event_loop(arrivals)
    for r in rows:
        r["baseline_event_loop_wall_s"] = round(base, 2)
        r["twin_vs_event_loop"] = round(base / r["wall_s"], 2)
    if args.trace:
        rows.append(bench_trace(args.trace))
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'run':42s} {'sim s':>7s} {'wall s':>7s} {'x real':>7s} {'req/wall s':>11s} {'event loop s':>12s}")
    for r in rows:
        print(
            f"{r['run']:42s} {r['simulated_s']:7.0f} {r['wall_s']:7.2f} {r['sim_s_per_wall_s']:7.1f} "
            f"{r['requests_per_wall_s']:11d} {r['baseline_event_loop_wall_s']:12.2f}"
        )
    print(
        "x real = simulated seconds per wall second (goal >= 30 for flash-sale); the event loop is the baseline: "
        "two heap events per request, no fleet at all, on the same arrivals."
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
