"""`infercast twin run --scenario NAME | --trace FILE [--control ...] [--json] [--out DIR]`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from infercast.arm_names import ALIASES as OLD_NAMES
from infercast.arm_names import ARMS
from infercast.config import ConfigError, load_config, resolve_scenario

# `oracle` is still accepted, the old name of perfect-forecast (infercast.arm_names.ALIASES)
CONTROLS = ARMS
ALIASES = tuple(OLD_NAMES)
SEARCHES = ("fast", "full", "quick")  # hindsight's search (infercast.simulator.control.plans, .levers)

CONTROL_HELP = (
    "the controller the fleet runs under (default: none): none (the fleet file as it is), basic (the gateway's "
    "token bucket), reactive (the seeds' fixes and an HPA), scheduled, last-value, predict-linear, predictive "
    "(reactive plus infercast's control loop, which owns the standby reserve, told the calendar or fed those "
    "forecasts), perfect-forecast (the same loop fed the true future; 'oracle' is its old name), hindsight (the "
    "best plan of floors found by running every candidate on the same arrivals; see --search)"
)


def _surge(text: str):
    """`surge_arg`, its module imported only when a --surge is given (`twin run --help` loads no trace code)."""
    from infercast.simulator.replay.traces import surge_arg

    return surge_arg(text)


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="twin_command", metavar="ACTION", required=True)
    r = sub.add_parser("run", help="run the twin to the end of a scenario or a trace")
    src = r.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--scenario",
        help="a scenario name (examples/NAME.yaml, or a variant: flash-sale-unannounced, calm-day) or a fleet file "
        "with a scenario",
    )
    src.add_argument("--trace", help="a trace: Azure CSV, Mooncake JSONL or ServeGen directory")
    r.add_argument("--config", help="fleet file for --trace (default: examples/flash-sale.yaml)")
    r.add_argument("--control", choices=(*CONTROLS, *ALIASES), default="none", metavar="ARM", help=CONTROL_HELP)
    r.add_argument(
        "--search",
        choices=SEARCHES,
        default="full",
        help="hindsight's search: full (every static split of the standby nodes and every one-change-point plan, "
        "on a 120 s grid and where the true traffic climbs) or fast (the whole-reservoir splits held from the start, "
        "then the best from each point the traffic climbs: about a tenth of the runs), each ending with every lever "
        "moved one step either way until none beats the plan (its single-lever check) and with the best causal plan "
        "(acting only after the surge's onset); quick (the reservoir's splits from the onset and the first change "
        "point, no check: a best found); other arms ignore it (default: full)",
    )
    r.add_argument(
        "--seed",
        type=int,
        default=None,
        help="the random seed of the run: arrivals and priorities (default: the scenario's own seed; 0 on a trace)",
    )
    r.add_argument("--time-scale", type=float, default=1.0, help="replay the trace this many times faster")
    r.add_argument("--rate-scale", type=float, default=1.0, help="multiply the trace's request rate")
    r.add_argument(
        "--surge",
        action="append",
        type=_surge,
        default=[],
        metavar="START,SECONDS,FACTOR[,RAMP]",
        help="with --trace: multiply the trace's own arrival rate by FACTOR for SECONDS from START (seconds of the "
        "trace as replayed, after --time-scale), rising linearly from 1x over the first RAMP seconds (default 0: a "
        "step); the surge's requests are shaped like the trace's own in that window, drawn under --seed.  "
        "Repeatable (the surges multiply where they overlap).  --size-fleet sizes the fleet for the trace without "
        "its surges",
    )
    r.add_argument(
        "--size-fleet",
        action="store_true",
        help="size the fleet for the trace: always-on nodes for its median minute, standby nodes so the whole fleet "
        "serves its busiest minute at KV 0.85, the fleet file's protections set up again on it (docs/twin.md, Traces)",
    )
    r.add_argument("--out", default="runs/twin", help="directory for the time series and summary")
    r.add_argument("--json", action="store_true", help="print the summary as JSON")


def run(args: argparse.Namespace) -> int:
    from infercast.simulator.control.driver import run_arm
    from infercast.simulator.twin.tracefleet import surged_trace_run

    started = time.perf_counter()
    try:
        if args.scenario:
            from infercast.simulator.twin.variants import load_scenario

            if args.surge:
                raise ValueError("--surge needs --trace (a scenario's surges are its phases: examples/*.yaml)")
            cfg = load_scenario(args.scenario)
            if cfg.scenario is None:
                raise ConfigError(f"{args.scenario}: the fleet file has no scenario: section")
            result = run_arm(cfg, args.control, args.seed, search=args.search)
        else:
            from infercast.simulator.replay.traces import TraceError, load_trace

            cfg = load_config(args.config or resolve_scenario("flash-sale"))
            try:
                lengths = cfg.scenario.lengths if cfg.scenario else None
                trace = load_trace(args.trace, lengths=lengths, seed=args.seed or 0)
            except TraceError as e:
                print(f"infercast: {e}", file=sys.stderr)
                return 2
            if args.time_scale != 1.0 or args.rate_scale != 1.0:
                trace = trace.scaled(args.time_scale, args.rate_scale, seed=args.seed or 0)
            # sized (with --size-fleet) for the trace without its surges, as an operator sized it before they came
            cfg, trace, notes = surged_trace_run(
                trace, cfg, args.surge, size_fleet=args.size_fleet, seed=args.seed or 0, name=Path(args.trace).name
            )
            if notes:
                print(f"twin: {Path(args.trace).name}: " + "; ".join(notes), file=sys.stderr)
            result = run_arm(cfg, args.control, args.seed or 0, trace=trace, search=args.search)
    except ValueError as e:
        if isinstance(e, ConfigError):
            raise
        print(f"infercast: {e}", file=sys.stderr)
        return 2
    wall = time.perf_counter() - started
    result.summary["wall_seconds"] = round(wall, 2)
    result.summary["speedup_vs_real_time"] = round(result.summary["simulated_seconds"] / max(wall, 1e-9), 1)
    result.write(Path(args.out))
    if args.json:
        print(json.dumps(result.summary, indent=2))
    else:
        s = result.summary
        print(f"control={s['control']} seed={s['seed']} simulated={s['simulated_seconds']:.0f}s wall={wall:.1f}s")
        for k in ("oom_events", "p99_latency_ms", "p99_latency_ms_pre", "goodput_rps", "admitted_ratio"):
            print(f"  {k:22s} {s[k]}")
        for k in ("recovery_seconds", "memory_efficiency", "timeseries"):
            print(f"  {k:22s} {s[k]}")
        surge, oom, deg = s.get("surge_start_seconds"), s.get("first_oom_seconds"), s.get("first_degradation_seconds")
        if surge is not None:
            story = f"surge at {surge:.0f}s"
            if oom is not None:
                story += f"; first OOM at {oom:.0f}s ({oom - surge:+.0f}s)"
            if deg is not None:
                story += f"; first degradation to a fallback pool at {deg:.0f}s ({deg - surge:+.0f}s)"
            print(f"  {story}; every event: {Path(s['timeseries']).parent / 'events.json'}")
    return 0
