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


class FloorSampler:
    """Per-node stream of prefill floors: the same distribution as `sample_prefill_seconds` (a gamma with the
    table's mean and sd), drawn in blocks so admitting one request costs a few scalar operations."""

    def __init__(self, rng: np.random.Generator, speed: float = 1.0, block: int = 4096) -> None:
        self.rng, self.speed, self.block = rng, speed, block
        self._u = np.empty(0)
        self._z = np.empty(0)  # the normal quantile of each uniform in `_u` (for `many`)
        self._i = 0

    def _refill(self) -> None:
        self._u = self.rng.random(self.block)
        self._z = _norm_ppf_many(self._u)
        self._i = 0

    def _draw_z(self, n: int) -> np.ndarray:
        """The normal quantiles of the next n uniforms, the block refilled exactly when n calls would refill it."""
        parts = []
        while n > 0:
            if self._i >= len(self._u):
                self._refill()
            k = min(n, len(self._u) - self._i)
            parts.append(self._z[self._i : self._i + k])
            self._i += k
            n -= k
        return parts[0] if len(parts) == 1 else np.concatenate(parts) if parts else np.empty(0)

    def many(self, ctx: np.ndarray) -> np.ndarray:
        """`[self(c) for c in ctx]` to the last bit, for a node admitting many requests in one tick: a few integer
        prompt lengths (the usual admission) through `_many_few`, else `_many_arrays`."""
        ctx = np.asarray(ctx)
        if len(ctx) <= _FEW and ctx.dtype.kind in "iu":
            return self._many_few(ctx)
        return self._many_arrays(ctx)

    def _many_few(self, ctx: np.ndarray) -> np.ndarray:
        """`_many_arrays` to the last bit, in plain Python floats: each prompt length's terms (`_floor_terms`, the
        array code's own values, kept per length) and then `_many_arrays`' element-wise arithmetic, the same IEEE
        operations in the same order (+ - * / are correctly rounded in Python as in numpy; the power is Python's
        `**` in both)."""
        z = self._draw_z(len(ctx)).tolist()
        lengths = ctx.tolist()
        try:
            terms = [_TERMS[c] for c in lengths]
        except KeyError:  # a length not seen yet
            terms = [_floor_terms(lengths)[c] for c in lengths]
        speed = self.speed
        out = []
        for (shape, a, b, scale), zz in zip(terms, z, strict=True):
            y = a + zz / b
            out.append((shape * y**3 * scale) / speed)
        return np.array(out, dtype=np.float64)

    def _many_arrays(self, ctx: np.ndarray) -> np.ndarray:
        """`[self(c) for c in ctx]` to the last bit, for a node admitting many requests in one tick.  The table
        lookups and the normal quantile's central branch are array operations (the same interpolation code and the
        same IEEE operations in the same order); the tails of the quantile and the powers stay scalar, as in
        `__call__` (numpy's vectorised log and power may round differently from the C library's)."""
        ctx = np.asarray(ctx)
        z = self._draw_z(len(ctx))
        mean = prefill_floor_seconds(ctx)
        sd = np.interp(ctx, _CTX, _SD)
        # `__call__`'s arithmetic, one operation at a time over the arrays: + - * / and the square root are correctly
        # rounded in numpy as in Python, so each element gets the bits the scalar code gives it; the three powers go
        # through Python's `**` (the C library's pow), element by element
        shape = np.array([q**2 for q in (mean / sd).tolist()], dtype=np.float64)
        y = (1.0 - 1.0 / (9.0 * shape)) + z / (3.0 * np.sqrt(shape))
        x = shape * np.array([v**3 for v in y.tolist()], dtype=np.float64)
        scale = np.array([v**2 for v in sd.tolist()], dtype=np.float64) / mean
        return (x * scale) / self.speed

    def __call__(self, ctx: int) -> float:
        if self._i >= len(self._u):
            self._refill()
        u = self._u[self._i]
        self._i += 1
        mean = (
            float(np.interp(ctx, _CTX, _MEAN)) if ctx <= _CTX[-1] else float(prefill_floor_seconds(np.array([ctx]))[0])
        )
        sd = float(np.interp(ctx, _CTX, _SD))
        shape = (mean / sd) ** 2
        # inverse CDF of the gamma through the Wilson-Hilferty normal approximation (shape >= 25 here)
        z = _norm_ppf(u)
        x = shape * (1.0 - 1.0 / (9.0 * shape) + z / (3.0 * np.sqrt(shape))) ** 3
        return x * (sd**2 / mean) / self.speed


_FEW = 32  # `FloorSampler.many` of at most this many integer lengths goes through plain Python floats
# per prompt length (tokens): (shape, 1 - 1/(9 shape), 3 sqrt(shape), sd**2 / mean) of the gamma its floor is drawn
# from, as `FloorSampler._many_arrays` computes them (pure: the same for every node and run)
_TERMS: dict[int, tuple[float, float, float, float]] = {}
_TERM_BLOCK = 512


def _floor_terms(lengths: list[int]) -> dict[int, tuple[float, float, float, float]]:
    """`_TERMS`, with the lengths not in it yet computed by `_many_arrays`' own array code -- each with the whole
    block of `_TERM_BLOCK` lengths around it (prompt lengths spread over tens of thousands of values: computed a
    block at a time, a run needs a few dozen such calls instead of one per new length; each length's terms are its
    own, element by element, whatever else is computed beside it)."""
    miss = [c for c in lengths if c not in _TERMS]
    if miss:
        if len(_TERMS) > 1 << 18:  # 262k lengths seen: start again rather than grow on
            _TERMS.clear()
            miss = lengths
        miss = [
            c for k in sorted({c // _TERM_BLOCK for c in miss}) for c in range(k * _TERM_BLOCK, (k + 1) * _TERM_BLOCK)
        ]
        ctx = np.array(miss, dtype=np.int64)
        mean = prefill_floor_seconds(ctx)
        sd = np.interp(ctx, _CTX, _SD)
        shape = np.array([q**2 for q in (mean / sd).tolist()], dtype=np.float64)
        a = 1.0 - 1.0 / (9.0 * shape)
        b = 3.0 * np.sqrt(shape)
        scale = np.array([v**2 for v in sd.tolist()], dtype=np.float64) / mean
        _TERMS.update(zip(miss, zip(shape.tolist(), a.tolist(), b.tolist(), scale.tolist(), strict=True), strict=True))
    return _TERMS


# Acklam's coefficients of the central branch (numerator, denominator)
_PPF_A = (
    -3.969683028665376e01,
    2.209460984245205e02,
    -2.759285104469687e02,
    1.383577518672690e02,
    -3.066479806614716e01,
    2.506628277459239e00,
)
_PPF_B = (
    -5.447609879822406e01,
    1.615858368580409e02,
    -1.556989798598866e02,
    6.680131188771972e01,
    -1.328068155288572e01,
)


def _norm_ppf_many(u: np.ndarray) -> np.ndarray:
    """`_norm_ppf` over an array: the central branch as array arithmetic (the same operations in the same order),
    the tails (about 5% of draws) one by one through `_norm_ppf` itself."""
    a, b = _PPF_A, _PPF_B
    u = np.minimum(np.maximum(u, 1e-12), 1 - 1e-12)
    q = u - 0.5
    r = q * q
    z = (
        (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5])
        * q
        / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    )
    tail = ((u < 0.02425) | (u > 1 - 0.02425)).nonzero()[0]
    if len(tail):
        z[tail] = [_norm_ppf(v) for v in u[tail]]
    return z


def _norm_ppf(u: float) -> float:
    """Standard normal quantile (Acklam's rational approximation, |error| < 1.2e-9)."""
    a, b = _PPF_A, _PPF_B
    c = (
        -7.784894002430293e-03,
        -3.223964580411365e-01,
        -2.400758277161838e00,
        -2.549732539343734e00,
        4.374664141464968e00,
        2.938163982698783e00,
    )
    d = (7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e00, 3.754408661907416e00)  # fmt: skip
    u = min(max(u, 1e-12), 1 - 1e-12)
    if u < 0.02425:
        q = np.sqrt(-2 * np.log(u))
        return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / (
            (((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1
        )
    if u > 1 - 0.02425:
        return -_norm_ppf(1 - u)
    q = u - 0.5
    r = q * q
    return (
        (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5])
        * q
        / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1)
    )


def inter_token_seconds(batch: int | np.ndarray, base_seconds: float, speed: float = 1.0) -> np.ndarray | float:
    """Decode time per token: `base` at batch 1, about doubling at a batch of 64 (memory-bandwidth bound)."""
    return base_seconds * (1.0 + np.asarray(batch, dtype=np.float64) / 64.0) / speed
