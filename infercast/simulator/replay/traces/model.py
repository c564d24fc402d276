"""A trace as arrays (`Trace`), the surges laid on one (`Surge`), the errors, and the bounds every value is held to."""

from __future__ import annotations

import logging
import math
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np

log = logging.getLogger(__name__)

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length")
SERVEGEN_COLUMNS = ("timestamp", "rate", "cv", "pat_name", "pat_arg1", "pat_arg2")
SERVEGEN_PATTERNS = ("", "Gamma", "Weibull")
SERVEGEN_WINDOW_S = 600.0
MOONCAKE_QUANTUM_S = 3.0  # Mooncake timestamps come in ~3 s steps
LONG_PROMPT_TOKENS = 8192
MAX_GENERATED_ARRIVALS = 20_000_000
#: the most tokens one request's prompt or output may hold (the longest context windows are a few million)
MAX_TOKENS = 10_000_000
#: the latest time in a trace, seconds from its start (Mooncake's milliseconds, ServeGen's window starts)
MAX_TRACE_SECONDS = 10 * 365 * 86400
#: the highest ServeGen per-client rate, requests/s
MAX_SERVEGEN_RATE = 1_000_000.0
#: the largest ServeGen cv and fitted shape or scale
MAX_SERVEGEN_SHAPE = 1e6
_INT64 = 2**63
_CHUNK_RE = re.compile(r"^chunk-(\d+)-trace\.csv(\.gz)?$")


class TraceError(ValueError):
    """A trace file that cannot be used; the message names the file, the line or row, and the problem."""


class SurgeError(ValueError):
    """A surge that cannot be laid on a trace (`--surge START,SECONDS,FACTOR[,RAMP]`); the message says why."""


@dataclass(frozen=True)
class Surge:
    """The trace's own arrival rate times `factor` for `seconds` from `start_s` (seconds of the replayed trace),
    rising linearly from 1x over the first `ramp_s` seconds (0: a step)."""

    start_s: float
    seconds: float
    factor: float
    ramp_s: float = 0.0

    def __post_init__(self) -> None:
        for name in ("start_s", "seconds", "factor", "ramp_s"):
            if not math.isfinite(getattr(self, name)):
                raise SurgeError(f"surge {name}: must be a finite number, got {getattr(self, name)}")
        if self.start_s < 0:
            raise SurgeError(f"surge start {self.start_s:g} s: must be >= 0")
        if self.seconds <= 0:
            raise SurgeError(f"surge length {self.seconds:g} s: must be > 0")
        if self.factor <= 0:
            raise SurgeError(f"surge factor {self.factor:g}: must be > 0 (1 leaves the trace as it is)")
        if self.ramp_s < 0:
            raise SurgeError(f"surge ramp {self.ramp_s:g} s: must be >= 0")
        if self.ramp_s > self.seconds:
            raise SurgeError(f"surge ramp {self.ramp_s:g} s is longer than the surge ({self.seconds:g} s)")

    @classmethod
    def parse(cls, text: str) -> Surge:
        """`START,SECONDS,FACTOR[,RAMP]`, e.g. `600,300,4` or `600,300,4,60`."""
        parts = [p.strip() for p in str(text).split(",")]
        if len(parts) not in (3, 4):
            raise SurgeError(f"surge {text!r}: expected START,SECONDS,FACTOR[,RAMP] (seconds, seconds, a factor)")
        try:
            values = [float(p) for p in parts]
        except ValueError:
            raise SurgeError(f"surge {text!r}: START,SECONDS,FACTOR[,RAMP] must be numbers") from None
        return cls(*values)

    @property
    def end_s(self) -> float:
        return self.start_s + self.seconds

    def check(self, duration_s: float, name: str = "the trace") -> None:
        """SurgeError when the window is not inside the trace's [0, duration_s]."""
        if self.end_s > duration_s + 1e-9:
            raise SurgeError(
                f"surge {self.describe()}: the window {self.start_s:g}-{self.end_s:g} s is outside {name} "
                f"(0-{duration_s:g} s as replayed)"
            )

    def multiplier(self, t: np.ndarray) -> np.ndarray:
        """The factor the rate is multiplied by at times `t` inside the window."""
        if self.ramp_s <= 0:
            return np.full(np.shape(t), float(self.factor))
        with np.errstate(over="ignore"):  # a ramp of a few femtoseconds is a step
            frac = np.clip((np.asarray(t, dtype=np.float64) - self.start_s) / self.ramp_s, 0.0, 1.0)
        return 1.0 + (self.factor - 1.0) * frac

    def describe(self) -> str:
        ramp = f", ramp {self.ramp_s:g} s" if self.ramp_s else ""
        return f"x{self.factor:g} from {self.start_s:g} s for {self.seconds:g} s{ramp}"


def surge_arg(text: str) -> Surge:
    """argparse's type for `--surge` (`twin run`, `lab run`): `Surge.parse`'s grammar and refusals, as a usage
    error (rc 2)."""
    import argparse

    try:
        return Surge.parse(text)
    except SurgeError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


@dataclass(frozen=True)
class Trace:
    """Requests of one trace, sorted by arrival; all arrays have one entry per request."""

    name: str
    source: str  # "azure" | "mooncake" | "servegen" | "synthetic"
    arrivals_s: np.ndarray  # float64, sorted, seconds from the trace start
    prompt_tokens: np.ndarray  # int64 >= 0
    output_tokens: np.ndarray  # int64 >= 0
    duration_s: float  # span covered, >= last arrival
    hash_ids: list[np.ndarray] | None = field(default=None, repr=False)  # Mooncake 512-token prefix-block ids
    start_time: datetime | None = None  # wall-clock time of t = 0 when the source has one (Azure)
    #: the surges laid on the trace's own arrivals (`surged`), in the order applied
    surges: tuple[Surge, ...] = ()

    def __post_init__(self) -> None:
        n = len(self.arrivals_s)
        if len(self.prompt_tokens) != n or len(self.output_tokens) != n:
            raise ValueError(
                f"trace {self.name}: {n} arrivals but {len(self.prompt_tokens)} prompt and "
                f"{len(self.output_tokens)} output token counts"
            )
        if self.hash_ids is not None and len(self.hash_ids) != n:
            raise ValueError(f"trace {self.name}: {n} arrivals but {len(self.hash_ids)} hash_ids entries")

    def __len__(self) -> int:
        return len(self.arrivals_s)

    def scaled(self, time_factor: float = 1.0, rate_factor: float = 1.0, seed: int = 0) -> Trace:
        """Replay faster or slower (`time_factor` 2 = twice as fast) and with more or fewer requests.

        `rate_factor` r > 1 keeps every request and adds floor(r) - 1 copies of each, plus one more with probability
        r - floor(r); each copy is shifted by a uniform jitter of up to one mean inter-arrival gap (clipped to the
        trace).  r < 1 keeps each request with probability r.  Copies keep their original's tokens and hash ids.
        Deterministic for a given seed.
        """
        if not (time_factor > 0 and math.isfinite(time_factor)):
            raise ValueError(f"time_factor must be a positive number, got {time_factor}")
        if not (rate_factor > 0 and math.isfinite(rate_factor)):
            raise ValueError(f"rate_factor must be a positive number, got {rate_factor}")
        rng = np.random.default_rng(seed)
        n = len(self)
        if rate_factor == 1.0:
            idx = np.arange(n)
            offsets = np.zeros(n)
        elif rate_factor < 1.0:
            idx = np.flatnonzero(rng.random(n) < rate_factor)
            offsets = np.zeros(len(idx))
        else:
            whole = math.floor(rate_factor)
            copies = np.full(n, whole, dtype=np.int64) + (rng.random(n) < rate_factor - whole)
            idx = np.repeat(np.arange(n), copies)
            # The first instance of each request stays put; extra copies get jitter.
            first = np.ones(len(idx), dtype=bool)
            first[1:] = idx[1:] != idx[:-1]
            gap = self.duration_s / n if n else 0.0
            offsets = np.where(first, 0.0, rng.uniform(0.0, gap, len(idx)))
        arrivals = np.clip(self.arrivals_s[idx] + offsets, 0.0, self.duration_s) / time_factor
        order = np.argsort(arrivals, kind="stable")
        idx = idx[order]
        suffix = "".join(
            s
            for s, on in (
                (f" x{time_factor:g} speed", time_factor != 1.0),
                (f" x{rate_factor:g} rate", rate_factor != 1.0),
            )
            if on
        )
        return replace(
            self,
            name=self.name + suffix,
            arrivals_s=arrivals[order],
            prompt_tokens=self.prompt_tokens[idx],
            output_tokens=self.output_tokens[idx],
            duration_s=self.duration_s / time_factor,
            hash_ids=None if self.hash_ids is None else [self.hash_ids[i] for i in idx],
            surges=tuple(
                Surge(x.start_s / time_factor, x.seconds / time_factor, x.factor, x.ramp_s / time_factor)
                for x in self.surges
            ),
        )

    def surged(self, surge: Surge, seed: int = 0) -> Trace:
        """The trace with its own arrival rate multiplied by `surge.factor` over the surge's window (`Surge`).

        Each request inside the window is kept and given copies so that the expected number of arrivals around
        time t is the trace's own times `surge.multiplier(t)`: floor(m) - 1 copies plus one more with probability
        m - floor(m) (a factor under 1 keeps each request with probability m).  A copy arrives a uniform jitter of
        up to one mean inter-arrival gap of the window after its original (never past the window's end), with the
        prompt and output lengths (and Mooncake hash ids) of a request drawn at random from the same window: the
        surge's requests are shaped like the trace's own at that time.  Requests outside the window are untouched.
        Deterministic for a given seed; `surges` records it.
        """
        surge.check(self.duration_s, self.name)
        rng = np.random.default_rng(np.random.SeedSequence([seed, 0x5E, len(self.surges)]))
        end = surge.start_s + surge.seconds
        lo, hi = np.searchsorted(self.arrivals_s, [surge.start_s, end], side="left")
        n = int(hi - lo)
        if n == 0:
            return replace(self, surges=(*self.surges, surge))
        inside = np.arange(lo, hi)
        m = surge.multiplier(self.arrivals_s[inside])
        keep = np.ones(n, dtype=bool) if surge.factor >= 1 else rng.random(n) < m
        extra = np.maximum(m - 1.0, 0.0)
        whole = np.floor(extra).astype(np.int64)
        copies = whole + (rng.random(n) < extra - whole)
        origin = np.repeat(inside, copies)
        gap = surge.seconds / n
        t_copy = np.minimum(self.arrivals_s[origin] + rng.uniform(0.0, gap, len(origin)), np.nextafter(end, 0.0))
        shape = inside[rng.integers(0, n, len(origin))]  # the copy's lengths: a request of the same window
        kept = np.concatenate([np.arange(lo), inside[keep], np.arange(hi, len(self))])
        arrivals = np.concatenate([self.arrivals_s[kept], t_copy])
        idx = np.concatenate([kept, shape])
        order = np.argsort(arrivals, kind="stable")
        idx = idx[order]
        return replace(
            self,
            name=f"{self.name} {surge.describe()}",
            arrivals_s=arrivals[order],
            prompt_tokens=self.prompt_tokens[idx],
            output_tokens=self.output_tokens[idx],
            hash_ids=None if self.hash_ids is None else [self.hash_ids[i] for i in idx],
            surges=(*self.surges, surge),
        )

    def window(self, start_s: float, end_s: float) -> Trace:
        """Requests arriving in [start_s, end_s), re-based so that start_s becomes t = 0."""
        if not end_s > start_s:
            raise ValueError(f"window end {end_s} must be after its start {start_s}")
        lo, hi = np.searchsorted(self.arrivals_s, [start_s, end_s], side="left")
        start_time = None
        if self.start_time is not None:
            start_time = self.start_time + timedelta(seconds=start_s)
        return replace(
            self,
            arrivals_s=self.arrivals_s[lo:hi] - start_s,
            prompt_tokens=self.prompt_tokens[lo:hi],
            output_tokens=self.output_tokens[lo:hi],
            duration_s=max(0.0, min(end_s, self.duration_s) - start_s),
            hash_ids=None if self.hash_ids is None else self.hash_ids[lo:hi],
            start_time=start_time,
            # the surges wholly inside the window, re-based with it
            surges=tuple(
                Surge(x.start_s - start_s, x.seconds, x.factor, x.ramp_s)
                for x in self.surges
                if x.start_s >= start_s and x.end_s <= end_s
            ),
        )
