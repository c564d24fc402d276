"""Latency model, calibrated to seed 000's table.  Pure.

| context | mean (ms) | P99 (ms) |
|---------|-----------|----------|
| 4k      | 210 ± 15  | 240      |
| 8k      | 420 ± 30  | 510      |
| 32k     | 980 ± 120 | 1200+    |

The table reads as prefill-dominated (time to first token): it grows with context, sub-linearly above 8k.  A
request's prefill cannot finish sooner than `prefill_floor_seconds(ctx)`, the table interpolated in context; a node
also has a prefill *throughput* (tokens/s), so under load prefills queue and the time to first token grows — that
queueing is what the twin simulates.  Decode adds one inter-token latency per generated token, growing with the
number of requests decoding together.
"""

from __future__ import annotations

import numpy as np

# (context tokens, mean seconds, standard deviation seconds) from the seed table, plus an anchor at 0.
_CTX = np.array([0.0, 4096.0, 8192.0, 32768.0])
_MEAN = np.array([0.020, 0.210, 0.420, 0.980])
_SD = np.array([0.004, 0.013, 0.038, 0.095])  # P99 = mean + 2.33 sd: 240, 510, 1200 ms


def prefill_floor_seconds(ctx: np.ndarray) -> np.ndarray:
    """Mean time to first token of an unloaded node, per the seed table (linear interpolation, extrapolated)."""
    ctx = np.asarray(ctx, dtype=np.float64)
    out = np.interp(ctx, _CTX, _MEAN)
    over = ctx > _CTX[-1]
    if np.any(over):
        slope = (_MEAN[-1] - _MEAN[-2]) / (_CTX[-1] - _CTX[-2])
        out[over] = _MEAN[-1] + slope * (ctx[over] - _CTX[-1])
    return out


def prefill_sd_seconds(ctx: np.ndarray) -> np.ndarray:
    ctx = np.asarray(ctx, dtype=np.float64)
    return np.interp(ctx, _CTX, _SD)


def sample_prefill_seconds(ctx: np.ndarray, rng: np.random.Generator, speed: float = 1.0) -> np.ndarray:
    """Floor prefill time with the table's spread; `speed` < 1 is a slower version (v3.5 runs at 0.56)."""
    mean = prefill_floor_seconds(ctx)
    sd = prefill_sd_seconds(ctx)
    # A gamma with the table's mean and sd: positive and right-skewed like real latencies.
    shape = (mean / sd) ** 2
    scale = sd**2 / mean
    return rng.gamma(shape, scale) / speed


def inter_token_seconds(batch: int | np.ndarray, base_seconds: float, speed: float = 1.0) -> np.ndarray | float:
    """Decode time per token: `base` at batch 1, about doubling at a batch of 64 (memory-bandwidth bound)."""
    return base_seconds * (1.0 + np.asarray(batch, dtype=np.float64) / 64.0) / speed
