"""Issue 24 item 7: trace values out of range are refused with their line, and the command line exits 2.

Before, an Azure row with 1e23 context tokens was cast to int64 and wrapped negative (-9223372036854775808), and
`infercast twin run --trace` ran on and exited 0; a Mooncake 1e23 crashed with numpy's OverflowError."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from infercast.simulator.replay.traces import MAX_TOKENS, TraceError, load_trace
from tests.conftest import REPO

ROW = "2023-11-16 18:17:03.9799600,4808,10"
GOOD = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}'


def _file(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("2023-11-16 18:17:05.0000000,1e23,2", r"line 3: ContextTokens is 1e\+23, above the most a request may hold"),
        ("2023-11-16 18:17:05.0000000,12,10000001", r"line 3: GeneratedTokens is 1e\+07, above the most"),
    ],
)
def test_an_azure_token_count_out_of_range_is_refused_with_its_line_not_wrapped_negative(tmp_path, row, message):
    f = _file(tmp_path / "big.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens", ROW, row, ROW])
    with pytest.raises(TraceError, match=r"big\.csv: " + message):
        load_trace(f)
    ok = _file(tmp_path / "ok.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens", ROW, f"{ROW[:-8]},{MAX_TOKENS},2"])
    assert load_trace(ok).prompt_tokens.max() == MAX_TOKENS  # the bound itself is accepted


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"timestamp": 0, "input_length": 1e23, "output_length": 1}', r"line 2: input_length is 1e\+23, above"),
        ('{"timestamp": 1e300, "input_length": 3, "output_length": 1}', r"line 2: timestamp 1e\+300 ms is beyond"),
        (
            '{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [99999999999999999999]}',
            r"line 2: a hash id is outside the 64-bit integers",
        ),
    ],
)
def test_a_mooncake_value_out_of_range_is_refused_with_its_line_not_an_overflow_crash(tmp_path, line, message):
    f = _file(tmp_path / "t.jsonl", [GOOD, line])
    with pytest.raises(TraceError, match=r"t\.jsonl: " + message):
        load_trace(f)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("600,1e12,1.0,Gamma,1.0,1.0", r"line 2: rate 1e\+12 is above the most accepted \(1,000,000 requests/s\)"),
        ("1e300,1.0,1.0,Gamma,1.0,1.0", r"line 2: timestamp 1e\+300 is above the most accepted"),
        ("600,1.0,1.0,Gamma,1e30,1.0", r"line 2: pat_arg1 1e\+30 is above the most accepted"),
    ],
)
def test_a_servegen_value_out_of_range_is_refused_with_its_line(tmp_path, row, message):
    f = _file(tmp_path / "chunk-3-trace.csv", ["0,1.0,1.0,Gamma,1.0,1.0", row])
    with pytest.raises(TraceError, match=r"chunk-3-trace\.csv: " + message):
        load_trace(f)


def test_the_twin_on_a_trace_with_1e23_tokens_exits_2_naming_the_line(tmp_path):
    """What the user sees: `infercast twin run --trace big.csv` stops before running, rc 2, file and line named."""
    f = _file(tmp_path / "big.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens", ROW, "2023-11-16 18:17:05.0,1e23,2"])
    r = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "twin", "run", "--trace", str(f), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=120, cwd=REPO, check=False,
    )  # fmt: skip
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "big.csv: line 3: ContextTokens is 1e+23, above the most a request may hold (10,000,000)" in r.stderr


def test_a_row_holding_a_lone_carriage_return_is_a_trace_error_not_an_index_error(tmp_path):
    """Found by bench/hostile.py: pandas ends a row at a lone CR, the line count did not, and the message's line
    lookup raised IndexError (a traceback) instead of naming the bad row."""
    f = tmp_path / "cr.csv"
    f.write_bytes(b"TIMESTAMP,ContextTokens,GeneratedTokens\n" + ROW.encode() + b"\n" + ROW.encode() + b"\rbad,1,2\n")
    with pytest.raises(TraceError, match=r"cr\.csv: line 4: TIMESTAMP 'bad' is not a time"):
        load_trace(f)
