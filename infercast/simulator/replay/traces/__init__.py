"""Real LLM-serving request traces as arrays: Azure LLM 2023 (CSV), Mooncake FAST'25 (JSONL), ServeGen (rate windows).

`load_trace(path)` detects the format and returns a `Trace`: sorted arrival times in seconds from the trace start,
with prompt and output token counts per request (and Mooncake's KV prefix-block ids).  ServeGen ships no requests,
only per-client request rates per 600 s window with a fitted inter-arrival distribution; arrivals are generated from
those (see `_servegen_arrivals`), and token counts from a `LengthDistribution`.

Every problem with a file raises `TraceError` naming the file, the line and what is wrong, values out of range
included: a request's token count above `MAX_TOKENS` (10,000,000), a time beyond `MAX_TRACE_SECONDS` (10 years), a
ServeGen rate above `MAX_SERVEGEN_RATE` (1,000,000 requests/s) or a shape or cv above `MAX_SERVEGEN_SHAPE`, a
Mooncake hash id outside int64.  (A token count of 1e23 used to wrap negative in int64 and the run went on.)
Nothing here touches the network or the clock; the only I/O is reading the one file or directory asked for.

The parts: `model` (the `Trace` and `Surge` types, the errors and the bounds), `files` (reading a file, detecting its
format, the Azure and Mooncake readers) and `servegen` (ServeGen's rate windows and the arrivals drawn from them);
this module loads a trace of any format and turns it into series.
"""

from __future__ import annotations

import json
import logging
import math
import re
from pathlib import Path

import numpy as np

from infercast.config import LengthDistribution
from infercast.simulator.replay.traces.files import _check_range, _cut, _load_azure, _load_mooncake, detect_format
from infercast.simulator.replay.traces.model import (
    LONG_PROMPT_TOKENS,
    MAX_GENERATED_ARRIVALS,
    MAX_SERVEGEN_RATE,
    MAX_SERVEGEN_SHAPE,
    MAX_TOKENS,
    MAX_TRACE_SECONDS,
    MOONCAKE_QUANTUM_S,
    Surge,
    SurgeError,
    Trace,
    TraceError,
    surge_arg,
)
from infercast.simulator.replay.traces.servegen import _load_servegen, servegen_rates

#: the names a reader of traces uses; each lives in the module of its part (model, files, servegen)
__all__ = [
    "LONG_PROMPT_TOKENS",
    "MAX_GENERATED_ARRIVALS",
    "MAX_SERVEGEN_RATE",
    "MAX_SERVEGEN_SHAPE",
    "MAX_TOKENS",
    "MAX_TRACE_SECONDS",
    "Surge",
    "SurgeError",
    "Trace",
    "TraceError",
    "detect_format",
    "load_trace",
    "long_share_series",
    "main",
    "rate_series",
    "servegen_rates",
    "summary",
    "surge_arg",
]

log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------------------------
# Public entry points


def _default_name(path: Path, fmt: str) -> str:
    if fmt == "azure":
        m = re.search(r"AzureLLMInferenceTrace_(\w+)", path.name)
        return f"azure-{m.group(1)}" if m else f"azure-{path.stem}"
    if fmt == "mooncake":
        return "mooncake"
    return ""


def load_trace(
    path: str | Path,
    *,
    lengths: LengthDistribution | None = None,
    seed: int = 0,
    start_s: float | None = None,
    end_s: float | None = None,
    long_share: float = 0.15,
) -> Trace:
    """Read a trace file or ServeGen directory; `start_s`/`end_s` keep [start_s, end_s) re-based to t = 0.

    `lengths`, `long_share` and `seed` only matter for ServeGen (arrivals and token counts are generated).
    """
    _check_range(start_s, end_s)
    p = Path(path)
    fmt = detect_format(p)
    if fmt == "azure":
        trace = _cut(p, _load_azure(p, _default_name(p, fmt)), start_s, end_s)
    elif fmt == "mooncake":
        trace = _cut(p, _load_mooncake(p, _default_name(p, fmt)), start_s, end_s)
    else:
        trace = _load_servegen(p, lengths or LengthDistribution(), long_share, seed, start_s, end_s)
    return trace


def _bins(trace: Trace, step_s: float) -> tuple[np.ndarray, np.ndarray]:
    if not (step_s > 0 and math.isfinite(step_s)):
        raise ValueError(f"step_s must be a positive number, got {step_s}")
    if trace.source == "mooncake" and step_s < MOONCAKE_QUANTUM_S:
        log.warning("%s: Mooncake timestamps come in ~3 s steps; %g s bins show that artefact", trace.name, step_s)
    n_bins = math.floor(trace.duration_s / step_s + 1e-9)
    starts = np.arange(n_bins) * step_s
    idx = np.floor(trace.arrivals_s / step_s).astype(np.int64)
    return starts, idx


def rate_series(trace: Trace, step_s: float) -> tuple[np.ndarray, np.ndarray]:
    """(bin start s, requests/s) over the complete bins of `step_s` seconds; a partial last bin is left out."""
    starts, idx = _bins(trace, step_s)
    inside = (idx >= 0) & (idx < len(starts))
    counts = np.bincount(idx[inside], minlength=len(starts)).astype(np.float64)
    return starts, counts / step_s


def long_share_series(
    trace: Trace, step_s: float, threshold: int = LONG_PROMPT_TOKENS
) -> tuple[np.ndarray, np.ndarray]:
    """(bin start s, share of requests with prompt_tokens > threshold); NaN for bins without requests."""
    starts, idx = _bins(trace, step_s)
    inside = (idx >= 0) & (idx < len(starts))
    counts = np.bincount(idx[inside], minlength=len(starts)).astype(np.float64)
    long = np.bincount(idx[inside], weights=(trace.prompt_tokens[inside] > threshold), minlength=len(starts))
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(counts > 0, long / counts, np.nan)
    return starts, share


def summary(trace: Trace) -> dict[str, object]:
    """A few numbers that describe a trace (what `python -m infercast.simulator.replay.traces FILE` prints)."""
    n = len(trace)
    return {
        "name": trace.name,
        "source": trace.source,
        "requests": n,
        "duration_s": round(trace.duration_s, 3),
        "mean_rps": round(n / trace.duration_s, 3) if trace.duration_s > 0 else None,
        "prompt_tokens_p50": int(np.median(trace.prompt_tokens)) if n else None,
        "long_share": round(float(np.mean(trace.prompt_tokens > LONG_PROMPT_TOKENS)), 4) if n else None,
        "start_time": trace.start_time.isoformat() if trace.start_time else None,
    }


def main(argv: list[str] | None = None) -> int:
    """`python -m infercast.simulator.replay.traces PATH [--start S] [--end S]`: load each trace, print its summary and
    load time."""
    import argparse
    import time

    parser = argparse.ArgumentParser(prog="python -m infercast.simulator.replay.traces", description=main.__doc__)
    parser.add_argument("paths", nargs="+", type=Path)
    parser.add_argument("--start", type=float, default=None, help="window start, s from the trace start")
    parser.add_argument("--end", type=float, default=None, help="window end, s")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    status = 0
    for p in args.paths:
        t0 = time.perf_counter()
        try:
            trace = load_trace(p, start_s=args.start, end_s=args.end, seed=args.seed)
        except (TraceError, ValueError) as e:
            print(f"error: {e}")
            status = 1
            continue
        info = summary(trace) | {"load_ms": round((time.perf_counter() - t0) * 1000, 1)}
        print(json.dumps(info))
    return status
