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
"""

from __future__ import annotations

import gzip
import io
import json
import logging
import math
import re
import zlib
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import pandas as pd

from infercast.config import LengthDistribution

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


# ---------------------------------------------------------------------------------------------------------------
# Reading bytes


def _read_bytes(path: Path) -> bytes:
    """The file's content, gunzipped when it is gzip; TraceError for a missing, unreadable or corrupt file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise TraceError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise TraceError(f"{path}: is a directory, expected a file") from None
    except OSError as e:
        raise TraceError(f"{path}: cannot read: {e.strerror or e}") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise TraceError(f"{path}: corrupt gzip file ({e})") from None
    elif path.suffix == ".gz":
        raise TraceError(f"{path}: named .gz but is not a gzip file")
    return raw


def _text(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise TraceError(f"{path}: not UTF-8 text (byte {e.start})") from None


# ---------------------------------------------------------------------------------------------------------------
# Format detection


def _chunk_files(directory: Path) -> list[Path]:
    return sorted((p for p in directory.iterdir() if _CHUNK_RE.match(p.name)), key=_chunk_id)


def _chunk_id(p: Path) -> int:
    m = _CHUNK_RE.match(p.name)
    return int(m.group(1)) if m else -1


def _servegen_dir(path: Path) -> Path:
    """The one directory under `path` that holds chunk-N-trace.csv(.gz) files."""
    if _chunk_files(path):
        return path
    holders = sorted({p.parent for p in path.rglob("chunk-*-trace.csv*") if _CHUNK_RE.match(p.name)})
    if not holders:
        raise TraceError(f"{path}: no ServeGen chunk-N-trace.csv(.gz) files in this directory or below it")
    if len(holders) > 1:
        names = ", ".join(str(h.relative_to(path)) for h in holders)
        raise TraceError(f"{path}: holds several ServeGen models ({names}); give one of those directories")
    return holders[0]


def detect_format(path: str | Path) -> str:
    """'azure', 'mooncake' or 'servegen', from the content (a directory is ServeGen); TraceError otherwise."""
    p = Path(path)
    if p.is_dir():
        _servegen_dir(p)
        return "servegen"
    if not p.exists():
        raise TraceError(f"{p}: no such file")
    raw = _read_bytes(p)
    first = next((ln.strip() for ln in raw[:65536].splitlines() if ln.strip()), b"")
    if not first:
        raise TraceError(f"{p}: empty file")
    if first.startswith(b"{"):
        return "mooncake"
    if first.split(b",")[0].strip().upper() == b"TIMESTAMP":
        return "azure"
    cells = first.decode("utf-8", "replace").split(",")
    if len(cells) == 6 and re.fullmatch(r"\d+(\.0+)?", cells[0].strip()):
        return "servegen"
    raise TraceError(
        f"{p}: unknown trace format: line 1 is {first[:80].decode('utf-8', 'replace')!r}; expected an Azure CSV "
        f"header {','.join(AZURE_COLUMNS)}, a Mooncake JSON object per line, or ServeGen chunk rows "
        f"({','.join(SERVEGEN_COLUMNS)})"
    )


# ---------------------------------------------------------------------------------------------------------------
# Helpers shared by the parsers


def _check_tokens(path: Path, what: str, values: np.ndarray, line_numbers: np.ndarray) -> np.ndarray:
    bad = ~np.isfinite(values)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceError(f"{path}: line {line_numbers[i]}: {what} is missing or not a number")
    neg = values < 0
    if neg.any():
        i = int(np.flatnonzero(neg)[0])
        raise TraceError(f"{path}: line {line_numbers[i]}: {what} is negative ({values[i]:g})")
    frac = values != np.floor(values)
    if frac.any():
        i = int(np.flatnonzero(frac)[0])
        raise TraceError(f"{path}: line {line_numbers[i]}: {what} is not a whole number ({values[i]:g})")
    big = values > MAX_TOKENS
    if big.any():
        i = int(np.flatnonzero(big)[0])
        raise TraceError(
            f"{path}: line {line_numbers[i]}: {what} is {values[i]:g}, above the most a request may hold "
            f"({MAX_TOKENS:,})"
        )
    return values.astype(np.int64)


def _sort_arrivals(path: Path, t: np.ndarray) -> np.ndarray:
    """Stable order that sorts `t`; out-of-order rows are kept and counted in a warning."""
    back = int(np.count_nonzero(np.diff(t) < 0))
    if back:
        log.warning("%s: %d timestamps out of order; sorted them (no row dropped)", path, back)
        return np.argsort(t, kind="stable")
    return np.arange(len(t))


def _select(arrivals: np.ndarray, start_s: float | None, end_s: float | None) -> tuple[int, int]:
    lo = 0 if start_s is None else int(np.searchsorted(arrivals, start_s, side="left"))
    hi = len(arrivals) if end_s is None else int(np.searchsorted(arrivals, end_s, side="left"))
    return lo, max(lo, hi)


def _check_range(start_s: float | None, end_s: float | None) -> None:
    if start_s is not None and start_s < 0:
        raise ValueError(f"start_s must be >= 0, got {start_s}")
    if start_s is not None and end_s is not None and not end_s > start_s:
        raise ValueError(f"end_s ({end_s}) must be after start_s ({start_s})")


def _cut(path: Path, trace: Trace, start_s: float | None, end_s: float | None) -> Trace:
    if start_s is None and end_s is None:
        return trace
    start = 0.0 if start_s is None else start_s
    if start > trace.duration_s:
        raise TraceError(
            f"{path}: the window [{start_s}, {end_s}) s lies outside the trace's [0, {trace.duration_s:g}] s"
        )
    return trace.window(start, trace.duration_s + 1e-9 if end_s is None else end_s)


# ---------------------------------------------------------------------------------------------------------------
# Azure LLM inference trace 2023


def _load_azure(path: Path, name: str) -> Trace:
    raw = _read_bytes(path)
    if not raw.strip():
        raise TraceError(f"{path}: empty file")
    header = raw.split(b"\n", 1)[0].strip().decode("utf-8", "replace")
    got = tuple(c.strip() for c in header.split(","))
    if got != AZURE_COLUMNS:
        raise TraceError(f"{path}: line 1: wrong header {header!r}, expected {','.join(AZURE_COLUMNS)}")
    try:
        df = pd.read_csv(io.BytesIO(raw), dtype=str, keep_default_na=False, skip_blank_lines=True)
    except pd.errors.ParserError as e:
        raise TraceError(f"{path}: malformed CSV: {' '.join(str(e).split())}") from None
    if df.empty:
        raise TraceError(f"{path}: no rows after the header")
    # pandas drops blank lines; recover the file's line numbers for messages.
    line_numbers = _nonblank_line_numbers(raw)[1 : len(df) + 1]
    if len(line_numbers) < len(df):  # a quoted field over several lines: name rows by their order instead
        line_numbers = np.arange(2, len(df) + 2, dtype=np.int64)
    ts = pd.to_datetime(df["TIMESTAMP"].str.strip(), format="ISO8601", errors="coerce")
    if ts.isna().any():
        i = int(np.flatnonzero(ts.isna().to_numpy())[0])
        raise TraceError(
            f"{path}: line {line_numbers[i]}: TIMESTAMP {df['TIMESTAMP'].iloc[i]!r} is not a time "
            f"like 'YYYY-MM-DD HH:MM:SS.fffffff'"
        )
    ctx = pd.to_numeric(df["ContextTokens"].str.strip(), errors="coerce").to_numpy(dtype=np.float64)
    gen = pd.to_numeric(df["GeneratedTokens"].str.strip(), errors="coerce").to_numpy(dtype=np.float64)
    prompt = _check_tokens(path, "ContextTokens", ctx, line_numbers)
    output = _check_tokens(path, "GeneratedTokens", gen, line_numbers)
    t_ns = ts.to_numpy(dtype="datetime64[ns]").astype(np.int64)
    order = _sort_arrivals(path, t_ns)
    t_ns, prompt, output = t_ns[order], prompt[order], output[order]
    t0 = int(t_ns[0])
    arrivals = (t_ns - t0) / 1e9
    return Trace(
        name=name,
        source="azure",
        arrivals_s=arrivals.astype(np.float64),
        prompt_tokens=prompt,
        output_tokens=output,
        duration_s=float(arrivals[-1]),
        start_time=pd.Timestamp(t0).to_pydatetime(),
    )


def _nonblank_line_numbers(raw: bytes) -> np.ndarray:
    """The numbers of the non-blank lines, counting line ends as pandas' CSV reader does (a lone CR ends a line too:
    split on LF only, a CR in a row made pandas see one row more than this counted, and a message's line lookup
    raised IndexError -- found by bench/hostile.py)."""
    lines = re.split(rb"\r\n|\r|\n", raw)
    return np.array([i + 1 for i, ln in enumerate(lines) if ln.strip()], dtype=np.int64)


# ---------------------------------------------------------------------------------------------------------------
# Mooncake FAST'25 JSONL


def _load_mooncake(path: Path, name: str) -> Trace:
    text = _text(path, _read_bytes(path))
    ts, prompt, output, hashes, lines = [], [], [], [], []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise TraceError(f"{path}: line {lineno}: not valid JSON ({e.msg} at column {e.colno})") from None
        if not isinstance(rec, dict):
            raise TraceError(f"{path}: line {lineno}: expected a JSON object, got {type(rec).__name__}")
        missing = [k for k in MOONCAKE_KEYS if k not in rec]
        if missing:
            raise TraceError(f"{path}: line {lineno}: missing key(s) {', '.join(missing)}")
        for k in MOONCAKE_KEYS:
            v = rec[k]
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v):
                raise TraceError(f"{path}: line {lineno}: {k} must be a number, got {v!r}")
            if v < 0:
                raise TraceError(f"{path}: line {lineno}: {k} is negative ({v})")
        if rec["timestamp"] > MAX_TRACE_SECONDS * 1000:
            raise TraceError(
                f"{path}: line {lineno}: timestamp {rec['timestamp']:g} ms is beyond {MAX_TRACE_SECONDS:,} s (10 years)"
            )
        for k in ("input_length", "output_length"):
            if rec[k] != int(rec[k]):
                raise TraceError(f"{path}: line {lineno}: {k} is not a whole number ({rec[k]})")
            if rec[k] > MAX_TOKENS:
                raise TraceError(
                    f"{path}: line {lineno}: {k} is {rec[k]:g}, above the most a request may hold ({MAX_TOKENS:,})"
                )
        h = rec.get("hash_ids", [])
        if not isinstance(h, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in h):
            raise TraceError(f"{path}: line {lineno}: hash_ids must be a list of integers")
        if any(not -_INT64 <= x < _INT64 for x in h):
            raise TraceError(f"{path}: line {lineno}: a hash id is outside the 64-bit integers")
        ts.append(rec["timestamp"])
        prompt.append(int(rec["input_length"]))
        output.append(int(rec["output_length"]))
        hashes.append(np.asarray(h, dtype=np.int64))
        lines.append(lineno)
    if not ts:
        raise TraceError(f"{path}: empty file (no JSON lines)")
    t = np.asarray(ts, dtype=np.float64) / 1000.0
    order = _sort_arrivals(path, t)
    return Trace(
        name=name,
        source="mooncake",
        arrivals_s=t[order],
        prompt_tokens=np.asarray(prompt, dtype=np.int64)[order],
        output_tokens=np.asarray(output, dtype=np.int64)[order],
        duration_s=float(t.max()),
        hash_ids=[hashes[i] for i in order],
    )


# ---------------------------------------------------------------------------------------------------------------
# ServeGen per-client rate windows


@dataclass(frozen=True)
class _ServeGenTable:
    """All clients' windows, one row per (client, window)."""

    directory: Path
    name: str
    client: np.ndarray  # int64 client (chunk) id
    start: np.ndarray  # float64 window start, s
    width: np.ndarray  # float64 window width, s
    rate: np.ndarray  # float64 requests/s
    pattern: np.ndarray  # object: "", "Gamma", "Weibull"
    shape: np.ndarray  # float64 pat_arg1 (shape); pat_arg2 (scale) cancels out, see _servegen_arrivals


def _parse_servegen_slow(path: Path, raw: bytes) -> pd.DataFrame:
    """Column by column, so that the first bad value is reported with its line."""
    try:
        df = pd.read_csv(io.BytesIO(raw), header=None, names=list(SERVEGEN_COLUMNS), dtype=str, keep_default_na=False)
    except pd.errors.ParserError as e:
        raise TraceError(f"{path}: malformed CSV: {' '.join(str(e).split())}") from None
    lines = _nonblank_line_numbers(raw)[: len(df)]
    if len(lines) < len(df):  # a quoted field over several lines: name rows by their order instead
        lines = np.arange(1, len(df) + 1, dtype=np.int64)
    if df["timestamp"].iloc[0].strip().lower() == "timestamp":
        raise TraceError(f"{path}: line 1: ServeGen chunk files have no header; got {','.join(df.iloc[0])!r}")
    out = pd.DataFrame({"pattern": df["pat_name"].str.strip()})
    for col in ("timestamp", "rate", "cv", "pat_arg1", "pat_arg2"):
        vals = pd.to_numeric(df[col].str.strip(), errors="coerce").to_numpy(dtype=np.float64)
        bad = ~np.isfinite(vals)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise TraceError(f"{path}: line {lines[i]}: {col} {df[col].iloc[i]!r} is missing or not a number")
        out[col] = vals
    return out


def _read_servegen_chunk(path: Path) -> pd.DataFrame:
    raw = _read_bytes(path)
    if not raw.strip():
        raise TraceError(f"{path}: empty file")
    numeric = ("timestamp", "rate", "cv", "pat_arg1", "pat_arg2")
    try:
        # Fast path: the C parser reads the numbers directly; any oddity falls through to the line-by-line checks.
        fast = pd.read_csv(
            io.BytesIO(raw),
            header=None,
            names=list(SERVEGEN_COLUMNS),
            dtype={c: np.float64 for c in numeric} | {"pat_name": str},
            keep_default_na=False,
            na_values={c: [""] for c in numeric},
        )
        if np.isfinite(fast[list(numeric)].to_numpy()).all():
            out = fast.rename(columns={"pat_name": "pattern"})
            out["pattern"] = out["pattern"].str.strip()
        else:
            out = None
    except (ValueError, pd.errors.ParserError):
        out = None
    if out is None:
        out = _parse_servegen_slow(path, raw)

    def line(i: int) -> int:  # only computed for a message
        numbers = _nonblank_line_numbers(raw)
        return int(numbers[i]) if i < len(numbers) else i + 1

    for col in ("timestamp", "rate", "cv"):
        neg = out[col].to_numpy() < 0
        if neg.any():
            i = int(np.flatnonzero(neg)[0])
            raise TraceError(f"{path}: line {line(i)}: {col} is negative ({out[col].iloc[i]:g})")
    for col, most, unit in (
        ("timestamp", MAX_TRACE_SECONDS, " s (10 years)"),
        ("rate", MAX_SERVEGEN_RATE, " requests/s"),
        ("cv", MAX_SERVEGEN_SHAPE, ""),
        ("pat_arg1", MAX_SERVEGEN_SHAPE, ""),
        ("pat_arg2", MAX_SERVEGEN_SHAPE, ""),
    ):
        big = np.abs(out[col].to_numpy()) > most
        if big.any():
            i = int(np.flatnonzero(big)[0])
            raise TraceError(
                f"{path}: line {line(i)}: {col} {out[col].iloc[i]:g} is above the most accepted ({most:,.0f}{unit})"
            )
    unknown = ~out["pattern"].isin(SERVEGEN_PATTERNS).to_numpy()
    if unknown.any():
        i = int(np.flatnonzero(unknown)[0])
        raise TraceError(
            f"{path}: line {line(i)}: unknown arrival pattern {out['pattern'].iloc[i]!r} (expected Gamma, "
            f"Weibull or empty)"
        )
    needs_shape = (out["pattern"].to_numpy() != "") & (out["rate"].to_numpy() > 0)
    bad_shape = needs_shape & (out["pat_arg1"].to_numpy() <= 0)
    if bad_shape.any():
        i = int(np.flatnonzero(bad_shape)[0])
        raise TraceError(f"{path}: line {line(i)}: {out['pattern'].iloc[i]} shape (pat_arg1) must be > 0")
    t = out["timestamp"].to_numpy()
    if np.any(np.diff(t) <= 0):
        i = int(np.flatnonzero(np.diff(t) <= 0)[0]) + 1
        raise TraceError(f"{path}: line {line(i)}: timestamp {t[i]:g} is not after the previous window's {t[i - 1]:g}")
    return out


def _load_servegen_table(path: Path) -> _ServeGenTable:
    if path.is_dir():
        directory = _servegen_dir(path)
        files = _chunk_files(directory)
        name = f"servegen-{directory.parent.name}-{directory.name}" if directory.parent.name else "servegen"
    else:
        directory, files = path.parent, [path]
        name = f"servegen-{path.parent.name}-chunk-{_chunk_id(path)}"
    parts = []
    for f in files:
        df = _read_servegen_chunk(f)
        t = df["timestamp"].to_numpy()
        steps = np.diff(t)
        step = float(np.median(steps)) if len(steps) else SERVEGEN_WINDOW_S
        width = np.append(steps, step)
        parts.append((_chunk_id(f), t, width, df))
    client = np.concatenate([np.full(len(t), cid, dtype=np.int64) for cid, t, _, _ in parts])
    return _ServeGenTable(
        directory=directory,
        name=name,
        client=client,
        start=np.concatenate([t for _, t, _, _ in parts]),
        width=np.concatenate([w for _, _, w, _ in parts]),
        rate=np.concatenate([d["rate"].to_numpy() for *_, d in parts]),
        pattern=np.concatenate([d["pattern"].to_numpy(dtype=object) for *_, d in parts]),
        shape=np.concatenate([d["pat_arg1"].to_numpy() for *_, d in parts]),
    )


def _aggregate(table: _ServeGenTable) -> tuple[np.ndarray, np.ndarray]:
    """Window starts and the summed rate; NaN where every client is 0 (a data gap, per the ServeGen README)."""
    starts, inverse = np.unique(table.start, return_inverse=True)
    total = np.bincount(inverse, weights=table.rate, minlength=len(starts))
    active = np.bincount(inverse, weights=(table.rate > 0).astype(np.float64), minlength=len(starts))
    return starts, np.where(active > 0, total, np.nan)


def servegen_rates(
    path: str | Path, start_s: float | None = None, end_s: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Aggregate request rate (sum over clients) per ServeGen window, without generating arrivals.

    Returns (window start in seconds from local midnight of day 0, requests/s); windows where every client is 0 are
    data gaps and read NaN.  `start_s`/`end_s` keep the windows that start in [start_s, end_s).
    """
    _check_range(start_s, end_s)
    table = _load_servegen_table(Path(path))
    starts, rates = _aggregate(table)
    keep = np.ones(len(starts), dtype=bool)
    if start_s is not None:
        keep &= starts >= start_s
    if end_s is not None:
        keep &= starts < end_s
    return starts[keep].astype(np.float64), rates[keep]


def _servegen_arrivals(table: _ServeGenTable, start_s: float, end_s: float, rng: np.random.Generator) -> np.ndarray:
    """Arrival times (absolute, s) in [start_s, end_s) generated from the per-client windows.

    Per (client, window) of rate r and width W: the request count is r*W rounded stochastically (floor plus a
    Bernoulli on the fraction, so the expectation is exactly r*W).  As in upstream ServeGen's `construct._sample_iats`,
    n+1 inter-arrival gaps are drawn from the fitted distribution (Gamma(a=pat_arg1, scale=pat_arg2) or
    Weibull(c=pat_arg1, scale=pat_arg2)) and rescaled to sum to W, which makes pat_arg2 (the scale) cancel; the n
    arrivals are the first n partial sums.  Windows without a pattern but with r > 0 use exponential gaps (Poisson);
    upstream treats an empty pattern as an idle client, and in the published data every empty-pattern row has r = 0.
    """
    overlap = (table.start < end_s) & (table.start + table.width > start_s) & (table.rate > 0)
    rows = np.flatnonzero(overlap)
    # A window cut by start_s/end_s is generated over its covered part only, with the count scaled to match.
    lo = np.maximum(table.start[rows], start_s)
    width = np.minimum(table.start[rows] + table.width[rows], end_s) - lo
    expected = table.rate[rows] * width
    n = np.floor(expected).astype(np.int64)
    n += rng.random(len(rows)) < (expected - n)
    has = n > 0
    rows, n, lo, width = rows[has], n[has], lo[has], width[has]
    if not len(rows):
        return np.empty(0)
    gaps_per_row = n + 1
    seg = np.repeat(np.arange(len(rows)), gaps_per_row)
    pattern = table.pattern[rows][seg]
    shape = table.shape[rows][seg]
    gaps = np.empty(len(seg))
    is_gamma = pattern == "Gamma"
    is_weibull = pattern == "Weibull"
    is_poisson = ~(is_gamma | is_weibull)
    gaps[is_gamma] = rng.gamma(shape[is_gamma])
    gaps[is_weibull] = rng.weibull(shape[is_weibull])
    gaps[is_poisson] = rng.exponential(size=int(is_poisson.sum()))
    del pattern, shape, is_gamma, is_weibull, is_poisson
    starts = np.concatenate(([0], np.cumsum(gaps_per_row)[:-1]))
    totals = np.add.reduceat(gaps, starts)
    # A tiny Gamma shape can underflow every gap of a segment to 0: fall back to evenly spaced arrivals there.
    degenerate = ~(totals > 0) | ~np.isfinite(totals)
    if degenerate.any():
        gaps[np.repeat(degenerate, gaps_per_row)] = 1.0
        totals = np.add.reduceat(gaps, starts)
    # Normalise each segment to sum to 1 before the running sum, so that segment k's partial sums lie in (k, k+1].
    gaps /= totals[seg]
    within = np.cumsum(gaps) - seg
    keep = np.ones(len(seg), dtype=bool)
    keep[starts + gaps_per_row - 1] = False  # the (n+1)-th partial sum is the window's end
    seg, within = seg[keep], np.clip(within[keep], 0.0, 1.0)
    t = lo[seg] + within * width[seg]
    return np.sort(t[(t >= start_s) & (t < end_s)])


def _load_servegen(
    path: Path,
    lengths: LengthDistribution,
    long_share: float,
    seed: int,
    start_s: float | None,
    end_s: float | None,
) -> Trace:
    if not 0.0 <= long_share <= 1.0:
        raise ValueError(f"long_share must be within [0, 1], got {long_share}")
    table = _load_servegen_table(path)
    first = float(table.start.min())
    last = float((table.start + table.width).max())
    start = first if start_s is None else max(first, float(start_s))
    end = last if end_s is None else min(last, float(end_s))
    if not end > start:
        raise TraceError(f"{path}: the window [{start_s}, {end_s}) s lies outside the trace's [{first:g}, {last:g}) s")
    overlap = (table.start < end) & (table.start + table.width > start)
    covered = np.minimum(table.start + table.width, end) - np.maximum(table.start, start)
    expected = float(np.sum(table.rate[overlap] * covered[overlap]))
    if expected > MAX_GENERATED_ARRIVALS:
        raise TraceError(
            f"{path}: [{start:g}, {end:g}) s would generate about {expected:,.0f} arrivals, more than the "
            f"{MAX_GENERATED_ARRIVALS:,} allowed at once; pass a shorter start_s/end_s window (e.g. "
            f"{MAX_GENERATED_ARRIVALS / max(expected / (end - start), 1e-9):,.0f} s), or use servegen_rates() for rates"
        )
    starts, rates = _aggregate(table)
    gaps = int(np.count_nonzero(np.isnan(rates) & (starts < end) & (starts + SERVEGEN_WINDOW_S > start)))
    if gaps:
        log.warning(
            "%s: %d window(s) in [%g, %g) s have every client at 0 (data gaps, not troughs)", path, gaps, start, end
        )
    rng = np.random.default_rng(seed)
    arrivals = _servegen_arrivals(table, start, end, rng) - start
    # ServeGen's rate windows carry no lengths: drawn as the twin's scenarios draw theirs (imported here, so that
    # loading an Azure or Mooncake trace does not load the twin)
    from infercast.simulator.twin.traffic import sample_lengths

    prompt, output = sample_lengths(len(arrivals), long_share, lengths, rng)
    return Trace(
        name=table.name,
        source="servegen",
        arrivals_s=arrivals,
        prompt_tokens=prompt,
        output_tokens=output,
        duration_s=end - start,
    )


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


if __name__ == "__main__":
    raise SystemExit(main())
