"""The functions and methods longer than a reader can hold (issue 39: "functions under ~80 lines"), counted from the
syntax tree of every module git tracks outside tests/ and bench/.

    .venv/bin/python bench/long_functions.py [--limit 80] [--under FOLDER ...]

A function's length is its lines from `def` (decorators excluded) to its last line, docstring and nested functions
included; a nested function is counted on its own as well.  Prints one line per long function, longest first, then
the count.  It publishes nothing itself; `bench/structure.py` counts the installed modules' long functions with
it and publishes them beside the layers.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: folders whose code is not the product's or the simulator's
SKIPPED = ("tests/", "bench/")


@dataclass(frozen=True)
class Long:
    path: str
    line: int
    name: str
    lines: int


def modules(under: list[str]) -> list[str]:
    """The Python files git tracks (and the untracked ones it does not ignore), outside the skipped folders."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted(
        p
        for p in listed
        if not p.startswith(SKIPPED) and (not under or p.startswith(tuple(under))) and (ROOT / p).exists()
    )


def long_functions(path: str | Path, limit: int) -> list[Long]:
    """The functions of `path` (relative to the checkout, or absolute; qualified by their class or enclosing
    function) longer than `limit` lines."""
    found: list[Long] = []

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = prefix + child.name
                length = (child.end_lineno or child.lineno) - child.lineno + 1
                if length > limit:
                    found.append(Long(str(path), child.lineno, name, length))
                visit(child, name + ".")
            elif isinstance(child, ast.ClassDef):
                visit(child, prefix + child.name + ".")
            else:
                visit(child, prefix)

    visit(ast.parse((ROOT / path).read_text(), path), "")
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=80, help="longest a function may be, in lines (default 80)")
    parser.add_argument("--under", nargs="*", default=[], help="only these folders (default: every one)")
    args = parser.parse_args()
    found = sorted(
        (f for p in modules(args.under) for f in long_functions(p, args.limit)), key=lambda f: (-f.lines, f.path)
    )
    for f in found:
        print(f"{f.lines:5d}  {f.path}:{f.line}  {f.name}")
    print(f"{len(found)} functions over {args.limit} lines outside {' and '.join(SKIPPED)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
