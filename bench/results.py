"""Result tables that cannot drift: benches write them, a test checks them.

A bench that publishes figures keeps them in `docs/results/NAME.json` and exposes `TABLES`, a dict from a part
name to a function rendering that part of the JSON as Markdown.  The README and the docs carry each table between
markers that name the bench and the part:

    <!-- bench:twin:arms -->
    | arm | ... |
    <!-- /bench -->

`publish(name, result, tables)` writes the JSON and rewrites every marked block of that bench in `README.md` and
`docs/*.md`; `tests/test_results_tables.py` renders every marked block again from the committed JSON and fails if
the text differs, so a table typed by hand (or left behind by a changed bench) is caught.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from infercast.runfiles import write_json

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "docs" / "results"
BLOCK = re.compile(r"(<!-- bench:(?P<name>[\w-]+):(?P<part>[\w-]+) -->\n)(?P<body>.*?)(<!-- /bench -->)", re.DOTALL)

Tables = dict[str, Callable[[dict], str]]


def documents(root: Path = ROOT) -> list[Path]:
    """The files that may carry result blocks."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def blocks(text: str) -> Iterator[re.Match]:
    return BLOCK.finditer(text)


def load(name: str, root: Path = ROOT) -> dict:
    return json.loads((root / "docs" / "results" / f"{name}.json").read_text())


def render_blocks(text: str, name: str, result: dict, tables: Tables) -> str:
    """`text` with every block of bench `name` re-rendered from `result`."""

    def sub(m: re.Match) -> str:
        if m["name"] != name:
            return m[0]
        part = m["part"]
        if part not in tables:
            raise KeyError(f"bench {name} has no table {part!r} (has {sorted(tables)})")
        body = tables[part](result).rstrip("\n") + "\n"
        return m[1] + body + m[5]

    return BLOCK.sub(sub, text)


def publish(name: str, result: dict, tables: Tables, root: Path = ROOT) -> Path:
    """Write docs/results/NAME.json and refresh NAME's blocks in the README and docs; returns the JSON path."""
    out = root / "docs" / "results" / f"{name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    write_json(out, result)
    result = json.loads(out.read_text())  # render from what was written, exactly as the test will
    for doc in documents(root):
        if not doc.exists():
            continue
        text = doc.read_text()
        new = render_blocks(text, name, result, tables)
        if new != text:
            doc.write_text(new)
    return out


def publish_or_write(name: str, result: dict, tables: Tables, json_path: Path | None) -> Path:
    """`publish` the result, or with a bench's `--json PATH` write it there only (a trial run: no doc is touched)."""
    if json_path:
        json_path.write_text(json.dumps(result, indent=2) + "\n")
        return json_path
    return publish(name, result, tables)


def commit_of(root: Path) -> str:
    """The short commit of the checkout at `root`, `+uncommitted` when its tracked files differ from it: the code a
    before/after figure was measured on."""
    done = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"], capture_output=True
    )
    return (done.stdout.strip() or str(root)) + ("+uncommitted" if dirty.stdout.strip() else "")
