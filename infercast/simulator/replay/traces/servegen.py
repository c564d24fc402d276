"""ServeGen: per-client request rates per 600 s window and a fitted inter-arrival law, from which arrivals are
generated (`_servegen_arrivals`) and token counts drawn from a `LengthDistribution`."""

from __future__ import annotations

import io
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from infercast.config import LengthDistribution
from infercast.simulator.replay.traces.files import (
    _check_range,
    _chunk_files,
    _chunk_id,
    _nonblank_line_numbers,
    _read_bytes,
    _servegen_dir,
)
from infercast.simulator.replay.traces.model import (
    MAX_GENERATED_ARRIVALS,
    MAX_SERVEGEN_RATE,
    MAX_SERVEGEN_SHAPE,
    MAX_TRACE_SECONDS,
    SERVEGEN_COLUMNS,
    SERVEGEN_PATTERNS,
    SERVEGEN_WINDOW_S,
    Trace,
    TraceError,
)

log = logging.getLogger(__name__)

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
