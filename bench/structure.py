"""infercast's layers, from its imports: which module belongs to which layer, the arrows between layers, the rules
they keep, and the lines of code in each.

    .venv/bin/python bench/structure.py [--publish]

Four layers, from the ground up:
- **foundation**: what every part imports (the metric catalog, the fleet file's config, HTTP serving, the Prometheus
  store, the shipped files' locations).  Imports nothing above it.
- **product**: the parts a real fleet runs (exporters, predictors, alert rules, dashboards, actuators).  Imports the
  foundation and one another, never the simulator.
- **tools**: the commands that put the parts together (`infercast` itself, `infercast check`, the Kubernetes
  generator).  Import the product; the simulator's commands are reached only by name (`infercast.tools.cli.COMMANDS`).
- **simulator**: the fleet twin, the demo, and the modules that drive the product on the twin or on replayed
  traces (the control arms and hindsight's plans, the twin's exporter source, the trace replays that make the
  backtest's and the training's series).  Imports the product through the same interfaces a real fleet uses.

The rules (`tests/test_layers.py` checks them on every run): no arrow from a layer into one above it, none into
the simulator from outside it, and no import cycle between modules.  Every import counts, including those inside
functions.  `--publish` writes docs/results/structure.json and the picture and table in docs/architecture.md.
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

#: repository folder -> the package it installs as (pyproject.toml's package-dir)
FOLDERS = {
    "infercast": "infercast",
    "exporters": "infercast.exporters",
    "predictors": "infercast.predictors",
    "alertrules": "infercast.alertrules",
    "dashboards": "infercast.dashboards",
    "actuators": "infercast.actuators",
}
LAYERS = ("foundation", "product", "tools", "simulator")
#: the simulator: these packages and modules (and everything under them)
SIMULATOR = (
    "infercast.simulator.twin",
    "infercast.simulator.demo",
    "infercast.simulator.replay.traces",
    "infercast.simulator.lab",  # the engine lab replays traces against real engines, beside the twin
    "infercast.simulator.control.arms",
    "infercast.simulator.control.driver",
    "infercast.simulator.control.plans",
    "infercast.simulator.control.forks",  # the search's snapshots of twin runs
    "infercast.simulator.control.levers",  # the search's single-lever moves
    "infercast.simulator.control.backend",
    "infercast.simulator.twin.source",
    "infercast.simulator.replay.evaluate",
    "infercast.simulator.replay.backtest_cli",
    "infercast.simulator.replay.pretrain_data",
    "infercast.simulator.replay.sizing",
    "infercast.simulator.replay.harm_replay",  # the harm replay runs the twin
    "infercast.simulator.replay.train_cli",
)
TOOLS = ("infercast.tools.cli", "infercast.tools.check", "infercast.tools.k8s")
PRODUCT = tuple(v for k, v in FOLDERS.items() if k != "infercast")
#: what each layer may import besides itself
MAY_IMPORT = {
    "foundation": set(),
    "product": {"foundation"},
    "tools": {"foundation", "product"},
    "simulator": {"foundation", "product"},
}
#: the picture's boxes: the simulator's modules outside infercast.simulator.twin / infercast.simulator.demo are grouped
# by folder
GROUPS = (
    "infercast.simulator.twin",
    "infercast.simulator.demo",
    "infercast.simulator.lab",
    *PRODUCT,
    "infercast.tools.k8s",
)


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer_of(module: str) -> str:
    if _under(module, SIMULATOR):
        return "simulator"
    if _under(module, TOOLS):
        return "tools"
    if _under(module, PRODUCT):
        return "product"
    return "foundation"


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


def box(module: str) -> str:
    """The picture's box of a module: its package group and layer."""
    group = next((g for g in GROUPS if _under(module, (g,))), "infercast")
    return f"{layer_of(module)}: {group}"


def lines_of_code(path: Path) -> int:
    """Non-blank lines that are not comments (docstrings count: they are the code's manual)."""
    return sum(1 for ln in path.read_text().splitlines() if ln.strip() and not ln.strip().startswith("#"))


def measure(root: Path = ROOT) -> dict:
    mods = modules(root)
    edges = imports(mods)
    arrows = Counter(
        (box(a), box(b)) for a, targets in edges.items() for b in targets if box(a) != box(b)
    )  # fmt: skip
    per_layer: Counter[str] = Counter()
    files: Counter[str] = Counter()
    for name, path in mods.items():
        per_layer[layer_of(name)] += lines_of_code(path)
        files[layer_of(name)] += 1
    members: dict[str, list[str]] = {}
    for name in sorted(mods):
        members.setdefault(box(name), []).append(name)
    return {
        "layers": {name: {"modules": files[name], "lines": per_layer[name]} for name in LAYERS},
        "boxes": members,
        "arrows": [{"from": a, "to": b, "imports": n} for (a, b), n in sorted(arrows.items())],
        "violations": violations(edges),
        "cycles": cycles(edges),
        "simulator": list(SIMULATOR),
    }


def _label(box_name: str, members: list[str]) -> str:
    """A box's caption: its package, and its modules where there are a few (the simulator's parts of a folder)."""
    group = box_name.split(": ")[1]
    if len(members) > 5:
        return f"{group} ({len(members)} modules)"
    short = [m[len(group) + 1 :] or m.rpartition(".")[2] for m in members]
    return f"{group}: {', '.join(short)}"


def render_picture(r: dict) -> str:
    """A Mermaid flowchart (GitHub renders it): one box per package group, one subgraph per layer."""
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
        f"\nAn arrow is at least one import (anywhere in a module, functions included). Into the simulator from "
        f"outside it: **{arrows_in}** imports; layer rules broken: **{len(r['violations'])}**; import cycles: "
        f"**{len(r['cycles'])}**. `bench/structure.py`."
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
    for c in r["cycles"]:
        print("import cycle:", " <-> ".join(c))
    if args.publish:
        import subprocess

        import results

        head = subprocess.run(
            ["git", "-C", args.root, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
        )
        dirty = subprocess.run(["git", "-C", args.root, "status", "--porcelain"], capture_output=True, text=True)
        r["commit"] = head.stdout.strip() + (" with uncommitted changes" if dirty.stdout.strip() else "")

        results.publish("structure", r, TABLES)
    return 1 if r["violations"] or r["cycles"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
