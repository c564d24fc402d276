"""Reading a trace file: bytes (gzip or not), the format detected from its first line, and the Azure LLM 2023 (CSV) and
Mooncake (JSONL) readers, each value checked against the bounds of `model`."""

from __future__ import annotations

import gzip
import io
import json
import logging
import math
import re
import zlib
from pathlib import Path

import numpy as np
import pandas as pd

from infercast.simulator.replay.traces.model import (
    _CHUNK_RE,
    _INT64,
    AZURE_COLUMNS,
    MAX_TOKENS,
    MAX_TRACE_SECONDS,
    MOONCAKE_KEYS,
    SERVEGEN_COLUMNS,
    Trace,
    TraceError,
)

log = logging.getLogger(__name__)

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
