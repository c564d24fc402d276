"""`infercast backtest --trace FILE_OR_DIR [--series kv|rps] [--horizon 300] [--json] [--plot FILE]`.

Parses the flags, builds the series and scores every model on it (`infercast.simulator.replay.evaluate`), and prints the
scores per model as a table, or as one JSON object with `--json`.
"""

from __future__ import annotations

import argparse
import json
import sys

from infercast.simulator.replay.evaluate import BacktestOptions, backtest, load_series, table


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--trace", required=True, help="trace file (Azure CSV, Mooncake JSONL), ServeGen dir, or scenario:NAME"
    )
    p.add_argument("--series", choices=("kv", "rps"), default="kv", help="KV usage via the twin, or request rate")
    p.add_argument("--horizon", type=float, default=300.0, help="forecast horizon, seconds (default 300)")
    p.add_argument("--step", type=float, default=15.0, help="sample step, seconds (default 15, the scrape step)")
    p.add_argument("--threshold", type=float, default=None, help="breach threshold (default: 0.75 for kv)")
    p.add_argument(
        "--warmup",
        type=float,
        default=300.0,
        help="seconds of history before the first origin (default 300: the service's 20 points at 15 s)",
    )
    p.add_argument("--refit", type=float, default=1800.0, help="refit interval, seconds (as in production)")
    p.add_argument("--config", default=None, help="fleet file the twin sizes from (default examples/flash-sale.yaml)")
    p.add_argument("--start", type=float, default=None, help="use the trace from this second")
    p.add_argument("--end", type=float, default=None, help="use the trace up to this second")
    p.add_argument("--models", default=None, help="comma-separated subset of models to run")
    p.add_argument("--lstm", default=None, help="LSTM model file (default: the shipped one, if present)")
    p.add_argument("--no-lstm", action="store_true", help="leave the LSTM out")
    p.add_argument("--no-prophet", action="store_true", help="leave Prophet out")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument("--plot", default=None, help="write a PNG of actual vs forecast with the band and breaches")
    p.add_argument(
        "--aggregate",
        choices=("max", "mean"),
        default="max",
        help="kv: the pool's fullest instance (default; what the predictive alert pages on) or its mean",
    )


def run(args: argparse.Namespace) -> int:
    import numpy as np

    np.random.seed(0)  # Prophet's band is sampled from numpy's global generator: the same run prints the same scores
    try:
        opts = BacktestOptions.from_namespace(args)
        data = load_series(args.trace, opts)
    except (ValueError, OSError) as e:  # TraceError is a ValueError: a bad file is a clear message, not a trace
        print(f"infercast backtest: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(f"infercast backtest: the kv series needs the fleet twin ({e})", file=sys.stderr)
        return 2
    if len(data.history.t) < 3:
        print(f"infercast backtest: {args.trace}: only {len(data.history.t)} samples", file=sys.stderr)
        return 2
    result = backtest(data, opts)
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print(table(result))
    return 0
