"""`bench/control.py`'s own logic, without running the twin: its trace surges fit their traces, `--quick` is one
seed and a few arms, and the tables call a plan a bound only where its single-lever check passed, with `causal`
beside `hindsight` and the gaps reactive -> causal -> hindsight."""

from __future__ import annotations

from bench.control import (
    QUICK_ARMS,
    QUICK_SCENARIOS,
    SCENARIOS,
    check_text,
    table_arms,
    table_plans,
    wall_times,
)
from infercast.config import load_config
from infercast.traces import Surge, load_trace

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
    assert "40 runs (3 pruned), 31% of replay saved, 600 s" in text


def test_causal_sits_beside_hindsight_and_is_captured_against_it():
    lines = table_arms(_result()).splitlines()
    arms = [line.split("|")[2].strip() for line in lines[2:5]]
    assert arms == ["`reactive`", "`causal`", "`hindsight`"]
    captured = [line.split("|")[-2].strip() for line in lines[2:5]]
    assert captured == ["0%", f"{17 / 21:.0%}", "100%"]
    assert "changes" not in lines[0]  # the hook's columns only where a run reports them


def test_per_arm_changes_and_flaps_get_columns_where_the_runs_report_them():
    result = _result()
    for row in result["cells"][0]["arms"].values():
        row |= {"changes": 3, "flaps": 1}
    head = table_arms(result).splitlines()[0]
    assert "| changes | flaps |" in head


def test_the_bench_prints_its_wall_time_per_arm_and_per_cell():
    text = wall_times(_result())
    assert "s seed 0: 700; hindsight's search 40 runs" in text
    assert "reactive 10, hindsight 10" in text and "whole bench: 700 s" in text
