"""The demo's bound: `hindsight` replays the plan the control bench found for the same scenario and seed."""

from __future__ import annotations

import json

from infercast.simulator.control.plans import Plan
from infercast.simulator.demo.run import RESULTS, stored_causal_plan, stored_hindsight_plan


def test_a_plan_survives_the_bench_json_it_is_stored_in():
    plan = Plan(((510.0, (("v4-long", 5), ("v4-short", 11))),), (("memory_limit", 0.75),))
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert Plan.from_dict([]) == Plan()


def test_the_demo_finds_the_benchs_plan_for_its_scenario_and_seed_and_nothing_for_others(tmp_path):
    plan = Plan(((510.0, (("v4-long", 5), ("v4-short", 11))),))
    cells = [
        {"scenario": "flash-sale", "seed": 0, "search": "fast", "arms": {"hindsight": {"plan_steps": plan.to_dict()}}},
        {"scenario": "calm-day", "seed": 0, "search": "fast", "arms": {"hindsight": {"plan_steps": []}}},
    ]
    (tmp_path / "control.json").write_text(json.dumps({"cells": cells}))
    found = stored_hindsight_plan("flash-sale", 0, tmp_path)
    assert found is not None and found[0] == plan and "bench/control.py" in found[1]
    assert stored_hindsight_plan("calm-day", 0, tmp_path)[0] == Plan()  # the bench's bound there: no plan
    assert stored_hindsight_plan("flash-sale", 1, tmp_path) is None  # a seed the bench did not run: search instead
    assert stored_hindsight_plan("my-fleet.yaml", 0, tmp_path) is None
    assert stored_hindsight_plan("flash-sale", 0, tmp_path / "nowhere") is None  # an installed package: no docs
    (tmp_path / "control.json").write_text("{not json")
    assert stored_hindsight_plan("flash-sale", 0, tmp_path) is None


def test_the_demo_finds_the_stored_causal_plan_with_the_command_that_made_it(tmp_path):
    plan = Plan(((615.0, (("v4-long", 5), ("v4-short", 11))),), (("memory_limit", 0.75),))
    doc = {
        "command": "bench/demo.py --causal --scenario flash-sale --seed 0",
        "cells": [{"scenario": "flash-sale", "seed": 0, "plan": plan.to_dict(), "search": "best found"}],
    }
    (tmp_path / "demo-causal.json").write_text(json.dumps(doc))
    found = stored_causal_plan("flash-sale", 0, tmp_path)
    assert found is not None and found[0] == plan
    assert "bench/demo.py --causal --scenario flash-sale --seed 0" in found[1]
    assert stored_causal_plan("flash-sale", 1, tmp_path) is None
    assert stored_causal_plan("flash-sale", 0, tmp_path / "nowhere") is None


def test_the_shipped_causal_plan_is_for_the_demos_own_scenario_and_seed():
    """`infercast demo` (flash-sale, the file's seed 0) replays the causal plan bench/demo.py --causal stored."""
    found = stored_causal_plan("flash-sale", 0, RESULTS)
    assert found is not None and found[0].steps and min(t for t, _ in found[0].steps) >= 600.0, found
