"""The engine lab's bench: the same arrivals against real vLLM engines under none and predictive control, the twin
on the same arrivals, and the issue's targets checked run by run.

    .venv/bin/python bench/lab.py [--runs N] [--publish]             # run the lab (both cores, ~45 min for 3 runs)
    .venv/bin/python bench/lab.py --rescore runs/lab-bench/raw.json --publish   # the twin and tables again

One lab (2 engines, docs/lab.md) serves every run; between runs the proxy's limit is lifted and the engines and the
page are left to settle (`infercast.simulator.lab.run.settle`).  The trace is tests/data's slice of Azure's 2023
conversation trace (its ATTRIBUTION.md), 600 s.

Slices, chosen before any run was scored (this session saw only the first 60 s, the calibration slice, while
building; the previous session's slices 120-510 s were scored with other surges and are not reused as they were):

- `calibration`: seconds 0-60 as they are, control none: not scored.  It measures the engines' step time (their
  own inter-token latency and prefill rate) that the twin is given.
- `ramp`: seconds 60-260 with a surge that ramps from 1x to 5x over 180 s from second 10 (`10,190,5,180`).
- `step`: seconds 260-380 with a step surge to 5x at second 20 for 90 s (`20,90,5`).

(5x, not the previous session's 4x: on the calibration slice a 4x step preempted only twice on the 32-block pool.)
- `calm`: seconds 395-595 as they are (no surge), as long as the ramp slice.  (First written as 400-600, which the
  trace's 599.97 s do not hold: the bench stopped there before the calm slice ran, and it was moved 5 s earlier.)

The calm slice's runs come first, right after the calibration; the surge slices then run in rounds (ramp, step).
Until 2026-12-07 the calm slice ran last in each round, after the step surge, and two of its three runs started
with the step's page still firing.

The twin (`infercast.simulator.lab.twin`) replays each `none` run's own arrivals on a twin of the lab's engines and is
compared with it: KV-usage mean absolute difference, preemptions, TTFT P50/P99.  Each run's lab report is what
`infercast lab run --json` prints; the raw series are kept in runs/lab-bench/raw.json (not published), the tables
are rendered from docs/results/lab.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from argparse import Namespace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from results import publish  # noqa: E402

TRACE = ROOT / "tests" / "data" / "traces" / "azure" / "AzureLLMInferenceTrace_conv.csv"
#: name -> (start, seconds, surge or None); chosen before scoring (module docstring)
CALIBRATION = (0.0, 60.0, None)
SLICES = {
    "ramp": (60.0, 200.0, "10,190,5,180"),
    "step": (260.0, 120.0, "20,90,5"),
    "calm": (395.0, 200.0, None),
}
CONTROLS = ("none", "predictive")
KEYS = ("requests", "completed", "failed", "preemptions", "kv_peak", "ttft_p50_ms", "ttft_p99_ms", "goodput_rps",
        "first_preemption_s", "page_s", "page_lead_seconds")  # fmt: skip
#: kept out of the published JSON (in raw.json only)
RAW_KEYS = ("kv_series", "client", "prometheus_series")


def _cell(v) -> str:
    return "–" if v is None else (f"{v:g}" if isinstance(v, float) else str(v))


def first_action(r: dict) -> float | None:
    return next((a["at_s"] for a in r["actions"] if a["status"] == "applied"), None)


def targets(r: dict, slices: dict, scrape_s: float, for_s: float) -> dict[str, bool | None]:
    """The issue's per-run targets that one run can be judged on."""
    surge = slices[r["slice"]][2]
    out: dict[str, bool | None] = {}
    if r["slice"] == "calm":
        # a run that started unsettled started with the page still firing from the slice before: not a calm run
        out["calm: no page"] = r["page_s"] is None and bool(r.get("settled"))
    if r["slice"] == "ramp":
        # the page at least 60 s before the first preemption; a run that never preempted needs the page only
        lead_ok = r["page_s"] is not None and (
            r["first_preemption_s"] is None or r["first_preemption_s"] - r["page_s"] >= 60.0
        )
        out["ramp: page >= 60 s before the first preemption"] = lead_ok
        # stricter: a page before the ramp has begun is the noise's, not the ramp's
        onset = float(surge.split(",")[0])
        out["ramp: the same, the page after the ramp's onset"] = lead_ok and r["page_s"] >= onset
    if r["slice"] == "step":
        onset = float(surge.split(",")[0])
        bound = onset + scrape_s + for_s
        out["step: page within scrape + for: of the onset"] = r["page_s"] is not None and onset <= r["page_s"] <= bound
        if r["control"] == "predictive":
            act = first_action(r)
            out["step: first action within scrape + for: of the onset"] = act is not None and onset <= act <= bound
    return out


def pairs(runs: list[dict]) -> list[dict]:
    """predictive against none on the same arrivals (same slice and run number)."""
    out = []
    by = {(r["slice"], r["run"], r["control"]): r for r in runs}
    for (sl, run, control), p in sorted(by.items()):
        n = by.get((sl, run, "none"))
        if control != "predictive" or n is None:
            continue
        out.append(
            {
                "slice": sl,
                "run": run,
                "preemptions_none": n["preemptions"],
                "preemptions_predictive": p["preemptions"],
                "ttft_p99_none": n["ttft_p99_ms"],
                "ttft_p99_predictive": p["ttft_p99_ms"],
                "fewer_preemptions": p["preemptions"] < n["preemptions"],
                "p99_no_worse": p["ttft_p99_ms"] is not None
                and n["ttft_p99_ms"] is not None
                and p["ttft_p99_ms"] <= n["ttft_p99_ms"],
            }
        )
    return out


def within_30pct(a: int, b: int) -> bool:
    """Two preemption counts within 30% of the larger (the issue's rule; two zeros agree)."""
    return abs(a - b) <= 0.3 * max(a, b) if max(a, b) > 0 else True


def twin_rows(raw_runs: list[dict], calibration: dict, engines: int, shape) -> tuple[list[dict], dict]:
    """The twin on each `none` run's arrivals, beside the lab."""
    from infercast.simulator.lab.twin import kv_mad, measured_from, replay_on_twin, twin_fleet

    def kv_mean(series: list) -> float:
        return sum(kv for _, _, kv in series) / len(series) if series else 0.0

    m = measured_from(calibration, engines)
    cfg = twin_fleet(engines, shape, m)
    rows = []
    for r in raw_runs:
        if r["control"] != "none":
            continue
        seconds = r["seconds"]
        tw = replay_on_twin(r["client"], seconds, cfg)
        mad = kv_mad(r["kv_series"], tw["kv_series"], seconds)
        mad10 = kv_mad(r["kv_series"], tw["kv_series"], seconds, window_s=10)
        mean_lab = kv_mean(r["kv_series"])
        mean_twin = kv_mean(tw["kv_series"])
        lab_pre, twin_pre = r["preemptions"], tw["preemptions"]
        within = within_30pct(lab_pre, twin_pre)
        rows.append(
            {"slice": r["slice"], "run": r["run"], "kv_mad": round(mad, 3), "kv_mad_10s": round(mad10, 3),
             "kv_mean_lab": round(mean_lab, 3), "kv_mean_twin": round(mean_twin, 3), "preemptions_lab": lab_pre,
             "preemptions_twin": twin_pre, "preemptions_within_30pct": within, "ttft_p50_lab": r["ttft_p50_ms"],
             "ttft_p50_twin": tw["ttft_p50_ms"], "ttft_p99_lab": r["ttft_p99_ms"], "ttft_p99_twin": tw["ttft_p99_ms"],
             "kv_peak_lab": r["kv_peak"], "kv_peak_twin": tw["kv_peak"], "oom_twin": tw["oom_events"]}
        )  # fmt: skip
    return rows, m.as_dict()


def arrivals_of(run: dict) -> list[tuple]:
    """A run's arrivals as the load planned them: (planned time, prompt tokens, output tokens), in time order."""
    return sorted((row[0], row[4], row[5]) for row in run["client"])


def lab_vs_lab_rows(raw_runs: list[dict]) -> list[dict]:
    """The reference for the twin's comparison: every two `none` runs of one slice, which replay the same arrivals,
    compared with each other as the twin is compared with each (the same KV MAD, preemptions and 30% rule).  What
    the lab's own run-to-run spread is, no twin can be asked to beat."""
    from infercast.simulator.lab.twin import kv_mad

    none = [r for r in raw_runs if r["control"] == "none"]
    rows = []
    for i, a in enumerate(none):
        for b in none[i + 1 :]:
            if a["slice"] != b["slice"]:
                continue
            if arrivals_of(a) != arrivals_of(b):  # a changed load plan would make the pair say nothing
                raise SystemExit(f"lab bench: the {a['slice']} runs {a['run']} and {b['run']} replayed other arrivals")
            pa, pb = a["preemptions"], b["preemptions"]
            within = within_30pct(pa, pb)
            rows.append(
                {"slice": a["slice"], "runs": f"{a['run']} vs {b['run']}",
                 "kv_mad": round(kv_mad(a["kv_series"], b["kv_series"], a["seconds"]), 3),
                 "kv_mad_10s": round(kv_mad(a["kv_series"], b["kv_series"], a["seconds"], window_s=10), 3),
                 "preemptions_a": pa, "preemptions_b": pb, "preemptions_within_30pct": within}
            )  # fmt: skip
    return sorted(rows, key=lambda r: (r["slice"], r["runs"]))


# --- tables -----------------------------------------------------------------------------------------------------
def table_runs(result: dict) -> str:
    lines = [
        "| slice | control | run | load avg | settled | requests | failed | preemptions | KV peak | TTFT P50 ms "
        "| TTFT P99 ms | goodput rps | first preemption s | page s | page lead s | first action s |",
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result["runs"]:
        settled = "yes" if r.get("settled") else "no"
        measured = [r[k] for k in KEYS if k != "completed"]
        cells = [r["slice"], r["control"], r["run"], r.get("load_avg"), settled, *measured, first_action(r)]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def table_targets(result: dict) -> str:
    lines = ["| target | runs met | of |", "|---|---:|---:|"]
    for name, (met, of) in result["targets"].items():
        lines.append(f"| {name} | {met} | {of} |")
    return "\n".join(lines)


def table_twin(result: dict) -> str:
    t = result["twin"]
    m = t["measured"]
    lines = [
        f"Twin given the lab's pool and the step time its engines measured on the calibration slice: inter-token "
        f"{m['inter_token_ms']} ms, prefill {m['prefill_tokens_per_second']} tokens/s.",
        "",
        "| slice | run | KV MAD | KV MAD, 10 s means | KV mean lab | twin | preemptions lab | twin | within 30% "
        "| TTFT P50 ms lab | twin | TTFT P99 ms lab | twin | KV peak lab | twin |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in t["rows"]:
        cells = [r["slice"], r["run"], r["kv_mad"], r["kv_mad_10s"], r["kv_mean_lab"], r["kv_mean_twin"],
                 r["preemptions_lab"], r["preemptions_twin"],
                 "yes" if r["preemptions_within_30pct"] else "no", r["ttft_p50_lab"], r["ttft_p50_twin"],
                 r["ttft_p99_lab"], r["ttft_p99_twin"], r["kv_peak_lab"], r["kv_peak_twin"]]  # fmt: skip
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    ref = t.get("lab_vs_lab")
    if ref:
        lines += [
            "",
            "The lab against itself, the reference: two `none` runs of the same slice, the same arrivals, compared the "
            "same way.",
            "",
            "| slice | runs | KV MAD | KV MAD, 10 s means | preemptions | within 30% |",
            "|---|---|---:|---:|---:|---|",
        ]
        for r in ref:
            pre = f"{r['preemptions_a']} vs {r['preemptions_b']}"
            within = "yes" if r["preemptions_within_30pct"] else "no"
            cells = [r["slice"], r["runs"], r["kv_mad"], r["kv_mad_10s"], pre, within]
            lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines)


def table_setup(result: dict) -> str:
    s = {k: ("–" if v is None else v) for k, v in result["setup"].items()}

    def sec(key: str) -> str:
        v = s.get(key, "–")
        return v if isinstance(v, str) else f"{v:.0f}"

    return "\n".join(
        [
            "| | |",
            "|---|---|",
            f"| engine | {s['engine']} |",
            f"| engines, KV pool each | {s['engines']} x {s['blocks']} blocks of {s['block_size']} tokens |",
            f"| lab start to engines ready | {sec('start_seconds')} s |",
            f"| lab start to first result (the calibration run's report) | {sec('first_result_seconds')} s |",
            f"| CPU seconds, whole bench (this process and its children) | {sec('cpu_seconds')} |",
            f"| wall seconds, whole bench | {sec('wall_seconds')} |",
            f"| load average (1 min) at the start of the runs, min-max | {s['load_min']:g}-{s['load_max']:g} |",
            f"| runs per slice and control | {s['runs']} |",
            f"| install (scripts/install-engines.sh) | {s['install']} |",
        ]
    )


TABLES = {"runs": table_runs, "setup": table_setup, "targets": table_targets, "twin": table_twin}


def score(raw: dict) -> dict:
    """The published result from the raw runs: per-run rows without their series, targets, the twin."""
    from infercast.simulator.lab.engines import EngineShape

    setup = raw["setup"]
    slices = {k: tuple(v) for k, v in setup["slices"].items()}
    runs = [{k: v for k, v in r.items() if k not in RAW_KEYS} for r in raw["runs"]]
    counts: dict[str, list[int]] = {}

    def tally(checks: dict[str, bool | None]) -> None:  # each target: (runs met, runs it applies to)
        for name, ok in checks.items():
            c = counts.setdefault(name, [0, 0])
            c[0] += bool(ok)
            c[1] += 1

    for r in runs:
        tally(targets(r, slices, setup["scrape_seconds"], setup["for_seconds"]))
    prs = pairs(runs)
    for p in prs:
        tally({f"{p['slice']}, predictive: fewer preemptions than none": p["fewer_preemptions"],
               f"{p['slice']}, predictive: TTFT P99 no worse than none": p["p99_no_worse"]})  # fmt: skip
    shape = EngineShape(blocks=setup["blocks"], block_size=setup["block_size"], max_model_len=setup["max_model_len"],
                        max_num_seqs=setup["max_num_seqs"])  # fmt: skip
    rows, measured = twin_rows(raw["runs"], raw["calibration"], setup["engines"], shape)
    for r in rows:
        tally({f"{r['slice']}, twin vs lab: KV MAD <= 0.10": r["kv_mad"] <= 0.10,
               f"{r['slice']}, twin vs lab: preemptions within 30%": r["preemptions_within_30pct"]})  # fmt: skip
    reference = lab_vs_lab_rows(raw["runs"])
    for r in reference:  # the same two checks, the lab against itself: what no twin can be asked to beat
        ref = f"{r['slice']}, reference, lab vs lab"
        tally({f"{ref}: KV MAD <= 0.10": r["kv_mad"] <= 0.10,
               f"{ref}: preemptions within 30%": r["preemptions_within_30pct"]})  # fmt: skip
    return {
        "setup": setup,
        "runs": runs,
        "pairs": prs,
        "targets": {k: tuple(v) for k, v in counts.items()},
        "twin": {"measured": measured, "rows": rows, "lab_vs_lab": reference},
    }


def run_lab(args: argparse.Namespace) -> dict:
    import resource

    from infercast.simulator.lab.cli import load_plan
    from infercast.simulator.lab.run import run_load, settle
    from infercast.simulator.lab.stack import LabSettings, start_lab
    from infercast.simulator.replay.traces import Surge

    settings = LabSettings(engines=2)
    wall0 = time.monotonic()
    runs, loads, done = [], [], []
    partial = args.dir.parent / f"{args.dir.name}-partial.json"

    def plan_of(start: float, seconds: float, surge: str | None):
        ns = Namespace(trace=str(TRACE), start=start, seconds=seconds, rate_scale=1.0, seed=0,
                       surge=[Surge.parse(surge)] if surge else [])  # fmt: skip
        return load_plan(ns, settings.shape.max_model_len)

    def one(lab, name: str, start: float, seconds: float, surge: str | None, control: str, run: int) -> dict:
        plan, factor, _ = plan_of(start, seconds, surge)
        settled = settle(lab, plan)
        load = os.getloadavg()[0]
        loads.append(load)
        report = run_load(lab, plan, control, duration_s=seconds)
        report.update(slice=name, run=run, settled=settled, token_scale=round(factor, 4), seconds=seconds,
                      load_avg=round(load, 1))  # fmt: skip
        print({k: report[k] for k in ("slice", "control", "run", "load_avg", *KEYS)}, flush=True)
        done.append(report)
        partial.write_text(json.dumps({"calibration": done[0], "runs": done[1:]}))  # what a crash would lose
        return report

    # every slice's window checked against the trace before the lab starts (a bad one stops the bench at once)
    for start, seconds, surge in (CALIBRATION, *SLICES.values()):
        plan_of(start, seconds, surge)
    t = time.monotonic()
    with start_lab(settings, args.dir, log=print) as lab:
        started = time.monotonic() - t
        calibration = one(lab, "calibration", *CALIBRATION, "none", 0)
        first_result = time.monotonic() - t
        # the calm slice's runs first, before any surge: after a surge run the page was still firing (the
        # predictor's band remembers the surge's swings), and a calm run that starts paged judges the page's
        # resolve time after a surge, not a calm slice.  The surge slices then run in rounds, as before.
        names = args.slices.split(",")
        calm = [n for n in names if SLICES[n][2] is None]
        order = [(n, run) for n in calm for run in range(1, args.runs + 1)]
        order += [(n, run) for run in range(1, args.runs + 1) for n in names if n not in calm]
        for name, run in order:
            start, seconds, surge = SLICES[name]
            for control in ("predictive",) if surge is None else CONTROLS:
                runs.append(one(lab, name, start, seconds, surge, control, run))
    usage = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {
        "setup": _setup(
            calibration["engine"],
            settings,
            {
                "start_seconds": started,
                "first_result_seconds": first_result,
                "cpu_seconds": sum(u.ru_utime + u.ru_stime for u in usage),
                "wall_seconds": time.monotonic() - wall0,
            },
            loads,
            args.runs,
        ),
        "calibration": calibration,
        "runs": runs,
    }


def partial_setup(raw: dict, given: str | None) -> dict:
    """The setup of a bench stopped before its end: the lab's shape and slices as this file has them, what was
    measured from outside (`given`: JSON of start_seconds, first_result_seconds, cpu_seconds, wall_seconds), the
    load averages from the runs."""
    from infercast.simulator.lab.stack import LabSettings

    loads = [r["load_avg"] for r in raw["runs"]]
    runs = max((r["run"] for r in raw["runs"]), default=0)
    return _setup(raw["calibration"]["engine"], LabSettings(engines=2), json.loads(given or "{}"), loads, runs)


def _setup(engine: object, settings, measured: dict, loads: list[float], runs: int) -> dict:
    """The bench's setup as published: the lab's shape, what was measured of the bench itself, the load."""
    return {
        "engine": engine,
        "engines": settings.engines,
        "blocks": settings.shape.blocks,
        "block_size": settings.shape.block_size,
        "max_model_len": settings.shape.max_model_len,
        "max_num_seqs": settings.shape.max_num_seqs,
        "scrape_seconds": settings.scrape_seconds,
        "for_seconds": settings.forecast_for_seconds,
        **measured,
        "load_min": round(min(loads), 1),
        "load_max": round(max(loads), 1),
        "runs": runs,
        "install": "194 s, 3.5 GB (pip's cache warm; ~11 min cold per ../shared/ENGINES.md's trial)",
        "trace": TRACE.name,
        "calibration_slice": list(CALIBRATION),
        "slices": {k: list(v) for k, v in SLICES.items()},
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="runs of each slice and control (default 3)")
    p.add_argument("--slices", default=",".join(SLICES), help="which slices (default: all)")
    p.add_argument("--dir", type=Path, default=ROOT / "runs" / "lab-bench")
    p.add_argument("--rescore", type=Path, default=None, help="score a raw.json of an earlier run (no lab started)")
    p.add_argument("--setup", default=None, help="with --rescore of a partial file: JSON of what was measured outside")
    p.add_argument("--publish", action="store_true", help="write docs/results/lab.json and the tables")
    args = p.parse_args(argv)
    if args.rescore is not None:
        raw = json.loads(args.rescore.read_text())
        if "setup" not in raw:  # a partial file (runs saved as they ended, the bench stopped before its end)
            raw["setup"] = partial_setup(raw, args.setup)
    else:
        raw = run_lab(args)
        out = args.dir.parent / f"{args.dir.name}-raw.json"
        out.write_text(json.dumps(raw))
        print(f"raw runs in {out}")
    result = score(raw)
    if args.publish:
        publish("lab", result, TABLES)
    for render in TABLES.values():
        print(render(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
