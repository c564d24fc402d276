"""`bench/control.py`'s own logic, without running the twin: its trace surges fit their traces, `--quick` is one
seed and a few arms, and the tables call a plan a bound only where its single-lever check passed, with `causal`
beside `hindsight` and the gaps reactive -> causal -> hindsight."""

from __future__ import annotations

from bench.control import (
    QUICK_ARMS,
    QUICK_SCENARIOS,
    SCENARIOS,
    check_text,
    import_hindsight,
    merge_cell,
    read_cells,
    table_arms,
    table_plans,
    wall_times,
)
from infercast.config import load_config
from infercast.simulator.replay.traces import Surge, load_trace

from .conftest import DATA, REPO


def test_three_surges_from_three_different_traces_fit_inside_their_traces():
    cfg = load_config(REPO / "examples" / "flash-sale.yaml")
    surged = [sc for sc in SCENARIOS if sc.surges]
    assert len(surged) >= 3 and len({sc.trace.split("/")[0] for sc in surged}) >= 3
    for sc in surged:
        trace = load_trace(DATA / "traces" / sc.trace, lengths=cfg.scenario.lengths, seed=0)
        if sc.window:
            trace = trace.window(*sc.window)
        trace = trace.scaled(sc.time_scale, sc.rate_scale, seed=0)
        for x in sc.surges:
            Surge(*x).check(trace.duration_s, sc.name)  # raises when the window is outside the replayed trace
    assert set(QUICK_SCENARIOS) <= {sc.name for sc in SCENARIOS} and "hindsight" in QUICK_ARMS


def _row(urgent: float, **kw) -> dict:
    keys = ("goodput_rps", "token_goodput_tps", "p99_latency_ms", "p99_latency_ms_pre", "oom_events", "gpu_seconds",
            "actions", "offered", "served", "rejected", "failed", "in_flight")  # fmt: skip
    return {"urgent_goodput_rps": urgent, **dict.fromkeys(keys, 1.0), "simulated_seconds": 1800.0,
            "false_actions": 0, "wall_s": 10.0, **kw}  # fmt: skip


def _result() -> dict:
    checked = {"passed": True, "neighbours": 21, "beaten_by": [], "passes": 2}
    failed = {"passed": False, "neighbours": 21, "beaten_by": ["memory_limit 0.7"], "passes": 3}
    cost = {"runs": 40, "pruned": 3, "simulated_seconds": 1, "replay_seconds": 2, "saved_share": 0.31,
            "wall_seconds": 600.0, "snapshots": 5, "cached": 2}  # fmt: skip
    cells = [
        {"scenario": "s", "seed": 0, "wall_s": 700.0, "arms": {
            "reactive": _row(97.0),
            "causal": _row(114.0, plan="from 615 s: b >= 4", check=checked),
            "hindsight": _row(118.0, plan="from 510 s: b >= 4", candidates=40, check=failed, search_cost=cost),
        }},
    ]  # fmt: skip
    return {"scenarios": ["s"], "arms": ["reactive", "causal", "hindsight"], "seeds": [0], "search": "fast",
            "cells": cells, "wall_s": 700.0, "machine": "m"}  # fmt: skip


def test_a_plan_is_a_bound_only_where_its_check_passed():
    assert check_text({"check": None}) == "best found (not checked)"
    assert check_text({"check": {"passed": True, "neighbours": 21}}).startswith("bound")
    text = table_plans(_result())
    assert "best found (beaten by memory_limit 0.7)" in text  # hindsight's plan failed its check
    assert "from 615 s: b >= 4 (bound (no single-lever move of 21 beats it))" in text
    assert "| +17.00 | +4.00 |" in text  # reactive -> causal, causal -> hindsight
    assert "40 runs (3 pruned, 2 answered again), 31% of replay saved, 600 s" in text


def test_causal_sits_beside_hindsight_and_is_captured_against_it():
    lines = table_arms(_result()).splitlines()
    arms = [line.split("|")[2].strip() for line in lines[2:5]]
    assert arms == ["`reactive`", "`causal`", "`hindsight`"]
    assert [line.split("|")[3].strip() for line in lines[2:5]] == ["0"] * 3  # the seeds each row covers
    captured = [line.split("|")[-3].strip() for line in lines[2:5]]
    assert captured == ["0%", f"{17 / 21:.0%}", "100%"]
    assert [line.split("|")[-2].strip() for line in lines[2:5]] == [""] * 3  # no guarded search in this cell
    assert "changes" not in lines[0]  # the hook's columns only where a run reports them


def test_the_guarded_search_has_rows_of_its_own_and_the_arms_are_captured_against_it_too():
    """`hindsight-guarded` (the searches never loosening a guard past the fleet file) sits after hindsight with its
    causal plan; every arm's gain is also read against it, and its plans get a table of their own."""
    result = _result()
    arms = result["cells"][0]["arms"]
    arms["causal-guarded"] = _row(105.0, plan="from 615 s: b >= 3", check=None)
    arms["hindsight-guarded"] = _row(107.0, plan="from 510 s: b >= 3", candidates=30, check=None)
    result["arms"] += ["causal-guarded", "hindsight-guarded"]
    lines = table_arms(result).splitlines()
    assert lines[0].endswith("| captured | captured within the guards |")
    rows = {line.split("|")[2].strip(): line.split("|") for line in lines[2:7]}
    assert rows["`causal`"][-3].strip() == f"{17 / 21:.0%}" and rows["`causal`"][-2].strip() == f"{17 / 10:.0%}"
    assert rows["`causal-guarded`"][-2].strip() == "80%" and rows["`hindsight-guarded`"][-2].strip() == "100%"
    assert "hindsight-guarded" in lines[-1]
    text = table_plans(result, "hindsight-guarded")
    assert "| hindsight-guarded's plan |" in text and "from 510 s: b >= 3" in text and "from 615 s: b >= 3" in text
    assert "| +8.00 | +2.00 |" in text
    # the unguarded plans beat the guarded one, but do not count against it: they loosen the guards
    assert text.splitlines()[2].endswith("| none |")


def test_per_arm_changes_and_flaps_get_columns_where_the_runs_report_them():
    result = _result()
    for row in result["cells"][0]["arms"].values():
        row |= {"changes": 3, "flaps": 1}
    head = table_arms(result).splitlines()[0]
    assert "| changes | flaps |" in head


def test_changes_and_flaps_as_the_ledger_reports_them_are_counted_by_their_total():
    # a run's summary carries them as actuators/ledger.py writes them; the table failed on them with a TypeError
    result = _result()
    for row in result["cells"][0]["arms"].values():
        row |= {
            "changes": {"total": 3, "by_setting": {"scale_pool:replicas:v4-short": 3}},
            "flaps": {"total": 1, "by_setting": {"scale_pool:replicas:v4-short": 1}, "dwell_seconds": 300.0},
        }
    lines = table_arms(result).splitlines()
    assert "| changes | flaps |" in lines[0]
    assert "| 3.0 | 1.0 |" in lines[2]


def test_the_bench_prints_its_wall_time_per_arm_and_per_cell():
    text = wall_times(_result())
    assert "s seed 0: 700; hindsight's search 40 runs" in text
    assert "reactive 10, hindsight 10" in text and "whole bench: 700 s" in text


def test_an_arm_measured_on_no_seed_reads_not_measured_and_each_row_names_its_seeds():
    """A partial run of the bench publishes what it measured: an arm with no cell says "not measured" (never an
    older run's figures), a row measured on seeds 0 and 2 says so, and captured gain pairs the seeds where the arm,
    reactive and hindsight were all measured."""
    result = _result()
    result["arms"] = ["reactive", "predictive", "causal", "hindsight"]
    result["seeds"] = [0, 1, 2]
    more = {"scenario": "s", "seed": 2, "wall_s": 10.0, "arms": {"reactive": _row(99.0), "predictive": _row(100.0)}}
    result["cells"].append(more)
    lines = table_arms(result).splitlines()
    rows = {line.split("|")[2].strip(): line for line in lines[2:6]}
    assert rows["`predictive`"].split("|")[3:5] == [" 2 ", " 100.0 ± 0.0 "]
    assert "| 0, 2 | 98.0 ± 1.0 |" in rows["`reactive`"]
    assert rows["`hindsight`"].split("|")[3].strip() == "0"
    assert rows["`predictive`"].split("|")[-2].strip() == ""  # no seed with hindsight beside it: nothing to capture
    result["arms"].insert(1, "scheduled")
    lines = table_arms(result).splitlines()
    (missing,) = [line for line in lines if "`scheduled`" in line]
    assert "| none | not measured |" in missing and missing.count("|") == lines[0].count("|")
    assert "1 rows not measured" in lines[-1]


def test_the_cells_file_keeps_each_arm_measured_and_a_later_run_adds_the_others(tmp_path):
    """The plan-based arms measured first, the loop arms later: both kept for the same scenario and seed; a line of
    another search or another number of passes is not mixed in."""
    import json

    path = tmp_path / "cells.jsonl"
    lines = [
        {"scenario": "s", "seed": 0, "search": "fast", "wall_s": 100.0, "arms": {"reactive": _row(97.0),
                                                                                  "hindsight": _row(118.0)}},
        {"scenario": "s", "seed": 0, "search": "fast", "max_passes": 3, "wall_s": 50.0,
         "arms": {"reactive": _row(97.0), "predictive": _row(114.0)}},
        {"scenario": "s", "seed": 0, "search": "quick", "wall_s": 5.0, "arms": {"hindsight": _row(1.0)}},
        {"scenario": "s", "seed": 0, "search": "fast", "max_passes": 1, "wall_s": 5.0,
         "arms": {"hindsight": _row(2.0)}},
    ]  # fmt: skip
    path.write_text("".join(json.dumps(x) + "\n" for x in lines) + '{"scenario": "s", "seed": 1, "ar')  # cut short
    done = read_cells(path, "fast", 3)
    assert set(done) == {("s", 0)}
    cell = done[("s", 0)]
    assert set(cell["arms"]) == {"reactive", "hindsight", "predictive"} and cell["wall_s"] == 150.0
    assert cell["arms"]["hindsight"]["urgent_goodput_rps"] == 118.0
    merge_cell(done, {"scenario": "s", "seed": 1, "wall_s": 1.0, "arms": {"reactive": _row(1.0)}})
    assert set(done) == {("s", 0), ("s", 1)}


def test_the_quick_bench_runs_each_arm_of_a_cell_as_its_own_job():
    """`--quick`: the sale's slow hindsight search and its predictive run go to different cores (each with its own
    reactive run); a full bench keeps one job per cell."""
    from bench.control import arm_groups

    assert arm_groups(("reactive", "predictive", "hindsight"), split=True) == [
        ("reactive", "predictive"),
        ("reactive", "hindsight"),
    ]
    assert arm_groups(("reactive", "predictive", "hindsight"), split=False) == [("reactive", "predictive", "hindsight")]
    assert arm_groups(("reactive",), split=True) == [("reactive",)]


def test_an_earlier_runs_hindsight_is_taken_only_where_reactive_is_the_same_and_is_marked(tmp_path):
    """`--measured-only --import-hindsight docs/results/control.json`: a cell measured without hindsight takes the
    earlier run's plan only where its own `reactive` equals that run's; the row and the plan say so (†), and a cell
    whose reactive moved keeps no hindsight (its row reads what it measured, nothing borrowed)."""
    import json

    plan = _row(118.0, plan="from 510 s: b >= 4", candidates=24)
    earlier = {"search": "fast", "cells": [
        {"scenario": "s", "seed": 0, "arms": {"reactive": _row(97.0), "hindsight": plan}},
        {"scenario": "s", "seed": 1, "arms": {"reactive": _row(95.0), "hindsight": _row(117.0, plan="p")}},
    ]}  # fmt: skip
    path = tmp_path / "control.json"
    path.write_text(json.dumps(earlier))
    done: dict = {}
    merge_cell(done, {"scenario": "s", "seed": 0, "wall_s": 1.0, "arms": {"reactive": _row(97.0),
                                                                          "predictive": _row(114.0)}})  # fmt: skip
    merge_cell(done, {"scenario": "s", "seed": 1, "wall_s": 1.0, "arms": {"reactive": _row(96.0)}})  # moved
    assert import_hindsight(done, path, [("s", 0), ("s", 1)]) == 1
    assert "hindsight" not in done[("s", 1)]["arms"]
    h = done[("s", 0)]["arms"]["hindsight"]
    assert h["urgent_goodput_rps"] == 118.0 and "before hindsight's search was widened" in h["provenance"]
    assert import_hindsight(done, path, [("s", 0), ("s", 1)]) == 0  # a cell with a hindsight keeps its own
    result = {"scenarios": ["s"], "arms": ["reactive", "predictive", "hindsight"], "seeds": [0, 1], "search": "fast",
              "cells": [done[("s", 0)], done[("s", 1)]], "wall_s": 2.0, "machine": "m"}  # fmt: skip
    arms = table_arms(result)
    assert "| s | `hindsight` † | 0 | 118.0" in arms and "| s | `predictive` | 0 |" in arms
    assert "† not measured in this run: an earlier run of this bench" in arms
    assert f"{17 / 21:.0%}" in arms  # predictive's captured gain against the earlier plan, on seed 0 only
    assert "best found (not checked, an earlier run's †)" in table_plans(result)
    # beside a cell whose search found a causal plan, the earlier run's cell says causal was not measured there
    beside = {**result, "cells": [*_result()["cells"], {**done[("s", 0)], "scenario": "t"}]}
    (row,) = [line for line in table_plans(beside).splitlines() if line.startswith("| t |")]
    assert "| not measured |" in row and "no onset" not in row
