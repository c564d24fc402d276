"""The lab's pure parts: the --surge parser and its effect on a trace, token scaling, the control policy, the
report.  What a user sees: a bad --surge is refused with the reason (as `twin run --surge` refuses it); the
replayed requests always fit the tiny model's context; each control acts on its own trigger and releases after a
calm; the report's preemptions and page lead come from the engines' counters and the page's time."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.actuators.actions import SetAdmission
from infercast.lab.control import ControlState, Observed, Policy
from infercast.lab.load import Outcome, Planned, scale_tokens
from infercast.lab.run import EngineSample, summarize
from infercast.lab.surge import Surge, SurgeError, apply_surge, parse_surge
from infercast.traces import Trace
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


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("10,20", "START,SECONDS,FACTOR"),
        ("a,20,2", "must be numbers"),
        ("10,20,0", "FACTOR must be > 0"),
        ("10,20,-1", "FACTOR must be > 0"),
        ("10,20,2,30", "RAMP"),
        ("-1,20,2", "START must be >= 0"),
        ("10,inf,2", "finite"),
    ],
)
def test_a_bad_surge_is_refused_with_the_reason(text: str, says: str) -> None:
    with pytest.raises(SurgeError, match=says):
        parse_surge(text)


def test_a_surge_window_outside_the_trace_is_refused() -> None:
    with pytest.raises(SurgeError, match="outside the trace"):
        apply_surge(trace(seconds=100), parse_surge("90,20,2"))


def test_parse_surge_reads_the_ramp() -> None:
    assert parse_surge("10,60,3,30") == Surge(10, 60, 3, 30)
    assert parse_surge("10,60,3") == Surge(10, 60, 3, 0)


@settings(max_examples=40, deadline=None)
@given(
    start=st.floats(0, 50),
    seconds=st.floats(1, 50),
    factor=st.floats(0.1, 6),
    ramp_share=st.floats(0, 1),
    seed=st.integers(0, 5),
)
def test_a_surge_changes_only_its_window_and_keeps_the_tokens(start, seconds, factor, ramp_share, seed) -> None:
    t = trace(seed=seed)
    s = Surge(start, seconds, factor, ramp_share * seconds)
    out = apply_surge(t, s, seed=seed)
    kept = t.arrivals_s[(t.arrivals_s < start) | (t.arrivals_s >= start + seconds)]
    assert np.all(np.isin(kept, out.arrivals_s))  # the requests outside the window are all still there
    assert np.all(np.diff(out.arrivals_s) >= 0) and out.duration_s == t.duration_s
    pairs = set(zip(t.prompt_tokens.tolist(), t.output_tokens.tolist(), strict=True))
    assert set(zip(out.prompt_tokens.tolist(), out.output_tokens.tolist(), strict=True)) <= pairs


def test_a_step_surge_multiplies_the_window_rate() -> None:
    t = trace(n=2000, seconds=100)
    out = apply_surge(t, Surge(20, 40, 3.0), seed=0)
    inside = lambda a: np.sum((a >= 20) & (a < 60))  # noqa: E731
    assert inside(out.arrivals_s) == pytest.approx(3 * inside(t.arrivals_s), rel=0.08)


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
    from infercast.k8s.scrape import prometheus_config as k8s_config
    from infercast.lab.stack import LabSettings, lab_fleet, prometheus_config

    ports = {"engine-0": 8001, "engine-1": 8002}
    mine = prometheus_config(ports, 2, ("engines.yml",))
    theirs = k8s_config(parse_config(lab_fleet(LabSettings(), ports)), interval="2s", rule_files=("engines.yml",))
    strip = lambda jobs: [{k: v for k, v in j.items() if k not in ("metrics_path", "scheme")} for j in jobs]  # noqa: E731
    assert strip(mine["scrape_configs"]) == strip(theirs["scrape_configs"])


TRACE = "tests/data/traces/azure/AzureLLMInferenceTrace_conv.csv"


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (["--surge", "50,30,2"], "outside the trace"),
        (["--surge", "10,30,0"], "FACTOR must be > 0"),
        (["--surge", "10,30,2,40"], "RAMP"),
        (["--rate-scale", "0"], "--rate-scale must be > 0"),
        (["--start", "590", "--seconds", "60"], "not the 60s asked for"),
    ],
)
def test_lab_run_refuses_bad_input_before_starting_anything(extra: list[str], says: str, capsys, tmp_path) -> None:
    from infercast.cli import main

    with pytest.raises(SystemExit, match=says):
        main(["lab", "run", "--trace", str(REPO / TRACE), "--seconds", "60", "--dir", str(tmp_path / "lab"), *extra])
    assert not (tmp_path / "lab").exists()  # nothing was started


def test_the_lab_never_deletes_a_directory_it_did_not_make(tmp_path) -> None:
    from infercast.lab.stack import LabDirError, LabSettings, start_lab

    mine = tmp_path / "notes"
    mine.mkdir()
    (mine / "thesis.txt").write_text("years of work")
    with pytest.raises(LabDirError, match="not a lab's directory"):
        start_lab(LabSettings(), mine)
    assert (mine / "thesis.txt").read_text() == "years of work"
