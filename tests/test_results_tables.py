"""Every result table in the README and docs is what its bench renders from the committed JSON.

Blocks look like `<!-- bench:NAME:PART -->` ... `<!-- /bench -->` (see bench/results.py).  A table typed by hand,
edited after the run, or left behind when a bench changed its output fails here with the bench and part named.
"""

from __future__ import annotations

import importlib.util
import re
import sys

import pytest

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "bench"))
import results


def _bench(name: str):
    """bench/NAME.py (dashes as underscores), or the bench that publishes under that name."""
    path = REPO / "bench" / f"{name.replace('-', '_')}.py"
    if not path.exists():
        call = re.compile(rf'publish(_or_write)?\("{re.escape(name)}"')
        path = next((p for p in sorted((REPO / "bench").glob("*.py")) if call.search(p.read_text())), path)
    assert path.exists(), f"a results block names bench {name!r} but no bench publishes it"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # a bench's dataclasses look their module up there
    spec.loader.exec_module(mod)
    return mod


def _all_blocks():
    for doc in results.documents(REPO):
        if doc.exists():
            for m in results.blocks(doc.read_text()):
                yield doc.relative_to(REPO), m["name"], m["part"], m["body"]


BLOCKS = list(_all_blocks())


def test_the_readme_carries_result_blocks():
    assert any(str(doc) == "README.md" for doc, *_ in BLOCKS), "README.md has no bench result block"


@pytest.mark.parametrize(("doc", "name", "part", "body"), BLOCKS, ids=[f"{d}:{n}:{p}" for d, n, p, _ in BLOCKS])
def test_block_matches_its_bench_output(doc, name, part, body):
    mod = _bench(name)
    assert part in mod.TABLES, f"{doc}: bench {name} has no table {part!r}"
    expected = mod.TABLES[part](results.load(name, REPO)).rstrip("\n") + "\n"
    assert body == expected, (
        f"{doc}: the {name}:{part} table differs from what bench/{name}.py renders from docs/results/{name}.json; "
        f"run the bench again (it rewrites the block) instead of editing the table"
    )


def test_render_replaces_only_its_own_blocks():
    text = "a\n<!-- bench:x:t -->\nold\n<!-- /bench -->\nb\n<!-- bench:y:t -->\nkeep\n<!-- /bench -->\n"
    out = results.render_blocks(text, "x", {"v": 3}, {"t": lambda r: f"| v | {r['v']} |"})
    assert out == "a\n<!-- bench:x:t -->\n| v | 3 |\n<!-- /bench -->\nb\n<!-- bench:y:t -->\nkeep\n<!-- /bench -->\n"
