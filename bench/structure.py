"""infercast's layers, from its imports and its folders: the layer of a module is the folder it lives in, the
arrows between folders, the rules they keep, and the lines of code in each layer.

    .venv/bin/python bench/structure.py [--publish]

Four layers, from the ground up, each a set of folders:
- **foundation**: the modules of `infercast/` itself and `infercast/store/` (the metric catalog, the fleet file's
  config, HTTP serving, the Prometheus store, the shipped files' locations).  Imports nothing above it.
- **product**: the top-level folders a real fleet runs (exporters/, predictors/, alertrules/, dashboards/,
  actuators/: pyproject.toml's package-dir maps each to `infercast.<folder>`).  Imports the foundation and one
  another.
- **simulator**: `infercast/simulator/`: the fleet twin, the arms that drive the product on it, the trace and twin
  replays, the demo and the engine lab.  Imports the product through the interfaces a real fleet uses.
- **tools**: `infercast/tools/`: the `infercast` command line, `infercast check` and the Kubernetes generator.  Put
  the parts together: import the product and the simulator (each command's module inside a loader function).

The rules (`tests/test_layers.py` checks them on every run, and `lint-imports` with the contracts in pyproject.toml):
no import from a layer into one above it (so none into the simulator from the product or the foundation), no import
cycle between packages (the folders a reader sees: `box`), and none between modules.  Every import counts,
including those inside functions.  `--publish` writes docs/results/structure.json and the picture and table in
docs/architecture.md.
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

#: the foundation's folder; the product's folders are pyproject.toml's package-dir (those holding code)
FOUNDATION_FOLDER = "infercast"
LAYERS = ("foundation", "product", "simulator", "tools")
#: the layers' own packages, inside infercast/ (every module under them is of that layer)
SIMULATOR = "infercast.simulator"
TOOLS = "infercast.tools"
#: what each layer may import besides itself
MAY_IMPORT = {
    "foundation": set(),
    "product": {"foundation"},
    "simulator": {"foundation", "product"},
    "tools": {"foundation", "product", "simulator"},
}


def product_folders(root: Path = ROOT) -> dict[str, str]:
    """Repository folder -> the package it installs as, for the product's folders of code (pyproject.toml's
    package-dir; a data-only folder such as examples/ has no __init__.py)."""
    import tomllib

    package_dir = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    return {folder: package for package, folder in package_dir.items() if (root / folder / "__init__.py").is_file()}


#: repository folder -> the package it installs as: the foundation's and the product's
FOLDERS = {FOUNDATION_FOLDER: "infercast", **product_folders()}
PRODUCT = tuple(v for k, v in FOLDERS.items() if k != FOUNDATION_FOLDER)


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer_of(module: str) -> str:
    """The layer of a module is its folder's: infercast/simulator/, infercast/tools/, a product folder, or else the
    foundation (infercast/ itself and infercast/store/)."""
    if _under(module, (SIMULATOR,)):
        return "simulator"
    if _under(module, (TOOLS,)):
        return "tools"
    if _under(module, PRODUCT):
        return "product"
    return "foundation"


def package_of(module: str, path: Path) -> str:
    """The package (folder) a module is in; a package's `__init__` is in its own."""
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def box(module: str, path: Path) -> str:
    """The folder a reader sees a module in, one level below its layer's root: `infercast` or `infercast.store` for
    the foundation, `infercast.actuators` for all of actuators/ (its backends/ included), `infercast.simulator.twin`,
    `infercast.tools.k8s`; a module directly in a layer's root is in the root's box (`infercast.simulator`)."""
    depth = 3 if layer_of(module) in ("simulator", "tools") else 2
    return ".".join(package_of(module, path).split(".")[:depth])


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> its file, for every module infercast installs (tests and data folders left out)."""
    out = {}
    for folder, package in FOLDERS.items():
        for f in sorted((root / folder).rglob("*.py")):
            rel = f.relative_to(root / folder).with_suffix("")
            if "tests" in rel.parts or "__pycache__" in rel.parts:
                continue
            parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
            out[".".join((package, *parts))] = f
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the infercast modules it imports anywhere in its body (a package import counts as its
    `__init__`; `from pkg import mod` as the module)."""
    edges: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    target = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    target = node.module or ""
                candidates = [target, *(f"{target}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                candidates = [a.name for a in node.names]
            else:
                continue
            for c in candidates:
                if c.split(".")[0] in FOLDERS:  # a checkout from before the one namespace (`from exporters import`)
                    c = f"{FOLDERS[c.split('.')[0]]}{c[len(c.split('.')[0]) :]}"
                while c and c not in mods:  # `from x import function`: the module x
                    c = c.rpartition(".")[0]
                if c and c != name:
                    found.add(c)
        edges[name] = found
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def violations(edges: dict[str, set[str]]) -> list[str]:
    """Every import that breaks a layer rule, as 'a (layer) -> b (layer)'."""
    out = []
    for a, targets in sorted(edges.items()):
        la = layer_of(a)
        for b in sorted(targets):
            lb = layer_of(b)
            if lb != la and lb not in MAY_IMPORT[la]:
                out.append(f"{a} ({la}) -> {b} ({lb})")
    return out


def lines_of_code(path: Path) -> int:
    """Non-blank lines that are not comments (docstrings count: they are the code's manual)."""
    return sum(1 for ln in path.read_text().splitlines() if ln.strip() and not ln.strip().startswith("#"))


#: a module longer than this (lines in the file) is a room too large to hold (issue 39); tests and benches aside
LONG_MODULE_LINES = 800
#: a function longer than this (lines from its `def` to its last line) is one a reader wants split where it can be
LONG_FUNCTION_LINES = 80


def long_functions(mods: dict[str, Path]) -> list[dict]:
    """Every function (methods and nested ones too, by `bench/long_functions.py`'s count) longer than
    `LONG_FUNCTION_LINES`, longest first."""
    from long_functions import long_functions as over

    out = [
        {"function": f"{name}.{f.name}", "line": f.line, "lines": f.lines}
        for name, path in mods.items()
        for f in over(path, LONG_FUNCTION_LINES)
    ]
    return sorted(out, key=lambda f: (-f["lines"], f["function"]))


def public_classes_defined_twice(mods: dict[str, Path]) -> dict[str, list[str]]:
    """Public class names (no leading underscore, at a module's top level) that more than one module defines."""
    where: dict[str, list[str]] = {}
    for name, path in sorted(mods.items()):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(name)
    return {cls: names for cls, names in sorted(where.items()) if len(names) > 1}


def measure(root: Path = ROOT) -> dict:
    mods = modules(root)
    edges = imports(mods)
    boxed = {name: f"{layer_of(name)}: {box(name, path)}" for name, path in mods.items()}
    arrows = Counter(
        (boxed[a], boxed[b]) for a, targets in edges.items() for b in targets if boxed[a] != boxed[b]
    )  # fmt: skip
    per_layer: Counter[str] = Counter()
    files: Counter[str] = Counter()
    for name, path in mods.items():
        per_layer[layer_of(name)] += lines_of_code(path)
        files[layer_of(name)] += 1
    members: dict[str, list[str]] = {}
    for name in sorted(mods):
        members.setdefault(boxed[name], []).append(name)
    between_boxes = {a: {b for b in targets if boxed[b] != boxed[a]} for a, targets in edges.items()}
    box_edges: dict[str, set[str]] = {}
    for a, targets in between_boxes.items():
        box_edges.setdefault(boxed[a], set()).update(boxed[b] for b in targets)
    return {
        "layers": {name: {"modules": files[name], "lines": per_layer[name]} for name in LAYERS},
        "boxes": members,
        "arrows": [{"from": a, "to": b, "imports": n} for (a, b), n in sorted(arrows.items())],
        "violations": violations(edges),
        "cycles": cycles(edges),
        "package_cycles": cycles(box_edges),
        "long_modules": sorted(
            name for name, path in mods.items() if len(path.read_text().splitlines()) > LONG_MODULE_LINES
        ),
        "long_functions": long_functions(mods),
        "classes_defined_twice": public_classes_defined_twice(mods),
    }


def _label(box_name: str, members: list[str]) -> str:
    """A box's caption: its package, and its modules where there are a few."""
    group = box_name.split(": ")[1]
    if len(members) > 5:
        return f"{group} ({len(members)} modules)"
    short = [m[len(group) + 1 :] or m.rpartition(".")[2] for m in members]
    return f"{group}: {', '.join(short)}"


def render_picture(r: dict) -> str:
    """A Mermaid flowchart (GitHub renders it): one box per folder, one subgraph per layer."""
    boxes = sorted({a["from"] for a in r["arrows"]} | {a["to"] for a in r["arrows"]})
    ids = {b: f"n{i}" for i, b in enumerate(boxes)}
    out = ["```mermaid", "flowchart BT"]
    for layer in LAYERS:
        out.append(f'  subgraph {layer}["{layer}"]')
        out += [f'    {ids[b]}["{_label(b, r["boxes"][b])}"]' for b in boxes if b.startswith(layer + ":")]
        out.append("  end")
    for a in r["arrows"]:
        out.append(f"  {ids[a['from']]} --> {ids[a['to']]}")
    out.append("```")
    arrows_in = sum(
        a["imports"] for a in r["arrows"] if a["to"].startswith("simulator:") and not a["from"].startswith("simulator:")
    )
    out.append(
        f"\nA box is a folder; an arrow is at least one import (anywhere in a module, functions included). Into the "
        f"simulator from outside it: **{arrows_in}** imports; layer rules broken: **{len(r['violations'])}**; "
        f"import cycles between packages: **{len(r['package_cycles'])}**, between modules: **{len(r['cycles'])}**; "
        f"modules over {LONG_MODULE_LINES} lines: **{len(r['long_modules'])}**; functions over "
        f"{LONG_FUNCTION_LINES} lines: **{len(r.get('long_functions', []))}**; public class names defined in two "
        f"modules: **{len(r.get('classes_defined_twice', {}))}**. `bench/structure.py`."
    )
    return "\n".join(out)


def render_lines(r: dict) -> str:
    out = ["| layer | modules | lines of code |", "|---|---:|---:|"]
    for name in LAYERS:
        out.append(f"| {name} | {r['layers'][name]['modules']} | {r['layers'][name]['lines']:,} |")
    total = sum(v["lines"] for v in r["layers"].values())
    out.append(
        f"\nLines: non-blank, non-comment lines of the installed modules (docstrings included); {total:,} in all; "
        f"at commit `{r.get('commit') or '?'}`, `bench/structure.py`."
    )
    return "\n".join(out)


TABLES = {"picture": render_picture, "lines": render_lines}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--publish", action="store_true", help="write docs/results/structure.json and the docs' blocks")
    p.add_argument("--root", type=Path, default=ROOT, help="measure another checkout (e.g. an older commit's)")
    args = p.parse_args()
    r = measure(args.root)
    print(render_lines(r))
    for v in r["violations"]:
        print("layer rule broken:", v)
    for c in r["package_cycles"]:
        print("import cycle between packages:", " <-> ".join(c))
    for c in r["cycles"]:
        print("import cycle:", " <-> ".join(c))
    for m in r["long_modules"]:
        print(f"over {LONG_MODULE_LINES} lines:", m)
    for f in r["long_functions"]:
        print(f"function over {LONG_FUNCTION_LINES} lines: {f['function']} ({f['lines']} lines, line {f['line']})")
    for cls, names in r["classes_defined_twice"].items():
        print(f"class {cls} defined in:", ", ".join(names))
    if args.publish:
        import subprocess

        import results

        head = subprocess.run(
            ["git", "-C", args.root, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(["git", "-C", args.root, "status", "--porcelain"], capture_output=True, text=True)
        r["commit"] = head.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")

        results.publish("structure", r, TABLES)
    return 1 if r["violations"] or r["cycles"] or r["package_cycles"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
