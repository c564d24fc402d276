"""`infercast lab` (start the lab, serve until Ctrl-C) and `infercast lab run --trace F ...` (one run, a report).

The lab needs the engine install (`bash scripts/install.sh --engines`) and HAProxy, Prometheus and Alertmanager
from Debian; docs/lab.md says what runs and what is scaled down.  Everything it starts is stopped on the way out,
on success, on an error and on Ctrl-C.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from pathlib import Path

from infercast.simulator.lab.control import CONTROLS
from infercast.simulator.lab.engines import EngineShape
from infercast.simulator.replay.traces import SurgeError, surge_arg


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engines", type=int, default=2, help="vLLM engines to start (default 2)")
    p.add_argument("--dir", default="runs/lab", help="working directory: logs, configs, audit (default runs/lab)")
    p.add_argument("--blocks", type=int, default=EngineShape.blocks,
                   help=f"each engine's KV pool, in blocks of 32 tokens (default {EngineShape.blocks})")  # fmt: skip


def add_arguments(p: argparse.ArgumentParser) -> None:
    _common(p)
    sub = p.add_subparsers(dest="lab_command", metavar="ACTION")
    r = sub.add_parser("run", help="replay a trace against the lab's proxy under a control and report")
    _common(r)
    r.add_argument("--trace", required=True, help="a trace: Azure CSV, Mooncake JSONL or ServeGen directory")
    r.add_argument("--start", type=float, default=0.0, help="seconds into the trace to start from (default 0)")
    r.add_argument("--seconds", type=float, default=120.0, help="seconds of the trace to replay (default 120)")
    r.add_argument("--rate-scale", type=float, default=1.0, help="multiply the trace's request rate")
    r.add_argument(
        "--surge",
        action="append",
        type=surge_arg,
        default=[],
        metavar="START,SECONDS,FACTOR[,RAMP]",
        help="multiply the replayed slice's own arrival rate by FACTOR for SECONDS from START (seconds of the slice, "
        "after --rate-scale), rising linearly from 1x over the first RAMP seconds (default 0: a step); the surge's "
        "requests are shaped like the trace's own in that window, drawn under --seed.  Repeatable.  The same flag "
        "and parser as `infercast twin run --surge` (infercast.simulator.replay.traces.Surge)",
    )
    r.add_argument("--control", choices=CONTROLS, default="none", help="none, reactive or predictive (default none)")
    r.add_argument("--ttft-slo-ms", type=float, default=1000.0, help="the TTFT SLO goodput counts against")
    r.add_argument("--seed", type=int, default=0, help="seed of the rate scaling and the surge's copies")
    r.add_argument("--json", action="store_true", help="print the report as JSON")


def _settings(args: argparse.Namespace):
    from infercast.simulator.lab.engines import EngineShape
    from infercast.simulator.lab.stack import LabSettings

    if not 1 <= args.engines <= 8:
        raise SystemExit("infercast lab: --engines must be 1-8 (each engine takes ~1 GB and a share of the CPUs)")
    if not 4 <= args.blocks <= 4096:
        raise SystemExit("infercast lab: --blocks must be 4-4096")
    shape = EngineShape(blocks=args.blocks, max_model_len=min(256, (args.blocks - 1) * 32))
    return LabSettings(engines=args.engines, shape=shape)


def load_plan(args: argparse.Namespace, max_model_len: int):
    """The requests to send: the trace's slice, rate-scaled, surged, token counts scaled. SystemExit on bad input."""
    from infercast.simulator.lab.load import scale_tokens
    from infercast.simulator.replay.traces import TraceError, load_trace

    if not (args.seconds > 0 and args.start >= 0):
        raise SystemExit("infercast lab run: --seconds must be > 0 and --start >= 0")
    if not args.rate_scale > 0:
        raise SystemExit("infercast lab run: --rate-scale must be > 0")
    try:
        trace = load_trace(args.trace, start_s=args.start, end_s=args.start + args.seconds)
        if trace.duration_s < args.seconds - 1e-6 or len(trace) == 0:
            raise SystemExit(
                f"infercast lab run: the trace has {trace.duration_s:.0f}s (and {len(trace)} requests) from --start "
                f"{args.start:g}, not the {args.seconds:g}s asked for"
            )
        if args.rate_scale != 1.0:
            trace = trace.scaled(1.0, args.rate_scale, seed=args.seed)
        for surge in args.surge:  # as `twin run` lays them on: each checked against the slice, then in turn
            surge.check(trace.duration_s, Path(args.trace).name)
        for surge in args.surge:
            trace = trace.surged(surge, seed=args.seed)
    except (TraceError, SurgeError, OSError) as e:
        raise SystemExit(f"infercast lab run: {e}") from None
    plan, factor = scale_tokens(trace, max_model_len)
    return plan, factor, trace


def run(args: argparse.Namespace) -> int:
    from infercast.servers import ServerFailed, ServerUnavailable
    from infercast.simulator.lab.engines import EngineFailed, EngineUnavailable

    settings = _settings(args)
    plan = None
    if args.lab_command == "run":
        plan, factor, trace = load_plan(args, settings.shape.max_model_len)
        print(f"lab: {trace.name}: {len(plan)} requests in {args.seconds:g}s, tokens x{factor:.3f}", file=sys.stderr)
    stop = threading.Event()

    def interrupted(*_: object) -> None:
        stop.set()
        raise KeyboardInterrupt

    # SIGINT too, explicitly: a lab started in the background of a script inherits SIGINT ignored
    old = {sig: signal.signal(sig, interrupted) for sig in (signal.SIGTERM, signal.SIGINT)}
    from infercast.simulator.lab.stack import start_lab

    def log(msg: str) -> None:
        print(msg, file=sys.stderr, flush=True)

    try:
        with start_lab(settings, Path(args.dir), log=log) as lab:
            if plan is None:
                log(
                    f"lab: proxy {lab.proxy_url} (engines {', '.join(lab.engine_urls.values())}), Prometheus "
                    f"{lab.prometheus_url}, Alertmanager {lab.alertmanager_url}, exporter {lab.exporter_url}, "
                    f"predictor {lab.predictor_url}; logs in {args.dir}. Ctrl-C stops everything."
                )
                while not stop.wait(2.0):
                    lab.check_alive()
                return 0
            from infercast.simulator.lab.run import run_load

            report = run_load(lab, plan, args.control, duration_s=args.seconds, ttft_slo_s=args.ttft_slo_ms / 1000,
                              log=log)  # fmt: skip
            report["trace"] = {
                "name": trace.name,
                "start_s": args.start,
                "seconds": args.seconds,
                "rate_scale": args.rate_scale,
                "surge": [s.describe() for s in args.surge],
                "token_scale": round(factor, 4),
            }
            (Path(args.dir) / f"report-{args.control}.json").write_text(json.dumps(report, indent=1))
            shown = {k: v for k, v in report.items() if k not in ("kv_series", "client", "prometheus_series")}
            if args.json:
                print(json.dumps(shown, indent=1))
            else:
                for k, v in shown.items():
                    print(f"{k}: {v}")
            return 0
    except (EngineUnavailable, ServerUnavailable) as e:
        print(f"infercast lab: {e}", file=sys.stderr)
        return 3
    except (EngineFailed, ServerFailed, RuntimeError) as e:
        print(f"infercast lab: {e}", file=sys.stderr)
        return 1
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
