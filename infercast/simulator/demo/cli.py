"""`infercast demo [--scenario flash-sale|seed004-bench|FILE | --trace FILE] [--seed N] [--out DIR] [--json]
[--prometheus URL --alertmanager URL [--speed S]]`.

Replays the scenario on the twin under every arm (`none`, `basic`, `reactive`, `scheduled`, `predictive`,
`perfect-forecast`) with the same seed, shows a progress bar per arm, how long is left, and what the controls do
(each line tagged with its arm), prints the comparison table and writes
`DIR/report.html` (self-contained), `DIR/summary.json` and each arm's `DIR/ARM/timeseries.csv` and `events.json`
(each arm's as soon as it is done).  With `--prometheus` and `--alertmanager`, `predictive` runs live through
those servers on the wall clock (`live.py`; the servers are checked first, `live_check.py`).
"""

from __future__ import annotations

import argparse
import logging
import os
import subprocess
import sys
import time
from pathlib import Path

from infercast.arm_names import ARMS, canonical
from infercast.config import ConfigError, load_config, resolve_scenario
from infercast.runfiles import to_json, write_json

# every arm may be asked for; the default ones are the demo's story, plus `hindsight` (the best plan found knowing the
# whole future) where the control bench (bench/control.py) has found its plan for the scenario and seed, and `causal`
# (the best plan acting at or after the surge's onset) where bench/demo.py --causal has stored one: both replayed.
# `scheduled` (the calendar alone), `last-value` (the same loop with the naive forecast) and `causal` stand beside
# `predictive` so the report can say what the calendar, the decision and the forecast each bring (`attribution`)
DEFAULT_ARMS = ("none", "basic", "reactive", "scheduled", "last-value", "predictive", "perfect-forecast")
#: the demo's arms: the driver's, and `causal` (a stored plan, replayed)
DEMO_ARMS = (*ARMS, "causal")


def add_arguments(p: argparse.ArgumentParser) -> None:
    src = p.add_mutually_exclusive_group()
    src.add_argument("--scenario", default=None, help="a scenario name (examples/NAME.yaml) or a fleet file "
                     "with a scenario (default: flash-sale)")  # fmt: skip
    src.add_argument("--trace", help="a trace instead (Azure CSV, Mooncake JSONL, ServeGen dir) on a sized fleet")
    p.add_argument("--config", help="fleet file for --trace (default: examples/flash-sale.yaml)")
    p.add_argument("--seed", type=int, default=None, help="the scenario's seed (default: the file's)")
    p.add_argument("--arms", default=None,
                   help=f"comma-separated subset of {','.join(DEMO_ARMS)} (default: {','.join(DEFAULT_ARMS)}, and "
                   "hindsight where bench/control.py found its plan for the scenario and seed, causal where "
                   "bench/demo.py --causal stored one: each replayed, one run; asked for elsewhere, hindsight runs a "
                   "fast search: several runs of the twin)")  # fmt: skip
    p.add_argument("--out", default="runs/demo", help="directory for report.html, summary.json and the series")
    p.add_argument("--json", action="store_true", help="print summary.json instead of the table")
    p.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1),
                   help="arms run at once, in processes (default: 2, or 1 on a one-core machine)")  # fmt: skip
    p.add_argument("--no-progress", action="store_true", help="no progress bars (lines only)")
    live = p.add_argument_group("live", "run `predictive` through real servers on the wall clock (docs/demo.md)")
    live.add_argument("--prometheus", metavar="URL", help="a Prometheus holding infercast's rules for --speed that "
                      "scrapes the demo's exporter and forecasts and sends to --alertmanager")  # fmt: skip
    live.add_argument("--alertmanager", metavar="URL", help="an Alertmanager with a webhook at --webhook-listen")
    live.add_argument("--speed", type=float, default=1.0, help="simulated seconds per wall second (default 1: real "
                      "time; S needs the rules generated for S: "
                      "infercast.alertrules.generate --time-scale S)")  # fmt: skip
    live.add_argument("--exporter-listen", default="127.0.0.1:9400", help="where the demo serves the twin's metrics")
    live.add_argument("--predictor-listen", default="127.0.0.1:9401", help="where the demo serves the forecasts")
    live.add_argument("--webhook-listen", default="127.0.0.1:9402",
                      help="where Alertmanager delivers to the demo (the actuator's webhook address)")  # fmt: skip


class Progress:
    """One tqdm bar per arm on a terminal, plain lines otherwise; the controls' actions and every log line of an arm
    as lines under the bars, each tagged with its arm; and how long the whole demo has left (`eta_seconds`): on
    the terminal as a line above the bars, otherwise a status line at most every `status_every` seconds.

    `progress(arm, frac, lines)`: `frac` None adds lines without moving the arm's bar (a log line from its run)."""

    def __init__(
        self,
        enabled: bool,
        stream=sys.stderr,
        *,
        arms: list[str] | tuple[str, ...] = (),
        jobs: int = 1,
        clock=time.perf_counter,
        status_every: float = 20.0,
    ) -> None:
        self.stream = stream
        self.bars: dict = {}
        self.tqdm = None
        if enabled and stream.isatty():
            from tqdm import tqdm

            self.tqdm = tqdm
        self.arms = list(arms)
        self.jobs = max(1, jobs)
        self.clock = clock
        self.status_every = status_every
        self.t0 = clock()
        self.started: dict[str, float] = {}
        self.fraction: dict[str, float] = {}
        self.took: dict[str, float] = {}
        self.finished: set[str] = set()
        self._said_status = self.t0
        self._overall = None
        if self.tqdm is not None and self.arms:
            self._overall = self.tqdm(total=0, bar_format="{desc}", file=self.stream, position=0)
        self.width = max((len(a) for a in self.arms), default=10)

    def _say(self, msg: str) -> None:
        if self.tqdm is not None:
            self.tqdm.write(msg, file=self.stream)
        else:
            print(msg, file=self.stream, flush=True)

    def __call__(self, arm: str, frac: float | None, lines: list[str]) -> None:
        if arm in self.finished:
            return
        now = self.clock()
        if arm not in self.started:
            self.started[arm] = now
            if arm not in self.arms:
                self.arms.append(arm)
            if self.tqdm is not None:
                fmt = "{desc} {bar} {percentage:3.0f}% [{elapsed}<{remaining}]"
                self.bars[arm] = self.tqdm(total=100, desc=f"{arm:{self.width}s}", file=self.stream, bar_format=fmt)
            else:
                print(f"demo: [{arm}] running ...", file=self.stream, flush=True)
        for line in lines:
            self._say(f"  [{arm}] {line}")
        if frac is None:
            return
        self.fraction[arm] = frac
        if frac >= 1.0:
            self.finished.add(arm)
            self.took[arm] = now - self.started[arm]
        bar = self.bars.get(arm)
        if bar is not None:
            bar.update(round(frac * 100) - bar.n)
            if frac >= 1.0:
                bar.close()
        elif frac >= 1.0:
            print(f"demo: [{arm}] done in {self.took[arm]:.0f} s", file=self.stream, flush=True)
        self._status(now)

    def eta_seconds(self, now: float | None = None) -> float | None:
        """Wall seconds the demo has left: each running arm's own projection (its elapsed time over its fraction
        done), and the arms not started yet at the mean time of those finished or projected, `jobs` at a time.
        None until some arm has moved far enough to project from (2%)."""
        now = self.clock() if now is None else now
        projected = dict(self.took)
        running_left = []
        for arm, t in self.started.items():
            f = self.fraction.get(arm, 0.0)
            if arm in self.finished or f < 0.02:
                continue
            total = (now - t) / f
            projected[arm] = total
            running_left.append(total * (1.0 - f))
        if not projected:
            return None
        mean = sum(projected.values()) / len(projected)
        waiting = [a for a in self.arms if a not in self.started]
        slow_starters = [a for a in self.started if a not in self.finished and self.fraction.get(a, 0.0) < 0.02]
        work = sum(running_left) + mean * (len(waiting) + len(slow_starters))
        return work / self.jobs

    def _status(self, now: float) -> None:
        eta = self.eta_seconds(now)
        done = len(self.finished)
        text = f"demo: {done} of {len(self.arms)} arms done, {now - self.t0:.0f} s so far" + (
            f", about {_duration(eta)} left" if eta is not None and done < len(self.arms) else ""
        )
        if self._overall is not None:
            self._overall.set_description_str(text)
        elif now - self._said_status >= self.status_every and done < len(self.arms):
            self._said_status = now
            running = ", ".join(
                f"{a} {100 * self.fraction.get(a, 0):.0f}%" for a in self.started if a not in self.finished
            )
            print(text + (f" (running: {running})" if running else ""), file=self.stream, flush=True)

    def close(self) -> None:
        if self._overall is not None:
            self._overall.close()


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{max(5, round(seconds / 5) * 5):.0f} s"
    return f"{seconds / 60:.0f} min"


#: what each part of the demo imports beyond the core, and the extra that carries it (pyproject.toml)
NEEDS = {
    "the report (report.html)": ("matplotlib",),
    "the predictive arm's LSTM": ("torch", "safetensors"),
}
#: arms that forecast with the LSTM (the others need none of the predictor's models)
LSTM_ARMS = frozenset({"predictive"})
INSTALL_HINT = (
    'install the demo\'s extra with the CPU build of torch (README, "Installed as a package"): '
    "pip install -c constraints.txt torch --index-url https://download.pytorch.org/whl/cpu && "
    "pip install -c constraints.txt 'infercast[demo]'"
)


def missing(arms: list[str] | tuple[str, ...], importable=None) -> list[str]:
    """What the demo would miss for these arms, in words ("the report (report.html) needs matplotlib"); empty when
    everything is there.  Checked before any arm runs: an install without the plotting library ran 11.5 minutes and
    then failed writing the report, and one without torch ran the predictive arm on the Kalman baseline with one log
    line (issue 38)."""
    importable = importable or _importable
    out = []
    for what, modules in NEEDS.items():
        if what.startswith("the predictive") and not set(arms) & LSTM_ARMS:
            continue
        absent = [m for m in modules if not importable(m)]
        if absent:
            out.append(f"{what} needs {' and '.join(absent)}")
    return out


def lstm_refused(arms, model_file: str | None) -> str | None:
    """Why the predictive arm's LSTM would not load (its model file missing or broken), or None: said before any arm
    runs, never a quiet switch to the Kalman baseline an hour later."""
    if not set(arms) & LSTM_ARMS:
        return None
    from infercast.predictors.registry import load_lstm

    lstm, note = load_lstm(model_file)
    return None if lstm is not None else note


def _importable(module: str) -> bool:
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def _version() -> str:
    import infercast

    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=5,
                              cwd=Path(__file__).resolve().parent)  # fmt: skip
        commit = head.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    return f"infercast {infercast.__version__}" + (f", commit {commit}" if commit else "")


def _open_live(args: argparse.Namespace, arms: list[str], duration: float):
    """The live link (checked), or None without --prometheus; LiveError says what is wrong."""
    from infercast.simulator.demo.live import LIVE_ARMS, Live, LiveError, LiveOptions

    if not (args.prometheus or args.alertmanager):
        if args.speed != 1.0:
            raise LiveError("--speed paces the live arm: it needs --prometheus and --alertmanager")
        return None
    if not (args.prometheus and args.alertmanager):
        raise LiveError("--prometheus and --alertmanager go together: the page is read from what Alertmanager "
                        "delivers for the rules Prometheus evaluates")  # fmt: skip
    if not set(arms) & set(LIVE_ARMS):
        raise LiveError(f"--prometheus runs {', '.join(LIVE_ARMS)} live, and --arms leaves it out")
    opts = LiveOptions(args.prometheus, args.alertmanager, args.speed, args.exporter_listen, args.predictor_listen,
                       args.webhook_listen)  # fmt: skip
    live = Live(opts, say=lambda line: print(f"demo: {line}", file=sys.stderr, flush=True))
    if not getattr(args, "verbose", False):  # the live arm runs here: it logs what the in-memory arms' workers do
        logging.getLogger().setLevel(logging.WARNING)
    try:
        live.open()
    except BaseException:
        live.close()
        raise
    print(f"demo: {', '.join(LIVE_ARMS)} runs live through Prometheus {live.servers.shown_prometheus} and "
          f"Alertmanager {live.servers.shown_alertmanager} at {args.speed:g}x: {duration / args.speed:.0f} s of wall "
          "time; the other arms run in memory after it", file=sys.stderr, flush=True)  # fmt: skip
    return live


def _interrupted(live, out: Path, written: list[str]) -> str:
    """What an interrupt stopped and kept, in words (the live listeners are stopped here)."""
    said = []
    if live is not None:
        stopped = live.close()
        said.append((f"stopped the demo's {', '.join(stopped)}; " if stopped else "")
                    + "Prometheus and Alertmanager are left as they were")  # fmt: skip
    if written:
        said.append(f"the finished arms' files are in {out}/ ({', '.join(written)}); no summary.json or report.html")
    else:
        said.append("no arm had finished: nothing was written")
    return "; ".join(said)


def run(args: argparse.Namespace) -> int:
    from infercast.simulator.demo.live_check import LiveError
    from infercast.simulator.demo.report import attribution, live_note, render_html, text_table
    from infercast.simulator.demo.run import run_demo, stored_causal_plan, stored_hindsight_plan

    # `oracle`: the old name of perfect-forecast (infercast.simulator.control.driver.ALIASES)
    arms = [canonical(a.strip()) for a in (args.arms or ",".join(DEFAULT_ARMS)).split(",") if a.strip()]
    bad = [a for a in arms if a not in DEMO_ARMS]
    if bad or not arms:
        print(f"infercast demo: unknown arm(s) {', '.join(bad) or '(none given)'}; use {','.join(DEMO_ARMS)}",
              file=sys.stderr)  # fmt: skip
        return 2
    trace = None
    if args.trace:
        from infercast.simulator.replay.traces import TraceError, load_trace
        from infercast.simulator.twin.tracefleet import sized_trace_fleet

        cfg = load_config(args.config or resolve_scenario("flash-sale"))
        try:
            trace = load_trace(args.trace, lengths=cfg.scenario.lengths if cfg.scenario else None, seed=args.seed or 0)
        except TraceError as e:
            print(f"infercast demo: {e}", file=sys.stderr)
            return 2
        cfg, notes = sized_trace_fleet(trace, cfg)
        name = Path(args.trace).name
        print(f"demo: {name}: " + "; ".join(notes), file=sys.stderr)
    else:
        name = args.scenario or "flash-sale"
        from infercast.simulator.twin.variants import load_scenario

        cfg = load_scenario(name)
        if cfg.scenario is None:
            raise ConfigError(f"{name}: the fleet file has no scenario: section")
    if problems := missing(arms):
        print(f"infercast demo: cannot run: {'; '.join(problems)}; {INSTALL_HINT}", file=sys.stderr)
        return 2
    if why := lstm_refused(arms, cfg.predictor.model_file):
        print(f"infercast demo: cannot run the predictive arm: {why} (it would forecast KV usage with a baseline "
              "instead); fix the model file, or leave predictive out with --arms", file=sys.stderr)  # fmt: skip
        return 2
    seed = args.seed if args.seed is not None else (cfg.scenario.seed if cfg.scenario else 0)
    if args.arms is None and trace is None and stored_causal_plan(name, seed) is not None:
        arms.append("causal")
    if args.arms is None and trace is None and stored_hindsight_plan(name, seed) is not None:
        arms.append("hindsight")
    started = time.perf_counter()
    out = Path(args.out)
    written: list[str] = []

    def done(r) -> None:  # each arm's files as soon as it is done: an interrupt later loses none of them
        r.write(out / r.name)
        written.append(r.name)

    live = None
    progress = Progress(not args.no_progress, arms=arms, jobs=args.jobs)
    try:
        live = _open_live(args, arms, trace.duration_s if trace is not None else cfg.scenario.duration_seconds)
        result = run_demo(cfg, arms, seed, name, progress, trace=trace, jobs=args.jobs, live=live,
                          done=done)  # fmt: skip
    except (ValueError, LiveError) as e:
        if isinstance(e, ConfigError):
            raise
        print(f"infercast demo: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"\ninfercast demo: interrupted; {_interrupted(live, out, written)}", file=sys.stderr, flush=True)
        return 130
    finally:
        progress.close()
        if live is not None:
            live.close()
    summary = result.summary()
    summary["wall_seconds"] = round(time.perf_counter() - started, 1)
    summary["command"] = "infercast demo " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["demo"] else "infercast demo"
    summary["version"] = _version()
    write_json(out / "summary.json", summary)
    (out / "report.html").write_text(render_html(result, summary))
    if args.json:
        print(to_json(summary))
    else:
        print(text_table(result))
        print(f"\n{attribution(summary['arms'])}")
        if note := live_note(summary):
            print(f"\n{note}")
        print(f"\nreport: {out / 'report.html'}  summary: {out / 'summary.json'}  ({summary['wall_seconds']:.0f} s)")
    return 0
