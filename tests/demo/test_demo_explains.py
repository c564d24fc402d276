"""Issue 38 items 6, 8 and 9, the parts a unit test can show: the demo says how long it has left, tags every line
with its arm, refuses to start when a part it needs is missing (before the 11.5-minute run that used to end in
`ModuleNotFoundError: matplotlib`), and runs `scheduled` beside `predictive` by default."""

from __future__ import annotations

import io
import logging
import re
import subprocess
import sys

from infercast.arm_names import ARMS
from infercast.simulator.demo.cli import DEFAULT_ARMS, Progress, _duration, missing
from infercast.simulator.demo.report import attribution
from infercast.simulator.demo.run import _ToProgress, arm_logs


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_the_progress_says_how_long_is_left_and_tags_each_line_with_its_arm():
    clock, out = Clock(), io.StringIO()
    p = Progress(False, out, arms=["none", "reactive", "predictive", "perfect-forecast"], jobs=2, clock=clock,
                 status_every=10.0)  # fmt: skip
    assert p.eta_seconds() is None  # nothing to project from yet
    p("none", 0.0, [])
    p("reactive", 0.0, [])
    clock.t = 30.0
    clock.t = 5.0
    p("reactive", 0.25 * 5 / 30, [])  # too early to project reactive, and no status line yet (every 10 s)
    clock.t = 30.0
    p("reactive", 0.25, [])
    p("none", 0.5, ["t=  300s 1 OOM (total 1)"])
    # none: 60 s in all, 30 left; reactive: 120 s, 90 left; two not started at the mean 90 s; two at a time
    assert p.eta_seconds() == (30 + 90 + 2 * 90) / 2
    text = out.getvalue()
    assert "  [none] t=  300s 1 OOM (total 1)" in text
    assert re.search(
        r"demo: 0 of 4 arms done, 30 s so far, about \d+ min left \(running: none \d+%, reactive 25%\)", text
    )
    assert _duration(p.eta_seconds()) == "2 min"
    p("predictive", None, ["warning: actuator frozen at 0: input forecast is stale (inf s old)"])
    assert "  [predictive] warning: actuator frozen at 0" in out.getvalue()
    clock.t = 60.0
    p("none", 1.0, [])
    assert "demo: [none] done in 60 s" in out.getvalue()


def test_every_log_line_of_an_arm_names_the_arm():
    # a process with logging set up (the command line's): its handler's lines are tagged
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with arm_logs("scheduled", lambda *a: None):
            logging.getLogger("infercast.actuators.controller").warning("actuator frozen at %.0f: %s", 0, "stale")
        logging.getLogger("x").warning("after the arm")
    finally:
        root.removeHandler(handler)
    assert stream.getvalue().splitlines() == ["[scheduled] actuator frozen at 0: stale", "after the arm"]
    # a worker process (no handlers): the line goes to the parent as the arm's
    got = []
    h = _ToProgress("predictive", lambda arm, frac, lines: got.append((arm, frac, lines)))
    h.emit(logging.makeLogRecord({"msg": "frozen", "levelname": "WARNING", "levelno": logging.WARNING}))
    assert got == [("predictive", None, ["warning: frozen"])]


def test_scheduled_runs_beside_predictive_by_default():
    assert "scheduled" in DEFAULT_ARMS and set(DEFAULT_ARMS) <= set(ARMS)
    assert DEFAULT_ARMS.index("scheduled") < DEFAULT_ARMS.index("predictive")


def test_the_calendar_the_decision_and_the_forecast_each_get_their_part_in_one_line():
    """Issue 42 item 6: the reader is told which part of the gain over reactive each brings, not left to conclude
    that the forecast did it all (the demo used to show predictive 1.12x reactive without the calendar's arm)."""
    assert "last-value" in DEFAULT_ARMS, "predictive - last-value is the forecast's part"
    urgent = {"reactive": 97.4, "scheduled": 117.4, "causal": 114.2, "last-value": 117.9, "predictive": 118.1}
    arms = {n: {"urgent_goodput_rps": v} for n, v in urgent.items()}
    line = attribution(arms)
    assert line == (
        "Urgent goodput over reactive: the calendar brings +20.0 req/s (scheduled - reactive), the decision +16.8 "
        "req/s (causal - reactive: the best plan acting at or after the onset), the forecast +0.2 req/s "
        "(predictive - last-value)."
    )
    del arms["causal"]
    assert "the decision not measured (causal not run) (causal - reactive" in attribution(arms)


def test_what_is_missing_is_said_before_any_arm_runs():
    none = missing(["none", "predictive"], importable=lambda m: True)
    assert none == []
    said = missing(["none", "predictive"], importable=lambda m: m not in ("matplotlib", "torch"))
    assert said == ["the report (report.html) needs matplotlib", "the predictive arm's LSTM needs torch"]
    # no arm forecasts with the LSTM: torch is not asked for
    assert missing(["none", "reactive"], importable=lambda m: m != "torch") == []


def test_the_command_refuses_at_once_without_the_plotting_library(repo_root):
    """The command line, with matplotlib made unimportable: exit 2 within seconds, naming the extra and the CPU
    index, and nothing run (no arm's line)."""
    code = (
        "import sys; sys.modules['matplotlib'] = None; from infercast.tools.cli import main; "
        "sys.exit(main(['demo', '--arms', 'none', '--out', sys.argv[1], '--no-progress']))"
    )
    r = subprocess.run([sys.executable, "-c", code, str(repo_root / "runs" / "never")], capture_output=True,
                       text=True, cwd=repo_root, timeout=300)  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert "cannot run: the report (report.html) needs matplotlib" in r.stderr
    assert "infercast[demo]" in r.stderr and "download.pytorch.org/whl/cpu" in r.stderr
    assert "[none]" not in r.stderr
    assert not (repo_root / "runs" / "never").exists()


def _run(name: str, pools: list[str], served: float, page: float | None = None, **summary):
    import pandas as pd

    from infercast.simulator.demo.run import ArmRun

    rows = [
        {"t": t, "pool": p, "kv_usage": 0.5, "kv_usage_max": 0.6, "served_rps": served / len(pools),
         "offered_rps": 12_000.0 if t >= 600 else 200.0, "rps": 1.0, "long_share": 0.1}
        for t in range(0, 900, 5)
        for p in pools
    ]  # fmt: skip
    s = {"oom_events": 0, "p99_latency_ms": 4000.0, "urgent_goodput_rps": 80.0, "offered": 1000, "rejected": 950,
         "alert_lead_seconds": None, **summary}  # fmt: skip
    empty = pd.DataFrame()
    return ArmRun(name, s, pd.DataFrame(rows), [], empty, empty, page_seconds=page, page_alert="X")


def test_the_reports_first_screen_says_how_overloaded_and_what_the_calendar_knew():
    """Issue 38 item 9: every arm rejected ~95% and the report did not say the sale was far beyond the fleet; the
    predictive arm's lead came from the calendar and the report did not say so; pool names changed unexplained."""
    from infercast.simulator.demo.report import _calendar_html, _overload_html, _pool_note, overload
    from infercast.simulator.demo.run import DemoResult

    r = DemoResult("flash-sale", 0, horizon_seconds=300.0, event_onset_seconds=30.0,
                   events=[{"name": "flash-sale", "start": 600.0, "end": 1500.0, "expected_rps": 12000.0}])  # fmt: skip
    r.arms = {
        "none": _run("none", ["v4-main", "v3.5-fallback"], 150.0, rejected=960),
        "scheduled": _run("scheduled", ["v4-short", "v4-long"], 300.0, urgent_goodput_rps=84.5),
        "predictive": _run(
            "predictive", ["v4-short", "v4-long"], 300.0, page=345.0, urgent_goodput_rps=84.7, alert_lead_seconds=295.0
        ),
    }
    o = overload(r)
    assert o["peak_offered_rps"] == 12_000.0 and o["capacity_rps"] == 300.0 and o["ratio"] == 40.0
    text = _overload_html(r)
    assert "<b>40x the fleet's capacity</b>" in text and "(95% to 96% of the requests over the run)" in text
    cal = _calendar_html(r)
    assert "<code>flash-sale</code> from 600 s to 1,500 s at 12,000 req/s" in cal
    assert "(+0.2 on <code>scheduled</code>)" in cal
    # 345 s: the horizon (300 s) reached the event's onset (600 + 30 s) at 330 s: the calendar's
    assert "fired at 345 s, 295 s before" in cal and "<b>That lead is the calendar's</b>" in cal
    r.arms["predictive"].page_seconds = 100.0
    assert "from the series the forecasts read" in _calendar_html(r)
    r.events = []
    assert "announces no event" in _calendar_html(r)
    note = _pool_note(r)
    assert "The pool names change between arms" in note and "v4-short, v4-long" in note


def test_a_model_file_that_does_not_load_stops_the_demo_before_the_predictive_arm(tmp_path):
    from infercast.simulator.demo.cli import lstm_refused

    assert lstm_refused(["none", "reactive"], str(tmp_path / "nope")) is None  # no arm needs it
    assert lstm_refused(["predictive"], None) is None  # the shipped model loads
    why = lstm_refused(["predictive"], str(tmp_path / "nope"))
    assert why is not None and "no model file" in why


def test_causal_asked_for_where_no_plan_is_stored_is_refused_before_any_arm_runs(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "demo", "--scenario", "calm-day", "--arms", "reactive,causal",
         "--out", str(tmp_path / "out"), "--no-progress"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert r.returncode == 2
    assert "no causal plan is stored for calm-day seed 0 (bench/demo.py --causal --scenario calm-day" in r.stderr
    assert not (tmp_path / "out" / "reactive").exists()
