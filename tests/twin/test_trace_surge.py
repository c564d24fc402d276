"""Surges laid on real traces (`infercast twin run --trace F --surge START,SECONDS,FACTOR[,RAMP]`, issue 42 item 5):
the trace's own arrival rate times FACTOR over the window, a linear ramp from 1x, request shapes from the same
trace, deterministic under the seed, a clear error for each bad surge, and `--size-fleet` sizing the fleet for the
trace without its surge."""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.config import load_config
from infercast.simulator.replay.traces import Surge, SurgeError, load_trace
from infercast.simulator.twin.run import run_trace
from infercast.simulator.twin.tracefleet import sized_trace_fleet, surged_trace_run
from infercast.simulator.twin_cli import add_arguments

SLICES = {
    "azure": ("traces/azure/AzureLLMInferenceTrace_code.csv", {}),
    "mooncake": ("traces/mooncake/conversation_trace.jsonl", {}),
    "servegen": ("traces/servegen/language/m-large", {"start_s": 0.0, "end_s": 1200.0}),
}


@pytest.fixture(scope="module")
def cfg(repo_root):
    return load_config(repo_root / "examples" / "flash-sale.yaml")


def _trace(cfg, data_dir, kind):
    path, kw = SLICES[kind]
    return load_trace(data_dir / path, lengths=cfg.scenario.lengths, **kw)


def _count(trace, t0, t1) -> int:
    return int(((trace.arrivals_s >= t0) & (trace.arrivals_s < t1)).sum())


@pytest.mark.parametrize("kind", sorted(SLICES))
def test_a_surge_multiplies_the_traces_own_rate_in_its_window_and_nowhere_else(cfg, data_dir, kind):
    trace = _trace(cfg, data_dir, kind)
    d = trace.duration_s
    start, seconds = 0.3 * d, 0.4 * d
    out = trace.surged(Surge(start, seconds, 3.0), seed=1)
    # outside the window the trace's own requests, untouched
    before, after = trace.arrivals_s < start, trace.arrivals_s >= start + seconds
    np.testing.assert_array_equal(out.arrivals_s[out.arrivals_s < start], trace.arrivals_s[before])
    np.testing.assert_array_equal(out.arrivals_s[out.arrivals_s >= start + seconds], trace.arrivals_s[after])
    n0, n1 = _count(trace, start, start + seconds), _count(out, start, start + seconds)
    assert n0 > 20 and n1 == pytest.approx(3.0 * n0, rel=0.15)
    # the surge's requests are shaped like the window's own: every (prompt, output) pair is one of the trace's
    own = set(zip(trace.prompt_tokens.tolist(), trace.output_tokens.tolist(), strict=True))
    assert set(zip(out.prompt_tokens.tolist(), out.output_tokens.tolist(), strict=True)) <= own
    assert np.all(np.diff(out.arrivals_s) >= 0) and out.duration_s == trace.duration_s
    assert out.surges == (Surge(start, seconds, 3.0),) and "x3 from" in out.name


def test_a_ramp_rises_linearly_from_1x_and_a_factor_under_1_thins(cfg, data_dir):
    trace = _trace(cfg, data_dir, "azure")
    ramped = trace.surged(Surge(100.0, 400.0, 5.0, 400.0), seed=0)
    early, late = (100.0, 200.0), (400.0, 500.0)  # mean multiplier 1.5 and 4.5
    gain_early = _count(ramped, *early) / _count(trace, *early)
    gain_late = _count(ramped, *late) / _count(trace, *late)
    assert gain_early == pytest.approx(1.5, rel=0.25) and gain_late == pytest.approx(4.5, rel=0.2)
    thin = trace.surged(Surge(100.0, 400.0, 0.25), seed=0)
    assert _count(thin, 100.0, 500.0) == pytest.approx(0.25 * _count(trace, 100.0, 500.0), rel=0.25)
    assert Surge(0.0, 10.0, 4.0, 5.0).multiplier(np.array([0.0, 2.5, 5.0, 9.0])).tolist() == [1.0, 2.5, 4.0, 4.0]


@pytest.mark.parametrize("kind", sorted(SLICES))
def test_the_same_seed_gives_the_same_surge_and_another_seed_another(cfg, data_dir, kind):
    trace = _trace(cfg, data_dir, kind)
    surge = Surge(0.2 * trace.duration_s, 0.5 * trace.duration_s, 2.5, 0.1 * trace.duration_s)
    a, b, c = trace.surged(surge, seed=7), trace.surged(surge, seed=7), trace.surged(surge, seed=8)
    for field in ("arrivals_s", "prompt_tokens", "output_tokens"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.arrivals_s, c.arrivals_s)


@given(
    start=st.floats(0.0, 500.0),
    seconds=st.floats(1.0, 80.0),
    factor=st.floats(0.05, 6.0),
    ramp_share=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**16),
)
@settings(max_examples=40, deadline=None)
def test_any_valid_surge_keeps_the_trace_sorted_inside_its_span_and_outside_the_window_untouched(
    start, seconds, factor, ramp_share, seed
):
    rng = np.random.default_rng(0)
    from infercast.simulator.replay.traces import Trace

    t = np.sort(rng.uniform(0.0, 600.0, 3000))
    trace = Trace("t", "synthetic", t, rng.integers(1, 9000, len(t)), rng.integers(1, 500, len(t)), 600.0)
    surge = Surge(start, seconds, factor, ramp_share * seconds)
    out = trace.surged(surge, seed=seed)
    assert np.all(np.diff(out.arrivals_s) >= 0)
    assert out.arrivals_s.min() >= 0 and out.arrivals_s.max() <= trace.duration_s
    outside = (out.arrivals_s < start) | (out.arrivals_s >= start + seconds)
    was = (t < start) | (t >= start + seconds)
    np.testing.assert_array_equal(out.arrivals_s[outside], t[was])
    if factor >= 1:  # a surge up keeps every request of the trace
        assert len(out) >= len(trace)


@pytest.mark.parametrize(
    "text, message",
    [
        ("600,300,0", "factor 0: must be > 0"),
        ("600,300,-2", "factor -2: must be > 0"),
        ("600,300,4,400", "ramp 400 s is longer than the surge (300 s)"),
        ("600,0,4", "length 0 s: must be > 0"),
        ("-5,300,4", "start -5 s: must be >= 0"),
        ("600,300", "expected START,SECONDS,FACTOR[,RAMP]"),
        ("600,300,x", "must be numbers"),
        ("600,300,nan", "must be a finite number"),
    ],
)
def test_a_bad_surge_is_refused_by_the_cli_with_what_is_wrong(text, message, capsys):
    """What the user sees: argparse's usage error (exit 2) naming the flag and the problem, before anything runs."""
    p = argparse.ArgumentParser()
    add_arguments(p)
    with pytest.raises(SystemExit) as e:
        p.parse_args(["run", "--trace", "t.csv", f"--surge={text}"])  # = : a START of -5 is not an option
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--surge" in err and message in err
    with pytest.raises(SurgeError, match=re.escape(message)):
        Surge.parse(text)


def test_the_flag_repeats(cfg, data_dir):
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["run", "--trace", "t.csv", "--surge", "10,20,2", "--surge", "100,50,3,10"])
    assert args.surge == [Surge(10.0, 20.0, 2.0), Surge(100.0, 50.0, 3.0, 10.0)]
    trace = _trace(cfg, data_dir, "azure")
    _, out, notes = surged_trace_run(trace, cfg, args.surge, seed=0)
    assert out.surges == tuple(args.surge) and "x2 from 10 s" in notes[-1] and "x3 from 100 s" in notes[-1]


def test_a_window_outside_the_trace_stops_the_cli_before_it_runs(repo_root, data_dir, tmp_path):
    """What the user sees: rc 2, the window and the trace's span named, nothing run or written."""
    trace = data_dir / SLICES["mooncake"][0]  # 297 s
    r = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "twin", "run", "--trace", str(trace), "--size-fleet",
         "--surge", "200,120,4", "--out", str(tmp_path / "out")],
        capture_output=True, text=True, cwd=repo_root, timeout=120,
    )  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert "window 200-320 s is outside conversation_trace.jsonl (0-297 s as replayed)" in r.stderr
    assert not (tmp_path / "out").exists()


def test_size_fleet_sizes_for_the_trace_without_its_surge(cfg, data_dir):
    """Issue 42 item 5: a hand-made surge used to be sized for itself (more standby nodes waiting for it)."""
    trace = _trace(cfg, data_dir, "azure").window(0.0, 300.0)
    surge = Surge(100.0, 120.0, 8.0)
    sized, out, notes = surged_trace_run(trace, cfg, [surge], size_fleet=True, seed=0)
    plain, _ = sized_trace_fleet(trace, cfg)
    for_the_surge, _ = sized_trace_fleet(trace.surged(surge, seed=0), cfg)
    assert sized == plain and sized != for_the_surge
    assert len(out) > len(trace) and "sized without them" in notes[-1]


def test_a_surged_trace_reports_p99_from_the_surge_and_recovery_from_its_end(cfg, data_dir):
    trace = _trace(cfg, data_dir, "mooncake").window(0.0, 120.0)
    sized, _ = sized_trace_fleet(trace, cfg)
    s = run_trace(trace.surged(Surge(40.0, 30.0, 2.0), seed=0), sized, "none", 0).summary
    assert s["surge_start_seconds"] == 40.0 and s["surge_end_seconds"] == 70.0
    assert run_trace(trace, sized, "none", 0).summary["surge_start_seconds"] is None


@pytest.mark.slow
def test_cli_runs_a_surged_trace_deterministically(repo_root, data_dir, tmp_path):
    trace = data_dir / SLICES["mooncake"][0]
    outs = []
    for i in range(2):
        r = subprocess.run(
            [sys.executable, "-m", "infercast.tools.cli", "twin", "run", "--trace", str(trace), "--size-fleet",
             "--surge", "100,120,3,30", "--seed", "4", "--control", "reactive", "--json",
             "--out", str(tmp_path / str(i))],
            capture_output=True, text=True, cwd=repo_root, timeout=600,
        )  # fmt: skip
        assert r.returncode == 0, r.stderr[-3000:]
        assert "x3 from 100 s for 120 s, ramp 30 s (the fleet sized without them)" in r.stderr
        outs.append(json.loads(r.stdout))
    keys = ("offered", "served", "urgent_goodput_rps", "goodput_rps", "gpu_seconds", "surge_start_seconds")
    assert {k: outs[0][k] for k in keys} == {k: outs[1][k] for k in keys}
    assert outs[0]["surge_start_seconds"] == 100.0


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SLICES))
def test_every_arm_runs_on_a_surged_slice_of_each_trace_format(cfg, data_dir, kind):
    """Issue 42 item 5: `--surge` works on each trace format for every arm (hindsight's quick search here: the full
    one with its check runs in the control bench)."""
    from infercast.simulator.control.driver import ARMS, run_arm

    trace = _trace(cfg, data_dir, kind)
    trace = trace.window(0.0, min(trace.duration_s, 300.0))
    sized, surged, _ = surged_trace_run(trace, cfg, [Surge(100.0, 120.0, 3.0, 20.0)], size_fleet=True, seed=0)
    for arm in ARMS:
        s = run_arm(sized, arm, 0, trace=surged, search="quick").summary
        assert s["served"] + s["rejected"] + s["failed"] + s["in_flight"] == s["offered"] > len(trace), arm
        assert s["surge_start_seconds"] == 100.0 and s["surge_end_seconds"] == 220.0, arm
        for k in ("goodput_rps", "urgent_goodput_rps", "oom_events", "gpu_seconds"):
            assert s[k] is not None, (arm, k)
