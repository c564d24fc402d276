"""`--surge START,SECONDS,FACTOR[,RAMP]` for `infercast lab run`: a trace's arrivals multiplied in a window.

The same syntax and the same refusals as `infercast twin run --surge`: inside [START, START + SECONDS) of the
(cut) trace the request rate is multiplied by FACTOR, reached linearly over the first RAMP seconds (default 0: a
step).  Refused: a window that does not lie inside the trace, a FACTOR <= 0, a RAMP longer than the window.  A
factor above 1 adds copies of the window's requests (each with its original's token counts, shifted by a uniform
jitter of up to one mean gap); below 1 it keeps each request with that probability.  Pure and deterministic for a
seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from infercast.traces import Trace


class SurgeError(ValueError):
    """A --surge that cannot be applied; the message says which part is wrong."""


@dataclass(frozen=True)
class Surge:
    start_s: float
    seconds: float
    factor: float
    ramp_s: float = 0.0

    def factor_at(self, t: np.ndarray) -> np.ndarray:
        """The rate multiplier at times `t` (1 outside the window)."""
        inside = (t >= self.start_s) & (t < self.start_s + self.seconds)
        if self.ramp_s > 0:
            with np.errstate(over="ignore", divide="ignore"):  # a ramp of a few picoseconds is a step
                up = np.clip((t - self.start_s) / self.ramp_s, 0.0, 1.0)
            f = 1.0 + (self.factor - 1.0) * up
        else:
            f = np.full(t.shape, self.factor)
        return np.where(inside, f, 1.0)


def parse_surge(text: str) -> Surge:
    parts = [p.strip() for p in text.split(",")]
    if len(parts) not in (3, 4):
        raise SurgeError(f"--surge {text!r}: expected START,SECONDS,FACTOR[,RAMP]")
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise SurgeError(f"--surge {text!r}: START, SECONDS, FACTOR and RAMP must be numbers") from None
    if not all(math.isfinite(v) for v in values):
        raise SurgeError(f"--surge {text!r}: every value must be finite")
    start, seconds, factor = values[:3]
    ramp = values[3] if len(values) == 4 else 0.0
    if start < 0 or seconds <= 0:
        raise SurgeError(f"--surge {text!r}: START must be >= 0 and SECONDS > 0")
    if factor <= 0:
        raise SurgeError(f"--surge {text!r}: FACTOR must be > 0, got {factor:g}")
    if ramp < 0 or ramp > seconds:
        raise SurgeError(f"--surge {text!r}: RAMP ({ramp:g} s) must be between 0 and the window's {seconds:g} s")
    return Surge(start, seconds, factor, ramp)


def apply_surge(trace: Trace, surge: Surge, seed: int = 0) -> Trace:
    """`trace` with the surge's extra (or fewer) requests; SurgeError when the window is not inside the trace."""
    end = surge.start_s + surge.seconds
    if end > trace.duration_s + 1e-9:
        raise SurgeError(
            f"--surge window {surge.start_s:g}-{end:g} s is outside the trace ({trace.duration_s:g} s after --start "
            "and --seconds)"
        )
    rng = np.random.default_rng(seed)
    t = trace.arrivals_s
    f = surge.factor_at(t)
    whole = np.floor(f).astype(np.int64)
    copies = whole + (rng.random(len(t)) < f - whole)
    idx = np.repeat(np.arange(len(t)), copies)
    first = np.ones(len(idx), dtype=bool)
    first[1:] = idx[1:] != idx[:-1]
    gap = trace.duration_s / len(t) if len(t) else 0.0
    offsets = np.where(first, 0.0, rng.uniform(0.0, gap, len(idx)))
    arrivals = np.clip(t[idx] + offsets, 0.0, trace.duration_s)
    order = np.argsort(arrivals, kind="stable")
    idx = idx[order]
    return replace(
        trace,
        name=f"{trace.name} surge x{surge.factor:g}",
        arrivals_s=arrivals[order],
        prompt_tokens=trace.prompt_tokens[idx],
        output_tokens=trace.output_tokens[idx],
        hash_ids=None if trace.hash_ids is None else [trace.hash_ids[i] for i in idx],
    )
