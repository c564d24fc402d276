"""The layers hold on the code as it is, and the layer of a module is its folder (bench/structure.py): no import
(anywhere in a module) from a layer into one it may not use, so none into infercast/simulator/ from the product
folders or the foundation; no import cycle between packages (folders) nor between modules; the picture in
docs/architecture.md is the one the imports draw.  `lint-imports` (import-linter, the contracts in pyproject.toml)
checks the same layers and cycles on the installed layout, and both fail on an import across the line."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("bench_structure", REPO / "bench" / "structure.py")
structure = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = structure
spec.loader.exec_module(structure)

MEASURED = structure.measure(REPO)
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"
#: what a reader would add by mistake: the exporter importing the twin, so the product needs the simulator
BAD_EDGE = ("exporters/leak.py", "from infercast.simulator.twin.fleet import build_fleet\n")


def test_no_import_breaks_a_layer_rule():
    assert MEASURED["violations"] == []


def test_the_product_and_the_foundation_never_import_the_simulator():
    into_simulator = [
        a for a in MEASURED["arrows"] if a["to"].startswith("simulator:") and a["from"].split(":")[0] != "simulator"
        and not a["from"].startswith("tools:")
    ]  # fmt: skip
    assert into_simulator == []


def test_no_import_cycle_between_packages_or_modules():
    assert MEASURED["package_cycles"] == []
    assert MEASURED["cycles"] == []


def test_the_layer_of_a_module_is_its_folder():
    assert structure.layer_of("infercast.simulator.twin.fleet") == "simulator"
    assert structure.layer_of("infercast.simulator.control.arms") == "simulator"
    assert structure.layer_of("infercast.tools.k8s.build") == "tools"
    assert structure.layer_of("infercast.actuators.backends.redis") == "product"
    assert structure.layer_of("infercast.store.memory") == "foundation"
    assert structure.layer_of("infercast.config") == "foundation"
    assert not hasattr(structure, "GROUPS") and isinstance(structure.SIMULATOR, str)  # no hand list of modules


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
    edges = {
        "infercast.exporters.server": {"infercast.simulator.twin.fleet"},
        "infercast.config": {"infercast.predictors.base"},
        "infercast.simulator.twin.fleet": {"infercast.tools.cli"},
        "infercast.predictors.base": set(),
        "infercast.tools.cli": set(),
    }
    assert structure.violations(edges) == [
        "infercast.config (foundation) -> infercast.predictors.base (product)",
        "infercast.exporters.server (product) -> infercast.simulator.twin.fleet (simulator)",
        "infercast.simulator.twin.fleet (simulator) -> infercast.tools.cli (tools)",
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
    (tmp_path / "infercast" / "simulator" / "__init__.py").write_text("")
    (tmp_path / "infercast" / "simulator" / "twin" / "__init__.py").write_text("")
    (tmp_path / "infercast" / "simulator" / "twin" / "fleet.py").write_text("")
    edges = structure.imports(structure.modules(tmp_path))
    assert "infercast.simulator.twin.fleet" in edges["infercast.exporters.lazy"]  # (and the package it is in)
    assert "infercast.exporters.lazy (product) -> infercast.simulator.twin.fleet (simulator)" in structure.violations(
        edges
    )


def test_rooms_a_reader_can_hold_no_long_module_and_no_class_name_twice():
    """Issue 39's sizes: no installed module over 800 lines, and no public class name that two modules define (the
    reader of `Decision` must know which one).  What a user sees on a failure: the module or the class named."""
    assert MEASURED["long_modules"] == [], f"split these modules: {MEASURED['long_modules']}"
    assert MEASURED["classes_defined_twice"] == {}, f"rename one of each: {MEASURED['classes_defined_twice']}"


def test_the_size_measures_find_a_long_function_and_a_class_defined_twice(tmp_path):
    """The measures themselves, on two modules made here: a function at the limit is not listed, one line
    longer is, with its length; a class name in two modules is listed with both (a private one is not)."""
    long_body = "\n".join(f"    x{i} = {i}" for i in range(structure.LONG_FUNCTION_LINES - 1))
    a = tmp_path / "a.py"
    a.write_text(f"class Decision:\n    pass\n\n\nclass _Hidden:\n    pass\n\n\ndef long():\n{long_body}\n")
    b = tmp_path / "b.py"
    b.write_text("class Decision:\n    pass\n\n\nclass _Hidden:\n    pass\n\n\ndef short():\n    return 1\n")
    mods = {"pkg.a": a, "pkg.b": b}
    assert structure.long_functions(mods) == []  # exactly at the limit: not over it
    a.write_text(a.read_text() + "    return x0\n")  # one line more: over the limit
    assert structure.long_functions(mods) == [
        {"function": "pkg.a.long", "line": 9, "lines": structure.LONG_FUNCTION_LINES + 1}
    ]
    assert structure.public_classes_defined_twice(mods) == {"Decision": ["pkg.a", "pkg.b"]}


def _checkout_copy(dest: Path, extra: tuple[str, str] | None = None) -> Path:
    """The code folders and pyproject.toml of this checkout, linked file by file under `dest`, plus one file."""
    for folder in structure.FOLDERS:
        for f in (REPO / folder).rglob("*.py"):
            rel = f.relative_to(REPO)
            if "__pycache__" in rel.parts:
                continue
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            (dest / rel).symlink_to(f)
    shutil.copy(REPO / "pyproject.toml", dest / "pyproject.toml")
    if extra:
        (dest / extra[0]).write_text(extra[1])
    return dest


def test_the_layer_check_fails_on_an_import_across_the_line(tmp_path):
    """CI runs this file: one product module importing the simulator turns the check red, naming the import."""
    r = structure.measure(_checkout_copy(tmp_path, BAD_EDGE))
    assert r["violations"] == [
        "infercast.exporters.leak (product) -> infercast.simulator.twin.fleet (simulator)",
    ]


def _installed_layout(dest: Path, extra: tuple[str, str] | None = None) -> Path:
    """The checkout as the wheel installs it (exporters/ -> infercast/exporters/, ...), linked file by file.

    import-linter's graph builder (grimp) finds `infercast` by its folder alone: in a checkout the product folders
    join the package only at run time (infercast/__init__.py extends `__path__`), and the editable install maps them
    to /work/main's tree, so neither shows grimp this checkout's layers."""
    for folder, package in structure.FOLDERS.items():
        target = dest / package.replace(".", "/")
        for f in (REPO / folder).rglob("*.py"):
            rel = f.relative_to(REPO / folder)
            if "__pycache__" in rel.parts or "tests" in rel.parts:
                continue
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            (target / rel).symlink_to(f)
    if extra:
        folder, _, name = extra[0].partition("/")
        (dest / structure.FOLDERS[folder].replace(".", "/") / name).write_text(extra[1])
    return dest


def _lint_imports(root: Path) -> subprocess.CompletedProcess:
    assert LINT_IMPORTS.exists(), "import-linter is a dev dependency: bash scripts/install.sh"
    return subprocess.run(
        [str(LINT_IMPORTS), "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=root, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def test_lint_imports_keeps_the_contracts(tmp_path):
    r = _lint_imports(_installed_layout(tmp_path))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    assert "Contracts: 2 kept, 0 broken." in r.stdout


def test_lint_imports_fails_on_an_import_across_the_line(tmp_path):
    r = _lint_imports(_installed_layout(tmp_path, BAD_EDGE))
    assert r.returncode == 1, r.stdout[-3000:]
    assert "infercast.exporters.leak -> infercast.simulator.twin.fleet" in r.stdout
