"""The twin's arms on both calibration scenarios, and how fast the twin runs.

    .venv/bin/python bench/twin.py                          # both scenarios, every arm, seed 0; publishes
    .venv/bin/python bench/twin.py --trace PATH             # plus a real trace's replay speed
    .venv/bin/python bench/twin.py --no-publish --scenarios flash-sale --arms none,reactive

Arms (`infercast twin run --control ARM`, docs/twin.md): `none`, `basic`, `reactive`, `predictive`,
`perfect-forecast` — the same seed, the same accounting (bench/control.py compares every arm against the bound).
Speed: simulated seconds per wall second, and offered, admitted (past the gateway) and served requests per wall
second, each counted separately (at 12,000 req/s most offered requests are refused in bulk, so offered per second
alone flatters the twin).  The baseline, measured in the same run on the same arrivals, is the least a per-request
discrete-event loop in Python does: push and pop two heap events per request, nothing else.  The perfect-forecast
arm's wall time includes the reactive run it reads the future from.  Seed 004's goodput ratios are also measured
on seeds 1-3 (how much of the reproduction is the file's seed).

With `--publish` (the default for a full run) the figures go to docs/results/twin.json and the README's and
docs/twin.md's marked tables (bench/results.py).

`--before DIR` (a checkout of an earlier commit: `git worktree add /tmp/twin-before COMMIT`) measures every
flash-sale arm again in the same run, the earlier code against this one, each in a fresh process and one after the
other, so both see the same load: wall and CPU seconds of each, the ratio, and whether the two summaries are the
same (they must be: a speed-up changes no result).  `--speed-only` does only that comparison (nothing published).
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

DEFAULT_TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
SCENARIOS = ("flash-sale", "seed004-bench")
ARMS = ("none", "basic", "reactive", "predictive", "perfect-forecast")
# seed 004's benchmark table (生产环境基准测试): throughput req/s, P99 ms, memory efficiency, recovery s
SEED004 = {
    "none": dict(label="no protection (无防护)", goodput=142, p99_ms=15000, efficiency=0.58, recovery="> 300"),
    "basic": dict(label="basic rate limiting (基础限流)", goodput=238, p99_ms=1200, efficiency=0.72, recovery="120"),
    "reactive": dict(label="dynamic breakers (动态熔断)", goodput=315, p99_ms=680, efficiency=0.89, recovery="45"),
    "perfect-forecast": dict(label="ideal (理想值)", goodput=400, p99_ms="< 500", efficiency="> 0.95", recovery="< 30"),
}
SEED004_FIXES = ("basic", "reactive", "perfect-forecast")
OTHER_SEEDS = (1, 2, 3)
KEYS = (
    "oom_events", "p99_latency_ms", "p99_latency_ms_pre", "goodput_rps", "offered", "served", "rejected", "failed",
    "in_flight", "admitted_ratio", "recovery_seconds", "recovered", "memory_efficiency", "admitted_attempts",
)  # fmt: skip


def per_request_event_loop(arrival_times) -> float:
    """Wall seconds for a bare per-request event loop over the arrivals (the baseline)."""
    t0 = time.perf_counter()
    heap: list[tuple[float, int, int]] = []
    for i, t in enumerate(arrival_times.tolist()):
        heapq.heappush(heap, (t, 0, i))
    while heap:
        t, kind, i = heapq.heappop(heap)
        if kind == 0:
            heapq.heappush(heap, (t + 0.5, 1, i))
    return time.perf_counter() - t0


def run_arm(scenario: str, arm: str, seed: int = 0) -> dict:
    from infercast.config import load_config, resolve_scenario
    from infercast.simulator.control.driver import run_arm

    cfg = load_config(resolve_scenario(scenario))
    t0 = time.perf_counter()
    s = run_arm(cfg, arm, seed=seed).summary
    wall = time.perf_counter() - t0
    out = {k: s[k] for k in KEYS}
    sim = s["simulated_seconds"]
    out.update(
        wall_s=round(wall, 2),
        sim_s_per_wall_s=round(sim / wall, 1),
        offered_per_wall_s=round(s["offered"] / wall),
        admitted_per_wall_s=round(s["admitted_attempts"] / wall),
        served_per_wall_s=round(s["served"] / wall),
    )
    return out


# one arm in a fresh process with the code under PYTHONPATH: wall and CPU seconds, and a digest of its summary less
# the keys that time the run (the same digest from two commits: the same results)
_TIMED_ARM = """
import hashlib, json, sys, time
from infercast.simulator.control.driver import run_arm
from infercast.config import load_config, resolve_scenario
cfg = load_config(resolve_scenario(sys.argv[1]))
w, c = time.perf_counter(), time.process_time()
s = run_arm(cfg, sys.argv[2], seed=int(sys.argv[3])).summary
w, c = time.perf_counter() - w, time.process_time() - c
s = {k: v for k, v in s.items() if k not in ("wall_seconds", "speedup_vs_real_time", "timeseries")}
digest = hashlib.sha256(json.dumps(s, sort_keys=True, default=str).encode()).hexdigest()[:16]
print(json.dumps({"wall_s": w, "cpu_s": c, "simulated_s": s["simulated_seconds"], "summary_sha256": digest}))
"""


def timed_arm(src: Path, scenario: str, arm: str, seed: int) -> dict:
    """`_TIMED_ARM` with the code at `src` (this checkout or an earlier one), one thread for numpy and torch."""
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-c", _TIMED_ARM, scenario, arm, str(seed)],
        cwd=src, env=env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"twin bench: {arm} under {src} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare_before(before: Path, arms: list[str], seed: int, scenario: str = "flash-sale") -> dict:
    """Each arm under the earlier checkout and under this one, one after the other (the same load for both)."""
    from results import commit_of

    out = {"before": commit_of(before), "now": commit_of(ROOT), "scenario": scenario, "seed": seed, "arms": {}}
    for arm in arms:
        old, new = timed_arm(before, scenario, arm, seed), timed_arm(ROOT, scenario, arm, seed)
        r = {
            "before_wall_s": round(old["wall_s"], 2),
            "before_cpu_s": round(old["cpu_s"], 2),
            "wall_s": round(new["wall_s"], 2),
            "cpu_s": round(new["cpu_s"], 2),
            "before_x_real_time": round(old["simulated_s"] / old["cpu_s"], 1),
            "x_real_time": round(new["simulated_s"] / new["cpu_s"], 1),
            "cpu_speedup": round(old["cpu_s"] / new["cpu_s"], 2),
            "same_summary": old["summary_sha256"] == new["summary_sha256"],
        }
        out["arms"][arm] = r
        print(
            f"{scenario} {arm:16s} before {r['before_cpu_s']:7.2f} CPU s ({r['before_x_real_time']}x real time), "
            f"now {r['cpu_s']:7.2f} CPU s ({r['x_real_time']}x), {r['cpu_speedup']}x faster; same summary: "
            f"{r['same_summary']}",
            flush=True,
        )
    out["load_average"] = round(os.getloadavg()[0], 1)
    return out


def scenario_arrivals(scenario: str = "flash-sale", seed: int = 0):
    import numpy as np

    from infercast.config import load_config, resolve_scenario
    from infercast.simulator.twin.fleet import build_fleet

    cfg = load_config(resolve_scenario(scenario))
    fleet = build_fleet(cfg, seed=seed)
    dt = cfg.twin.tick_seconds
    n = int(cfg.scenario.duration_seconds / dt)
    return np.concatenate([fleet.traffic.arrivals(k * dt, (k + 1) * dt).orig_t for k in range(n)])


def bench_trace(path: Path) -> dict:
    import numpy as np

    from infercast.config import load_config, resolve_scenario
    from infercast.simulator.replay.traces import load_trace
    from infercast.simulator.twin.run import run_trace, size_fleet_for_trace

    cfg = load_config(resolve_scenario("flash-sale"))
    trace = load_trace(path)
    t0 = time.perf_counter()
    sized = size_fleet_for_trace(trace, cfg)
    t_size = time.perf_counter() - t0
    t1 = time.perf_counter()
    s = run_trace(trace, sized, "none", seed=0).summary
    wall = time.perf_counter() - t1
    return {
        "trace": path.name,
        "simulated_s": round(trace.duration_s, 1),
        "wall_s": round(wall, 2),
        "sizing_wall_s": round(t_size, 2),
        "sim_s_per_wall_s": round(trace.duration_s / wall, 1),
        "requests": len(trace),
        "served": s["served"],
        "baseline_event_loop_wall_s": round(per_request_event_loop(np.asarray(trace.arrivals_s)), 3),
    }


# --- tables -----------------------------------------------------------------------------------------------------
from infercast.simulator.demo.report import fmt_cell as _n  # noqa: E402 (imported after the sys.path set-up)
from infercast.simulator.demo.report import fmt_recovery as _recovery  # noqa: E402


def _arms_table(result: dict, scenario: str) -> str:
    arms = result["arms"][scenario]
    lines = [
        "| arm | OOM | urgent P99 ms (pre-surge) | goodput req/s | served | rejected | failed | recovery s "
        "| memory efficiency |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for arm, r in arms.items():
        lines.append(
            f"| `{arm}` | {r['oom_events']} | {_n(r['p99_latency_ms'])} ({_n(r['p99_latency_ms_pre'])}) | "
            f"{_n(r['goodput_rps'], 1)} | {_n(r['served'])} | {_n(r['rejected'])} | {_n(r['failed'])} | "
            f"{_recovery(r)} | {_n(r['memory_efficiency'], 2)} |"
        )
    return "\n".join(lines)


def _gain_line(result: dict, scenario: str) -> str:
    """predictive / reactive and perfect-forecast / reactive goodput; on seed 004's bench beside the seed's own
    ideal / dynamic-breaker ratio (400 / 315), which measures the same thing there (its table's rows are these arms);
    on the flash sale the control bench (docs/control.md) says what the gain is worth against a bound."""
    arms = result["arms"][scenario]
    if not {"reactive", "predictive"} <= set(arms):
        return ""
    base = arms["reactive"]["goodput_rps"]
    line = f"\n\n`predictive` / `reactive` goodput: {arms['predictive']['goodput_rps'] / base:.2f}"
    if "perfect-forecast" in arms:
        line += f"; `perfect-forecast` / `reactive`: {arms['perfect-forecast']['goodput_rps'] / base:.2f}"
    if scenario == "seed004-bench":
        return line + " (the seed's ideal / dynamic breakers: 400 / 315 = 1.27)."
    return line + ". Against the hindsight bound and the arms an operator runs without ML: docs/control.md."


def table_flash_sale(result: dict) -> str:
    return _arms_table(result, "flash-sale") + _gain_line(result, "flash-sale")


def table_seed004(result: dict) -> str:
    arms = result["arms"]["seed004-bench"]
    base = arms["none"]["goodput_rps"] or float("nan")
    lines = [
        "| arm | goodput / `none` (seed) | urgent P99 ms (seed) | memory efficiency (seed) | recovery s (seed) | OOM |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for arm, r in arms.items():
        # the seed has no row for infercast's own arm: its cells say "-"
        s = SEED004.get(arm, dict(label="infercast", goodput=None, p99_ms=None, efficiency=None, recovery="-"))
        ratio = r["goodput_rps"] / base
        seed_ratio = "-" if s["goodput"] is None else f"{s['goodput'] / 142:.2f}"
        lines.append(
            f"| `{arm}`: {s['label']} | {ratio:.2f} ({seed_ratio}) | {_n(r['p99_latency_ms'])} "
            f"({_n(s['p99_ms'])}) | {_n(r['memory_efficiency'], 2)} ({_n(s['efficiency'], 2)}) | "
            f"{_recovery(r)} ({s['recovery']}) | {r['oom_events']} |"
        )
    return "\n".join(lines) + _gain_line(result, "seed004-bench") + _other_seeds_line(result)


def seed004_other_seeds(seeds: tuple[int, ...] = OTHER_SEEDS) -> dict:
    """Goodput / `none` and recovery of seed 004's rows on other seeds: how much of the reproduction is the file's
    seed."""
    from infercast.config import load_config, resolve_scenario
    from infercast.simulator.demo.run import run_demo

    cfg = load_config(resolve_scenario("seed004-bench"))
    out = {}
    for seed in seeds:
        # the demo's runner: perfect-forecast reads the future from this seed's `reactive` run instead of making its own
        runs = {a: r.summary for a, r in run_demo(cfg, ["none", *SEED004_FIXES], seed, "seed004-bench").arms.items()}
        out[str(seed)] = {
            "goodput_ratio": {a: round(runs[a]["goodput_rps"] / runs["none"]["goodput_rps"], 2) for a in SEED004_FIXES},
            "recovery_seconds": {a: runs[a]["recovery_seconds"] for a in runs},
        }
    return out


def _other_seeds_line(result: dict) -> str:
    other = result.get("seed004_other_seeds")
    if not other:
        return ""

    def per_seed(key: str, fmt: str) -> str:
        return "; ".join(
            f"seed {seed}: " + ", ".join(f"`{arm}` {v:{fmt}}" for arm, v in runs[key].items())
            for seed, runs in other.items()
        )

    goodput, recovery = per_seed("goodput_ratio", ".2f"), per_seed("recovery_seconds", ".0f")
    want = ", ".join(f"{SEED004[a]['goodput'] / 142:.2f}" for a in SEED004_FIXES)
    rows = ", ".join(str(SEED004[a]["recovery"]) for a in ("none", *SEED004_FIXES))
    return (
        f"\n\nGoodput / `none` on other seeds (the table's {want}): {goodput}."
        f"\n\nRecovery s on other seeds (the table's {rows}): {recovery}."
    )


def table_speed(result: dict) -> str:
    lines = [
        "| run | simulated s | wall s | x real time | offered / wall s | admitted / wall s | served / wall s |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for scenario, arms in result["arms"].items():
        for arm, r in arms.items():
            lines.append(
                f"| {scenario} `{arm}` | {_n(r['wall_s'] * r['sim_s_per_wall_s'])} | {r['wall_s']} | "
                f"{r['sim_s_per_wall_s']} | {_n(r['offered_per_wall_s'])} | {_n(r['admitted_per_wall_s'])} | "
                f"{_n(r['served_per_wall_s'])} |"
            )
    base = result.get("baseline")
    if base:
        lines.append(
            f"\nBaseline in the same run: a bare per-request event loop (two heap events per request, no fleet) over "
            f"the flash sale's {_n(base['requests'])} arrivals takes {base['wall_s']} s; the twin's `none` arm "
            f"takes {base['twin_none_wall_s']} s ({base['twin_vs_event_loop']}x the loop's speed)."
        )
    tr = result.get("trace")
    if tr:
        lines.append(
            f"A real trace ({tr['trace']}, {_n(tr['requests'])} requests, {_n(tr['simulated_s'])} s) replays in "
            f"{tr['wall_s']} s ({tr['sim_s_per_wall_s']}x real time; sizing its fleet took {tr['sizing_wall_s']} s)."
        )
    cmp = result.get("before")
    if cmp:
        lines += ["", table_before(cmp)]
    return "\n".join(lines)


def table_before(cmp: dict) -> str:
    """The `--before` comparison: each arm under the earlier commit and this one, in the same run."""
    lines = [
        f"| {cmp['scenario']} arm, seed {cmp['seed']} | CPU s at {cmp['before']} | x real time | CPU s at "
        f"{cmp['now']} | x real time | speed-up | same summary |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for arm, r in cmp["arms"].items():
        lines.append(
            f"| `{arm}` | {r['before_cpu_s']} | {r['before_x_real_time']} | {r['cpu_s']} | {r['x_real_time']} | "
            f"{r['cpu_speedup']}x | {'yes' if r['same_summary'] else 'NO'} |"
        )
    lines.append(
        f"\nEach arm in a fresh process under commit {cmp['before']} and then under {cmp['now']}, one after the other "
        f"(CPU seconds: the machine was shared, load average {cmp['load_average']} at the end); x real time is "
        "simulated seconds per CPU second."
    )
    return "\n".join(lines)


TABLES = {"flash-sale": table_flash_sale, "seed004": table_seed004, "speed": table_speed}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--scenarios", default=",".join(SCENARIOS))
    p.add_argument("--arms", default=",".join(ARMS))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--trace", type=Path, default=DEFAULT_TRACE if DEFAULT_TRACE.exists() else None)
    p.add_argument("--no-publish", action="store_true", help="print only; do not write docs/results/twin.json")
    p.add_argument(
        "--before",
        type=Path,
        default=None,
        help="a checkout of an earlier commit: every flash-sale arm timed under it and under this one, in this run",
    )
    p.add_argument("--speed-only", action="store_true", help="with --before: only that comparison, nothing published")
    a = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    if a.speed_only:
        if a.before is None:
            p.error("--speed-only needs --before")
        for scenario in a.scenarios.split(","):
            print(table_before(compare_before(a.before, a.arms.split(","), a.seed, scenario)), "\n")
        return 0
    result: dict = {"seed": a.seed, "arms": {}}
    for scenario in a.scenarios.split(","):
        result["arms"][scenario] = {}
        for arm in a.arms.split(","):
            r = run_arm(scenario, arm, a.seed)
            result["arms"][scenario][arm] = r
            print(f"{scenario:14s} {arm:9s} " + " ".join(f"{k}={r[k]}" for k in (*KEYS[:4], "wall_s")), flush=True)
    fs = result["arms"].get("flash-sale", {})
    if "none" in fs:
        arrivals = scenario_arrivals("flash-sale", a.seed)
        loop = per_request_event_loop(arrivals)
        result["baseline"] = {
            "requests": len(arrivals),
            "wall_s": round(loop, 2),
            "twin_none_wall_s": fs["none"]["wall_s"],
            "twin_vs_event_loop": round(loop / fs["none"]["wall_s"], 2),
        }
    if a.trace:
        result["trace"] = bench_trace(a.trace)
    full = set(a.scenarios.split(",")) == set(SCENARIOS) and set(a.arms.split(",")) == set(ARMS)
    if full:
        result["seed004_other_seeds"] = seed004_other_seeds()
    if a.before is not None:
        result["before"] = compare_before(a.before, a.arms.split(","), a.seed)
    for name, render in TABLES.items():
        if name == "speed" or (name == "flash-sale" and "flash-sale" in result["arms"]):
            print(render(result), "\n")
    if "seed004-bench" in result["arms"] and {"none"} <= set(result["arms"]["seed004-bench"]):
        print(table_seed004(result), "\n")
    if full and not a.no_publish:
        from results import publish

        print("published", publish("twin", result, TABLES))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
