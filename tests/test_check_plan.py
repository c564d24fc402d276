"""bench/check_plan.py reads the plan it checks from the published results: the one the bench published, or a clear
refusal (the descent itself is the control bench's, tested in tests/actuators/test_levers.py)."""

from __future__ import annotations

import json

import pytest

from tests.benches import load_bench
from tests.conftest import REPO


def _module():
    return load_bench("check_plan", "bench_check_plan")


def test_the_plan_checked_is_the_one_published_for_the_cell() -> None:
    results = REPO / "docs" / "results"
    cell = next(
        c
        for c in json.loads((results / "control.json").read_text())["cells"]
        if c["scenario"] == "flash-sale-unannounced"
    )
    plan, figures = _module().published_plan(results, cell["scenario"], cell["seed"])
    assert plan.describe() == cell["arms"]["hindsight"]["plan"]
    assert figures["urgent_goodput_rps"] == cell["arms"]["hindsight"]["urgent_goodput_rps"]


def test_a_cell_without_a_published_plan_is_refused_by_name(tmp_path) -> None:
    # what the user sees: the file and the cell named, not a StopIteration or a KeyError
    (tmp_path / "control.json").write_text(
        json.dumps({"cells": [{"scenario": "calm-day", "seed": 0, "arms": {"reactive": {}}}]})
    )
    with pytest.raises(SystemExit, match="has no hindsight plan for calm-day seed 0"):
        _module().published_plan(tmp_path, "calm-day", 0)
