"""The control bench's published cells (docs/results/control.json, every scenario x arm x seed): `hindsight` is a
bound there, no arm ranks above it by `plans.better` in any cell.  The full scenarios take minutes per arm, so the
suite checks the bench's own record here, and runs the search itself on small slices of every trace format
(tests/twin/test_trace_arms.py).  A rerun of the bench that finds an arm above the bound fails this test: the
search must then be widened (docs/control.md, "Hindsight's search"), not the test."""

from __future__ import annotations

import json

from infercast.simulator.control.plans import better
from tests.conftest import REPO

KEYS = ("urgent_goodput_rps", "goodput_rps", "gpu_seconds")


def test_no_arm_of_the_published_control_bench_ranks_above_hindsight_in_any_cell():
    result = json.loads((REPO / "docs" / "results" / "control.json").read_text())
    cells = [c for c in result["cells"] if "hindsight" in c["arms"]]
    if result.get("complete", True):  # a whole run of the bench: every scenario x seed x arm
        assert {c["scenario"] for c in cells} == set(result["scenarios"])
        assert len(cells) >= 3 * len(result["scenarios"])
    else:  # a partial one (`--measured-only`) says which seeds of each scenario x arm it measured
        for sc, arms in result["measured"].items():
            for arm, seeds in arms.items():
                assert seeds == sorted(c["seed"] for c in result["cells"] if c["scenario"] == sc and arm in c["arms"])
    above = [
        (c["scenario"], c["seed"], arm, {k: row.get(k) for k in KEYS}, {k: c["arms"]["hindsight"].get(k) for k in KEYS})
        for c in cells
        for arm, row in c["arms"].items()
        if arm != "hindsight" and better(row, c["arms"]["hindsight"])
    ]
    assert not above, f"arms above the hindsight bound (scenario, seed, arm, its figures, hindsight's): {above}"
    if result.get("complete", True):
        assert all(set(result["arms"]) <= set(c["arms"]) for c in cells), "a cell lacks an arm the bench runs"
