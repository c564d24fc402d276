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
from infercast.demo.cli import DEFAULT_ARMS, Progress, _duration, missing
from infercast.demo.run import _ToProgress, arm_logs


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
        "import sys; sys.modules['matplotlib'] = None; from infercast.cli import main; "
        "sys.exit(main(['demo', '--arms', 'none', '--out', sys.argv[1], '--no-progress']))"
    )
    r = subprocess.run([sys.executable, "-c", code, str(repo_root / "runs" / "never")], capture_output=True,
                       text=True, cwd=repo_root, timeout=300)  # fmt: skip
    assert r.returncode == 2, r.stderr[-2000:]
    assert "cannot run: the report (report.html) needs matplotlib" in r.stderr
    assert "infercast[demo]" in r.stderr and "download.pytorch.org/whl/cpu" in r.stderr
    assert "[none]" not in r.stderr
    assert not (repo_root / "runs" / "never").exists()
