"""Trace loading: the slices in tests/data/traces/ (see ATTRIBUTION.md), scaling, series, and every bad input."""

from __future__ import annotations

import gzip
import json
import logging
import math
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from infercast.config import LengthDistribution
from infercast.simulator.replay.traces import (
    MAX_GENERATED_ARRIVALS,
    Trace,
    TraceError,
    detect_format,
    load_trace,
    long_share_series,
    rate_series,
    servegen_rates,
)
from infercast.simulator.twin.traffic import sample_lengths

DATA = Path(__file__).resolve().parent / "data" / "traces"
AZURE_CODE = DATA / "azure" / "AzureLLMInferenceTrace_code.csv"
AZURE_CONV = DATA / "azure" / "AzureLLMInferenceTrace_conv.csv"
MOONCAKE = DATA / "mooncake" / "conversation_trace.jsonl"
SG_LANGUAGE = DATA / "servegen" / "language" / "m-large"
SG_REASON_CHUNK = DATA / "servegen" / "reason" / "deepseek-r1" / "chunk-15-trace.csv.gz"


@pytest.fixture(scope="module")
def code() -> Trace:
    return load_trace(AZURE_CODE)


@pytest.fixture(scope="module")
def mooncake() -> Trace:
    return load_trace(MOONCAKE)


@pytest.fixture(scope="module")
def language() -> Trace:
    return load_trace(SG_LANGUAGE, seed=7)


def _chunk(path: Path, rows: list[str]) -> Path:
    path.write_text("\n".join(rows) + "\n")
    return path


# --- format detection -------------------------------------------------------------------------------------------


def test_detect_format_of_each_slice(tmp_path):
    assert detect_format(AZURE_CODE) == "azure"
    assert detect_format(AZURE_CONV) == "azure"
    assert detect_format(MOONCAKE) == "mooncake"
    assert detect_format(SG_LANGUAGE) == "servegen"
    assert detect_format(SG_REASON_CHUNK) == "servegen"
    # A ServeGen root with one model below it is found by walking down.
    assert detect_format(DATA / "servegen" / "reason") == "servegen"


def test_detect_format_refuses_unknown_content(tmp_path):
    f = tmp_path / "notes.csv"
    f.write_text("name,age\nbob,3\n")
    with pytest.raises(TraceError, match=r"notes\.csv: unknown trace format: line 1 is 'name,age'"):
        detect_format(f)


def test_servegen_root_with_several_models_asks_for_one():
    with pytest.raises(TraceError, match=r"holds several ServeGen models \(language/m-large, reason/deepseek-r1\)"):
        load_trace(DATA / "servegen")


# --- exact contents of the slices -------------------------------------------------------------------------------


def test_azure_code_slice(code):
    assert (code.name, code.source, len(code)) == ("azure-code", "azure", 1482)
    assert code.start_time == datetime(2023, 11, 16, 18, 17, 3, 979960)
    assert code.arrivals_s[0] == 0.0
    # 18:26:49.8832540 - 18:17:03.9799600
    assert code.arrivals_s[-1] == pytest.approx(585.903294, abs=1e-6)
    assert code.duration_s == pytest.approx(585.903294, abs=1e-6)
    assert (code.prompt_tokens[0], code.output_tokens[0]) == (4808, 10)
    assert (code.prompt_tokens[-1], code.output_tokens[-1]) == (392, 82)
    assert code.arrivals_s.dtype == np.float64 and code.prompt_tokens.dtype == np.int64
    assert np.all(np.diff(code.arrivals_s) >= 0)
    assert code.hash_ids is None


def test_azure_conv_slice():
    conv = load_trace(AZURE_CONV)
    assert (conv.name, len(conv)) == ("azure-conv", 2867)
    assert conv.start_time == datetime(2023, 11, 16, 18, 15, 46, 680590)
    assert conv.arrivals_s[-1] == pytest.approx(599.971336, abs=1e-6)
    assert (conv.prompt_tokens[0], conv.output_tokens[0]) == (374, 44)
    assert (conv.prompt_tokens[-1], conv.output_tokens[-1]) == (1143, 396)


def test_mooncake_slice(mooncake):
    assert (mooncake.name, mooncake.source, len(mooncake)) == ("mooncake", "mooncake", 918)
    assert mooncake.start_time is None
    assert mooncake.arrivals_s[0] == 0.0 and mooncake.arrivals_s[-1] == 297.0
    assert (mooncake.prompt_tokens[0], mooncake.output_tokens[0]) == (6758, 500)
    assert (mooncake.prompt_tokens[-1], mooncake.output_tokens[-1]) == (1043, 508)
    assert mooncake.hash_ids[0].tolist() == list(range(14))
    assert mooncake.hash_ids[-1].tolist() == [0, 19716, 19717]
    # Each request references ceil(input/512) prefix blocks.
    assert [len(h) for h in mooncake.hash_ids] == [math.ceil(p / 512) for p in mooncake.prompt_tokens]
    # The long contexts: about half of this slice's prompts exceed 8k tokens.
    assert np.mean(mooncake.prompt_tokens > 8192) == pytest.approx(466 / 918)


def test_start_and_end_pick_a_window_rebased_to_zero(code):
    w = load_trace(AZURE_CODE, start_s=180.0, end_s=240.0)
    expected = code.arrivals_s[(code.arrivals_s >= 180) & (code.arrivals_s < 240)]
    assert len(w) == len(expected) == 531  # the code trace's on/off bursts: minutes 2 and 3 are silent, then 531
    np.testing.assert_allclose(w.arrivals_s, expected - 180.0)
    assert w.duration_s == 60.0
    assert w.start_time == datetime(2023, 11, 16, 18, 20, 3, 979960)


# --- ServeGen ---------------------------------------------------------------------------------------------------


def test_servegen_rates_sum_clients_and_mask_gaps():
    starts, rates = servegen_rates(SG_LANGUAGE)
    assert len(starts) == 288 and starts[0] == 0.0 and starts[-1] == 172_200.0
    # Window 0: chunk-55 0.108333 + chunk-80 0 + chunk-157 0.115 requests/s.
    assert rates[0] == pytest.approx(0.10833333333333334 + 0.115)
    # Windows where every client is 0 are data gaps, not troughs.
    assert np.isnan(rates).sum() == 8
    assert np.nansum(rates) * 600 == pytest.approx(38_445.0)
    s2, r2 = servegen_rates(SG_LANGUAGE, start_s=86_400, end_s=90_000)
    assert s2.tolist() == [86_400.0 + 600 * i for i in range(6)]
    np.testing.assert_array_equal(r2, rates[144:150])


def test_servegen_generated_rate_matches_each_window(language):
    """Per window, the generated count is rate x 600 s up to one request per active client (stochastic rounding)."""
    assert (language.name, language.source) == ("servegen-language-m-large", "servegen")
    assert language.duration_s == 172_800.0
    starts, rates = servegen_rates(SG_LANGUAGE)
    bins, generated = rate_series(language, 600.0)
    np.testing.assert_array_equal(bins, starts)
    expected = np.nan_to_num(rates) * 600
    assert np.max(np.abs(generated * 600 - expected)) <= 3.0
    assert abs(len(language) - 38_445) < 100
    assert np.all(generated[np.isnan(rates)] == 0)


def test_servegen_inter_arrivals_follow_the_fitted_distribution(tmp_path):
    """Gamma(a) gaps have CV 1/sqrt(a); Weibull(k=0.5) gaps CV sqrt(5); an empty pattern with a rate is Poisson."""
    cases = {"Gamma,0.1,7.0": 1 / math.sqrt(0.1), "Weibull,0.5,3.0": math.sqrt(5.0), ",0,0": 1.0}
    for i, (pat, cv) in enumerate(cases.items()):
        f = _chunk(tmp_path / f"chunk-{i}-trace.csv", [f"{600 * w},5.0,{cv},{pat}" for w in range(10)])
        t = load_trace(f, seed=1)
        assert len(t) == 30_000  # 5 requests/s x 600 s x 10 windows, exactly (no fractional part)
        gaps = np.diff(t.arrivals_s)
        assert np.std(gaps) / np.mean(gaps) == pytest.approx(cv, rel=0.15), pat


def test_servegen_is_deterministic_under_the_seed():
    a = load_trace(SG_REASON_CHUNK, seed=3)
    b = load_trace(SG_REASON_CHUNK, seed=3)
    c = load_trace(SG_REASON_CHUNK, seed=4)
    np.testing.assert_array_equal(a.arrivals_s, b.arrivals_s)
    np.testing.assert_array_equal(a.prompt_tokens, b.prompt_tokens)
    assert len(a) != len(c) or not np.array_equal(a.arrivals_s, c.arrivals_s)
    assert a.name == "servegen-deepseek-r1-chunk-15"
    assert abs(len(a) - 33_072) < 60


def test_servegen_lengths_follow_the_long_share(language):
    assert np.mean(language.prompt_tokens > 8192) == pytest.approx(0.15, abs=0.01)
    surge = load_trace(SG_LANGUAGE, seed=7, long_share=0.63, end_s=43_200)
    assert np.mean(surge.prompt_tokens > 8192) == pytest.approx(0.63, abs=0.015)
    assert surge.prompt_tokens.max() <= 32_768 and surge.prompt_tokens.min() >= 1
    assert surge.output_tokens.max() <= 2048 and surge.output_tokens.min() >= 1


def test_sample_lengths_medians():
    """The one sampler of generated lengths (the twin's scenarios and ServeGen replays)."""
    rng = np.random.default_rng(0)
    ld = LengthDistribution()
    prompt, output = sample_lengths(20_000, 0.0, ld, rng)
    assert np.median(prompt) == pytest.approx(ld.short_median_tokens, rel=0.03)
    assert np.median(output) == pytest.approx(ld.output_median_tokens, rel=0.03)
    assert prompt.max() <= 8192 and output.max() <= ld.request_max_tokens
    prompt, _ = sample_lengths(20_000, 1.0, ld, rng)
    assert np.median(prompt) == pytest.approx(ld.long_median_tokens, rel=0.03) and prompt.min() > 8192


def test_a_long_share_outside_0_1_is_refused():
    with pytest.raises(ValueError, match=r"long_share must be within \[0, 1\], got 1.5"):
        load_trace(SG_LANGUAGE, long_share=1.5, end_s=600)


def test_servegen_window_selection_counts():
    t = load_trace(SG_LANGUAGE, start_s=3_600, end_s=7_200, seed=0)
    _, rates = servegen_rates(SG_LANGUAGE, start_s=3_600, end_s=7_200)
    assert t.duration_s == 3_600.0 and t.arrivals_s.min() >= 0 and t.arrivals_s.max() < 3_600
    assert abs(len(t) - np.nansum(rates) * 600) <= 3 * 6


# --- scaling and windows -----------------------------------------------------------------------------------------


def test_time_factor_replays_faster(code):
    fast = code.scaled(time_factor=2.0)
    assert len(fast) == len(code)
    np.testing.assert_allclose(fast.arrivals_s, code.arrivals_s / 2)
    assert fast.duration_s == pytest.approx(code.duration_s / 2)
    np.testing.assert_array_equal(fast.prompt_tokens, code.prompt_tokens)


def test_rate_factor_replicates_and_thins(code, mooncake):
    triple = code.scaled(rate_factor=3.0, seed=1)
    assert len(triple) == 3 * len(code)
    assert triple.arrivals_s.min() >= 0 and triple.arrivals_s.max() <= code.duration_s
    assert np.all(np.diff(triple.arrivals_s) >= 0)
    assert triple.duration_s == code.duration_s
    # Copies keep their original's tokens, so the token multiset is tripled.
    assert sorted(triple.prompt_tokens.tolist()) == sorted(code.prompt_tokens.tolist() * 3)
    half = code.scaled(rate_factor=0.5, seed=1)
    assert abs(len(half) - len(code) / 2) < 4 * math.sqrt(len(code) * 0.25)
    assert set(half.arrivals_s.tolist()) <= set(code.arrivals_s.tolist())
    frac = mooncake.scaled(rate_factor=2.5, seed=2)
    assert abs(len(frac) - 2.5 * len(mooncake)) < 4 * math.sqrt(len(mooncake) * 0.25)
    # Hash ids travel with their requests.
    assert [len(h) for h in frac.hash_ids] == [math.ceil(p / 512) for p in frac.prompt_tokens]


def test_scaling_is_deterministic_under_the_seed(code):
    a, b = code.scaled(rate_factor=1.7, seed=5), code.scaled(rate_factor=1.7, seed=5)
    np.testing.assert_array_equal(a.arrivals_s, b.arrivals_s)
    c = code.scaled(rate_factor=1.7, seed=6)
    assert not np.array_equal(a.arrivals_s[: min(len(a), len(c))], c.arrivals_s[: min(len(a), len(c))])


def test_scaled_refuses_bad_factors(code):
    with pytest.raises(ValueError, match="time_factor must be a positive number, got 0"):
        code.scaled(time_factor=0)
    with pytest.raises(ValueError, match="rate_factor must be a positive number, got -1"):
        code.scaled(rate_factor=-1)


def test_window_rebases(mooncake):
    w = mooncake.window(30.0, 60.0)
    inside = (mooncake.arrivals_s >= 30) & (mooncake.arrivals_s < 60)
    assert len(w) == inside.sum() > 0
    assert w.arrivals_s.min() == 0.0 and w.duration_s == 30.0
    assert w.hash_ids[0].tolist() == mooncake.hash_ids[int(np.flatnonzero(inside)[0])].tolist()
    with pytest.raises(ValueError, match="window end 10 must be after its start 20"):
        mooncake.window(20, 10)


# --- series -----------------------------------------------------------------------------------------------------


def test_rate_series_counts_complete_bins(code):
    starts, rps = rate_series(code, 60.0)
    assert len(starts) == 9  # 585.9 s: nine complete minutes, the partial tenth left out
    counts, _ = np.histogram(code.arrivals_s, bins=np.arange(10) * 60.0)
    np.testing.assert_allclose(rps * 60, counts)
    assert (rps * 60).tolist() == [63, 0, 0, 531, 187, 130, 15, 42, 38]


def test_long_share_series_is_nan_for_empty_bins(mooncake):
    _, share = long_share_series(mooncake, 1.0)
    # Mooncake arrivals come in ~3 s batches, so most 1 s bins are empty.
    assert np.isnan(share).sum() > len(share) / 2
    at0 = mooncake.prompt_tokens[mooncake.arrivals_s < 1.0]
    assert share[0] == pytest.approx(np.mean(at0 > 8192))
    _, share60 = long_share_series(mooncake, 60.0)
    assert not np.isnan(share60).any() and 0.3 < np.mean(share60) < 0.7


# --- bad input ---------------------------------------------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(TraceError, match=r"nothing\.csv: no such file"):
        load_trace(tmp_path / "nothing.csv")


def test_empty_file(tmp_path):
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(TraceError, match=r"empty\.csv: empty file"):
        load_trace(tmp_path / "empty.csv")


def test_header_only(tmp_path):
    f = _chunk(tmp_path / "h.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens"])
    with pytest.raises(TraceError, match=r"h\.csv: no rows after the header"):
        load_trace(f)


def test_wrong_header(tmp_path):
    f = _chunk(tmp_path / "w.csv", ["TIMESTAMP,Context,Generated", "2023-11-16 18:17:03.9799600,1,2"])
    with pytest.raises(
        TraceError, match=r"w\.csv: line 1: wrong header 'TIMESTAMP,Context,Generated', expected TIMESTAMP,Context"
    ):
        load_trace(f)


ROW = "2023-11-16 18:17:03.9799600,4808,10"


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (
            "2023-11-16 18:17:0x,1,2",
            r"line 3: TIMESTAMP '2023-11-16 18:17:0x' is not a time like 'YYYY-MM-DD HH:MM:SS.fffffff'",
        ),
        ("2023-11-16 18:17:05.0000000,-5,2", r"line 3: ContextTokens is negative \(-5\)"),
        ("2023-11-16 18:17:05.0000000,12,NaN", r"line 3: GeneratedTokens is missing or not a number"),
        ("2023-11-16 18:17:05.0000000,12", r"line 3: GeneratedTokens is missing or not a number"),
        ("2023-11-16 18:17:05.0000000,12.5,3", r"line 3: ContextTokens is not a whole number \(12.5\)"),
        ("2023-11-16 18:17:05.0000000,1,2,3", r"malformed CSV: .*Expected 3 fields in line 3, saw 4"),
    ],
)
def test_malformed_azure_row_names_the_line(tmp_path, bad, message):
    f = _chunk(tmp_path / "bad.csv", ["TIMESTAMP,ContextTokens,GeneratedTokens", ROW, bad, ROW])
    with pytest.raises(TraceError, match=r"bad\.csv: " + message):
        load_trace(f)


def test_out_of_order_rows_are_sorted_and_counted(tmp_path, caplog):
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    rows += ["2023-11-16 18:00:10.0000000,10,1", "2023-11-16 18:00:00.0000000,20,2", "2023-11-16 18:00:05.0000000,30,3"]
    f = _chunk(tmp_path / "shuffled.csv", rows)
    with caplog.at_level(logging.WARNING, logger="infercast.simulator.replay.traces"):
        t = load_trace(f)
    assert "shuffled.csv: 1 timestamps out of order; sorted them (no row dropped)" in caplog.text
    assert t.arrivals_s.tolist() == [0.0, 5.0, 10.0]
    assert t.prompt_tokens.tolist() == [20, 30, 10]
    assert t.start_time == datetime(2023, 11, 16, 18, 0, 0)


def test_corrupt_gzip(tmp_path):
    good = gzip.compress(b"0,1.0,1.0,Gamma,1.0,1.0\n600,1.0,1.0,Gamma,1.0,1.0\n" * 50)
    f = tmp_path / "chunk-1-trace.csv.gz"
    f.write_bytes(good[: len(good) // 2])
    with pytest.raises(TraceError, match=r"chunk-1-trace\.csv\.gz: corrupt gzip file"):
        load_trace(tmp_path)


def test_not_gzip_named_gz(tmp_path):
    f = tmp_path / "chunk-1-trace.csv.gz"
    f.write_text("0,1.0,1.0,Gamma,1.0,1.0\n")
    with pytest.raises(TraceError, match=r"chunk-1-trace\.csv\.gz: named \.gz but is not a gzip file"):
        load_trace(f)


def test_empty_servegen_dir(tmp_path):
    with pytest.raises(TraceError, match=r"no ServeGen chunk-N-trace\.csv\(\.gz\) files in this directory or below"):
        load_trace(tmp_path)


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("600,-1,1.0,Gamma,1.0,1.0", r"line 2: rate is negative \(-1\)"),
        ("600,nan,1.0,Gamma,1.0,1.0", r"line 2: rate 'nan' is missing or not a number"),
        (
            "600,1.0,1.0,Pareto,1.0,1.0",
            r"line 2: unknown arrival pattern 'Pareto' \(expected Gamma, Weibull or empty\)",
        ),
        ("600,1.0,1.0,Gamma,0,1.0", r"line 2: Gamma shape \(pat_arg1\) must be > 0"),
        ("0,1.0,1.0,Gamma,1.0,1.0", r"line 2: timestamp 0 is not after the previous window's 0"),
    ],
)
def test_malformed_servegen_row_names_the_line(tmp_path, row, message):
    f = _chunk(tmp_path / "chunk-3-trace.csv", ["0,1.0,1.0,Gamma,1.0,1.0", row])
    with pytest.raises(TraceError, match=r"chunk-3-trace\.csv: " + message):
        load_trace(f)


def test_servegen_refuses_too_many_arrivals(tmp_path):
    f = _chunk(tmp_path / "chunk-0-trace.csv", [f"{600 * w},50000,1.0,Gamma,1.0,1.0" for w in range(1000)])
    with pytest.raises(TraceError, match=r"would generate about 30,000,000,000 arrivals, more than the 20,000,000"):
        load_trace(f)
    # A window small enough is fine; servegen_rates never generates.
    assert len(load_trace(f, end_s=1.0)) == 50_000
    assert servegen_rates(f)[1][0] == 50_000
    assert MAX_GENERATED_ARRIVALS == 20_000_000


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ('{"timestamp": 0, "input_length": 10', r"line 2: not valid JSON"),
        ('{"timestamp": 0, "output_length": 10}', r"line 2: missing key\(s\) input_length"),
        ('{"timestamp": 0, "input_length": -3, "output_length": 1}', r"line 2: input_length is negative \(-3\)"),
        ('{"timestamp": "x", "input_length": 3, "output_length": 1}', r"line 2: timestamp must be a number, got 'x'"),
        (
            '{"timestamp": 0, "input_length": NaN, "output_length": 1}',
            r"line 2: input_length must be a number, got nan",
        ),
        (
            '{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": "a"}',
            r"line 2: hash_ids must be a list",
        ),
        ("[1, 2]", r"line 2: expected a JSON object, got list"),
    ],
)
def test_malformed_mooncake_line(tmp_path, line, message):
    f = _chunk(
        tmp_path / "t.jsonl", ['{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}', line]
    )
    with pytest.raises(TraceError, match=r"t\.jsonl: " + message):
        load_trace(f)


def test_bad_range_arguments():
    with pytest.raises(ValueError, match=r"end_s \(5\) must be after start_s \(10\)"):
        load_trace(AZURE_CODE, start_s=10, end_s=5)
    with pytest.raises(TraceError, match=r"the window \[200000, None\) s lies outside the trace's \[0, 172800\) s"):
        load_trace(SG_LANGUAGE, start_s=200_000)
    with pytest.raises(
        TraceError, match=r"code\.csv: the window \[900, None\) s lies outside the trace's \[0, 585.903\] s"
    ):
        load_trace(AZURE_CODE, start_s=900)
    # Without an end, the window runs to the trace's end and keeps its last request.
    assert len(load_trace(AZURE_CODE, start_s=500)) == int(np.sum(load_trace(AZURE_CODE).arrivals_s >= 500))


def test_module_command_prints_a_summary_per_trace(tmp_path, capsys):
    from infercast.simulator.replay.traces import main

    assert main([str(AZURE_CODE), str(tmp_path / "missing.csv")]) == 1
    first, second = capsys.readouterr().out.splitlines()
    info = json.loads(first)
    assert info["name"] == "azure-code" and info["requests"] == 1482
    assert info["mean_rps"] == pytest.approx(1482 / 585.903294, abs=1e-3)
    assert info["long_share"] == 0.0 and info["start_time"] == "2023-11-16T18:17:03.979960"
    assert second.startswith("error: ") and second.endswith("missing.csv: no such file")
