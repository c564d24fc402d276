"""The layers of bench/structure.py hold on the code as it is: no import (anywhere in a module) from a layer into
one it may not use, none into the simulator from outside it, no import cycle, and the picture in
docs/architecture.md is the one the imports draw."""

from __future__ import annotations

import importlib.util
import json
import sys

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("bench_structure", REPO / "bench" / "structure.py")
structure = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = structure
spec.loader.exec_module(structure)

MEASURED = structure.measure(REPO)


def test_no_import_breaks_a_layer_rule():
    assert MEASURED["violations"] == []


def test_the_product_core_never_imports_the_simulator():
    into_simulator = [
        a for a in MEASURED["arrows"] if a["to"].startswith("simulator:") and not a["from"].startswith("simulator:")
    ]
    assert into_simulator == []


def test_no_import_cycle_between_modules():
    assert MEASURED["cycles"] == []


def test_the_published_picture_is_the_one_the_imports_draw():
    published = json.loads((REPO / "docs" / "results" / "structure.json").read_text())
    assert published["arrows"] == MEASURED["arrows"], "the layers changed: run bench/structure.py --publish"
    assert published["boxes"] == MEASURED["boxes"], "modules moved: run bench/structure.py --publish"


def test_every_installed_package_is_measured():
    # a new folder with an __init__.py must be in pyproject's package list and in the layer table's view
    import tomllib

    packages = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {name for name, path in structure.modules(REPO).items() if path.name == "__init__.py"}
    assert found <= packages, f"packages missing from pyproject.toml: {sorted(found - packages)}"


def test_the_rules_catch_an_arrow_into_the_simulator_and_a_cycle():
    # what a reader would add by mistake: the exporter importing the twin, a foundation module importing a part
    edges = {
        "infercast.exporters.server": {"infercast.simulator.twin.fleet"},
        "infercast.config": {"infercast.predictors.base"},
        "infercast.simulator.twin.fleet": set(),
        "infercast.predictors.base": set(),
    }
    assert structure.violations(edges) == [
        "infercast.config (foundation) -> infercast.predictors.base (product)",
        "infercast.exporters.server (product) -> infercast.simulator.twin.fleet (simulator)",
    ]
    loop = {"a.x": {"a.y"}, "a.y": {"a.z"}, "a.z": {"a.x"}, "a.w": {"a.x"}}
    assert structure.cycles(loop) == [["a.x", "a.y", "a.z"]]


def test_an_import_inside_a_function_counts(tmp_path):
    pkg = tmp_path / "exporters"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "lazy.py").write_text("def f():\n    from infercast.simulator.twin import fleet\n    return fleet\n")
    (tmp_path / "infercast" / "simulator" / "twin").mkdir(parents=True)
    (tmp_path / "infercast" / "__init__.py").write_text("")
    (tmp_path / "infercast" / "simulator" / "twin" / "__init__.py").write_text("")
    (tmp_path / "infercast" / "simulator" / "twin" / "fleet.py").write_text("")
    edges = structure.imports(structure.modules(tmp_path))
    assert "infercast.simulator.twin.fleet" in edges["infercast.exporters.lazy"]  # (and the package it is in)
    assert "infercast.exporters.lazy (product) -> infercast.simulator.twin.fleet (simulator)" in structure.violations(
        edges
    )
