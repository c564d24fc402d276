"""The lab's pure parts: the --surge flag (twin run's parser), token scaling, the control policy, the
report.  What a user sees: a bad --surge is refused with the reason (as `twin run --surge` refuses it); the
replayed requests always fit the tiny model's context; each control acts on its own trigger and releases after a
calm; the report's preemptions and page lead come from the engines' counters and the page's time."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.actuators.actions import SetAdmission
from infercast.simulator.lab.control import ControlState, Observed, Policy
from infercast.simulator.lab.load import Outcome, Planned, scale_tokens
from infercast.simulator.lab.run import EngineSample, summarize
from infercast.simulator.replay.traces import Surge, Trace
from tests.conftest import REPO


def trace(n: int = 200, seconds: float = 100.0, seed: int = 1) -> Trace:
    rng = np.random.default_rng(seed)
    return Trace(
        name="t",
        source="synthetic",
        arrivals_s=np.sort(rng.uniform(0, seconds, n)),
        prompt_tokens=rng.integers(1, 4000, n),
        output_tokens=rng.integers(1, 800, n),
        duration_s=seconds,
    )


@settings(max_examples=40, deadline=None)
@given(max_len=st.integers(8, 2048), seed=st.integers(0, 20))
def test_scaled_requests_always_fit_the_context(max_len: int, seed: int) -> None:
    plan, factor = scale_tokens(trace(seed=seed), max_len)
    assert factor > 0
    assert all(p.prompt_tokens >= 1 and p.output_tokens >= 1 for p in plan)
    assert all(p.prompt_tokens + p.output_tokens <= max_len - 1 for p in plan)


def test_each_control_acts_on_its_own_trigger_and_releases_after_a_calm() -> None:
    calm, hot, paged = Observed(0, 0.3, False), Observed(1, 0.85, False), Observed(1, 0.3, True)
    assert Policy("none").decide(hot, ControlState())[0] == []
    assert Policy("reactive").decide(paged, ControlState())[0] == []
    acts, st_ = Policy("reactive").decide(hot, ControlState())
    assert acts == [SetAdmission(memory_limit=0.9)] and st_.limited
    acts, st_ = Policy("predictive").decide(paged, ControlState())
    assert acts == [SetAdmission(memory_limit=0.9)]
    p = Policy("predictive", release_seconds=30)
    acts, st_ = p.decide(Observed(10, 0.3, False), st_)
    assert acts == [] and st_.limited  # calm for 0 s
    acts, st_ = p.decide(Observed(39, 0.3, False), st_)
    assert acts == []
    acts, st_ = p.decide(Observed(40, 0.3, False), st_)
    assert acts == [SetAdmission(memory_limit=1.0)] and not st_.limited
    assert p.decide(calm, st_)[0] == []


def test_the_report_counts_preemptions_from_each_engines_counter_and_the_page_lead() -> None:
    samples = [
        EngineSample(0, "e0", 0.1, 5, 0, 0),
        EngineSample(0, "e1", 0.1, 0, 0, 0),
        EngineSample(10, "e0", 1.0, 5, 3, 2),
        EngineSample(11, "e1", 0.9, 2, 3, 0),
        EngineSample(12, "e0", 1.0, 9, 3, 4),
    ]
    ok = [Outcome(Planned(0, 10, 10), sent_s=0, ttft_s=x, done_s=1, ok=True) for x in (0.1, 0.2, 2.0)]
    bad = [Outcome(Planned(0, 10, 10), sent_s=0, error="HTTP 503")]
    r = summarize(ok + bad, samples, duration_s=10, ttft_slo_s=1.0, page_s=5.0, actions=[], engine="vllm x")
    assert r["preemptions"] == 4 + 2 and r["first_preemption_s"] == 11 and r["page_lead_seconds"] == 6.0
    assert (r["requests"], r["completed"], r["failed"], r["kv_peak"]) == (4, 3, 1, 1.0)
    assert r["goodput_rps"] == pytest.approx(0.2)
    assert (
        summarize(ok, samples, duration_s=10, ttft_slo_s=1, page_s=None, actions=[], engine="")["page_lead_seconds"]
        is None
    )


def test_the_labs_scrape_job_is_the_one_infercast_k8s_prometheus_writes_for_its_fleet() -> None:
    from infercast.config import parse_config
    from infercast.simulator.lab.stack import LabSettings, lab_fleet, prometheus_config
    from infercast.tools.k8s.scrape import prometheus_config as k8s_config

    ports = {"engine-0": 8001, "engine-1": 8002}
    mine = prometheus_config(ports, 2, ("engines.yml",))
    theirs = k8s_config(parse_config(lab_fleet(LabSettings(), ports)), interval="2s", rule_files=("engines.yml",))
    strip = lambda jobs: [{k: v for k, v in j.items() if k not in ("metrics_path", "scheme")} for j in jobs]  # noqa: E731
    assert strip(mine["scrape_configs"]) == strip(theirs["scrape_configs"])


def test_the_lab_forecasts_with_the_fallback_by_default_and_with_the_deployed_lstm_on_production_time_over_5() -> None:
    """What the predictor in the lab runs (docs/lab.md): at the lab's 2 s step the LSTM (15 s) is refused and the
    fallback forecasts, with the reason in the log; at `time_scale` 5 with a 3 s step it reads the lab in its own
    time (15 s, 300 s ahead), and the alert's `for:` is production's 30 s / 5."""
    from infercast.config import parse_config
    from infercast.predictors.service import _load_lstm
    from infercast.predictors.timescale import TimeScaled
    from infercast.simulator.lab.stack import LabSettings, lab_fleet

    ports = {"engine-0": 8001}
    model, why = _load_lstm(parse_config(lab_fleet(LabSettings(), ports)).predictor)
    assert model is None and "trained at a 15 s step, predictor.step_seconds is 2" in why
    scaled = parse_config(lab_fleet(LabSettings(time_scale=5.0, step_seconds=3, forecast_for_seconds=6), ports))
    model, why = _load_lstm(scaled.predictor)
    assert why is None and isinstance(model, TimeScaled) and model.scale == 5.0
    assert scaled.thresholds.kv_forecast_for_seconds * 5 == 30


TRACE = "tests/data/traces/azure/AzureLLMInferenceTrace_conv.csv"


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--surge", "50,30,2"], "the window 50-80 s is outside AzureLLMInferenceTrace_conv.csv (0-60 s as replayed)"),
        (["--rate-scale", "0"], "--rate-scale must be > 0"),
        (["--start", "590", "--seconds", "60"], "not the 60s asked for"),
    ],
)
def test_lab_run_refuses_bad_input_before_starting_anything(extra: list[str], says: str, capsys, tmp_path) -> None:
    from infercast.tools.cli import main

    with pytest.raises(SystemExit, match=re.escape(says)):
        main(["lab", "run", "--trace", str(REPO / TRACE), "--seconds", "60", "--dir", str(tmp_path / "lab"), *extra])
    assert not (tmp_path / "lab").exists()  # nothing was started


@pytest.mark.parametrize(
    "text, message",
    [
        ("600,300,0", "factor 0: must be > 0"),
        ("600,300,4,400", "ramp 400 s is longer than the surge (300 s)"),
        ("-5,300,4", "start -5 s: must be >= 0"),
        ("600,300", "expected START,SECONDS,FACTOR[,RAMP]"),
        ("600,300,x", "must be numbers"),
        ("600,300,nan", "must be a finite number"),
    ],
)
def test_lab_run_refuses_a_bad_surge_as_twin_run_does(text: str, message: str, capsys, tmp_path) -> None:
    """Review item (issue 40): one surge parser.  What the user sees from `lab run --surge` is what `twin run
    --surge` prints for the same text: argparse's usage error (rc 2) naming the flag and `Surge.parse`'s reason."""
    import argparse

    from infercast.simulator.twin_cli import add_arguments as twin_arguments
    from infercast.tools.cli import main

    with pytest.raises(SystemExit) as lab:
        main(["lab", "run", "--trace", str(REPO / TRACE), f"--surge={text}", "--dir", str(tmp_path / "lab")])
    lab_err = capsys.readouterr().err
    twin = argparse.ArgumentParser()
    twin_arguments(twin)
    with pytest.raises(SystemExit) as tw:
        twin.parse_args(["run", "--trace", "t.csv", f"--surge={text}"])
    twin_err = capsys.readouterr().err
    assert lab.value.code == tw.value.code == 2
    reason = lambda err: err.strip().splitlines()[-1].split("--surge", 1)[1]  # noqa: E731
    assert message in lab_err and reason(lab_err) == reason(twin_err)
    assert not (tmp_path / "lab").exists()


def test_lab_run_lays_the_surge_on_as_twin_run_does() -> None:
    """The same arrivals as `twin run --surge` for the same slice, surge and seed (`Trace.surged`)."""
    from argparse import Namespace

    from infercast.simulator.lab.cli import load_plan
    from infercast.simulator.replay.traces import load_trace

    surge = Surge.parse("20,30,3,10")
    args = Namespace(trace=str(REPO / TRACE), start=0.0, seconds=60.0, rate_scale=1.0, surge=[surge], seed=3)
    _, _, trace = load_plan(args, 256)
    want = load_trace(REPO / TRACE, start_s=0.0, end_s=60.0).surged(surge, seed=3)
    assert np.array_equal(trace.arrivals_s, want.arrivals_s) and trace.surges == (surge,)
    assert np.array_equal(trace.prompt_tokens, want.prompt_tokens)


def test_the_lab_never_deletes_a_directory_it_did_not_make(tmp_path) -> None:
    from infercast.simulator.lab.stack import LabDirError, LabSettings, start_lab

    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "thesis.txt").write_text("years of work")
    with pytest.raises(LabDirError, match="not a lab's directory"):
        start_lab(LabSettings(), mine)
    assert (mine / "thesis.txt").read_text() == "years of work"


def test_two_of_the_longest_requests_leave_the_labs_pool_under_the_predictive_trigger() -> None:
    """Issue 40, "no page on a calm slice": at 16 blocks one of the longest requests the lab sends (max_model_len)
    was half an engine's pool, so the pool's usage jumped by halves as single requests came and went, and the KV
    forecast read each jump as a rising trend: the calm slice was paged.  The lab's pool now holds four of them, so
    a calm slice's coincidences of two long requests stay under the trigger; only a load that keeps three or more
    in flight (a surge) reaches it."""
    from infercast.config import Thresholds
    from infercast.simulator.lab.stack import LabSettings

    shape = LabSettings().shape
    longest_blocks = -(-(shape.max_model_len - 1) // shape.block_size)
    assert 2 * longest_blocks / shape.blocks < Thresholds().kv_forecast_trigger
    assert 4 * longest_blocks <= shape.blocks  # and a surge can still fill it (four fit, a fifth preempts)


def _none_run(slice_: str, run: int, kv: list[tuple[float, str, float]], preemptions: int, shift: float = 0.0) -> dict:
    client = [[1.0 + shift, 1.0, 0.1, 0.5, 40, 10, True], [2.0, 2.0, 0.1, 0.5, 60, 12, True]]
    return {"slice": slice_, "run": run, "control": "none", "seconds": 20.0, "kv_series": kv,
            "preemptions": preemptions, "client": client}  # fmt: skip


def test_the_lab_bench_measures_the_lab_against_itself_and_refuses_runs_of_other_arrivals() -> None:
    """The twin is judged against the lab; the reference beside it is the lab against itself: two `none` runs of
    one slice (the same arrivals) compared the same way.  Identical runs read 0 and within 30%; runs whose
    arrivals differ make no reference, and the bench says which."""
    from tests.benches import load_bench

    lab = load_bench("lab", "lab_bench_for_test")
    kv_a = [(0.0, "engine-0", 0.0), (1.0, "engine-0", 0.5), (3.0, "engine-0", 0.25)]
    kv_b = [(0.0, "engine-0", 0.0), (1.0, "engine-0", 0.25), (3.0, "engine-0", 0.25)]
    runs = [_none_run("step", 1, kv_a, 10), _none_run("step", 2, kv_a, 12), _none_run("step", 3, kv_b, 20)]
    runs.append({**_none_run("step", 1, kv_a, 10), "control": "predictive"})  # not a reference: another control
    rows = lab.lab_vs_lab_rows(runs)
    assert [r["runs"] for r in rows] == ["1 vs 2", "1 vs 3", "2 vs 3"]
    same, other = rows[0], rows[1]
    assert same["kv_mad"] == 0.0 and same["preemptions_within_30pct"]
    # seconds 1 and 2 of the 20 on the grid differ by 0.25: a mean absolute difference of 0.025; in 10 s means the
    # first window differs by 0.05 and the second not at all
    assert other["kv_mad"] == 0.025 and other["kv_mad_10s"] == 0.025
    assert not other["preemptions_within_30pct"]  # 10 vs 20
    moved = [_none_run("ramp", 1, kv_a, 1), _none_run("ramp", 2, kv_a, 1, shift=0.5)]
    with pytest.raises(SystemExit, match="ramp runs 1 and 2 replayed other arrivals"):
        lab.lab_vs_lab_rows(moved)
