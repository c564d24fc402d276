"""No metric name is spelt out in code: every `infercast_` name comes from a symbol of `infercast/catalog.py`.

Scans every string literal (f-string parts included, docstrings excluded: prose may name a metric) of the
non-test Python in the repository for an `infercast_` word.  A rename is then one edit in the catalog, and a
misspelt symbol fails at import instead of exporting or querying a series nobody reads.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORD = re.compile(r"\binfercast_[a-z0-9_]+")

#: path -> (words allowed there, why)
EXCEPTIONS: dict[str, tuple[frozenset[str] | None, str]] = {
    "infercast/catalog.py": (None, "the catalog: the one place names are spelt"),
    "infercast/simulator/replay/train_cli.py": (
        frozenset({"infercast_version"}),
        "a key of the model file's metadata, not a metric",
    ),
}
SKIP_DIRS = {"tests", ".venv", ".engines", ".git", "node_modules", "runs", "__pycache__"}


def _docstrings(tree: ast.AST) -> set[int]:
    ids = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                ids.add(id(body[0].value))
    return ids


def _python_files(root: Path = ROOT) -> list[Path]:
    """The repository's own Python: what git tracks or would (`git ls-files --cached --others --exclude-standard`),
    so ignored output -- `build/lib/...` after `pip wheel .`, a venv, runs -- is never scanned (issue 38 item 10: a
    user's clone failed on its build/ copy).  Outside a git checkout (an unpacked sdist), every file but
    `SKIP_DIRS`."""
    try:
        res = subprocess.run(
            ["git", "-C", str(root), "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.py"],
            capture_output=True,
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        res = None
    if res is not None and res.returncode == 0:
        names = [n for n in res.stdout.decode().split("\0") if n]
        return sorted(
            root / n
            for n in names
            if not SKIP_DIRS & set(Path(n).parts[:-1]) and not Path(n).name.startswith(".") and (root / n).is_file()
        )
    # os.walk prunes the skipped folders instead of listing .venv's thousands of files and dropping them after
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        found += [Path(folder) / f for f in files if f.endswith(".py") and not f.startswith(".")]
    return sorted(found)


def literals(path: Path) -> list[tuple[int, str]]:
    """(line, word) for every `infercast_` word in a non-docstring string literal of the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    docs = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            found += [(node.lineno, w) for w in WORD.findall(node.value)]
    return found


def test_no_metric_name_literals_outside_the_catalog():
    bad = []
    for path in _python_files():
        rel = path.relative_to(ROOT).as_posix()
        allowed, _why = EXCEPTIONS.get(rel, (frozenset(), ""))
        for line, word in literals(path):
            if allowed is None or word in allowed:
                continue
            bad.append(f"{rel}:{line}: {word}")
    assert not bad, "spell these with the symbols of infercast/catalog.py:\n" + "\n".join(bad)


def test_the_check_finds_a_literal(tmp_path):
    p = tmp_path / "m.py"
    p.write_text('"""Docstrings may say infercast_target_up."""\nQ = f\'max(infercast_target_up{{kind="x"}})\'\n')
    assert literals(p) == [(2, "infercast_target_up")]


def test_every_exception_still_exists():
    for rel in EXCEPTIONS:
        assert (ROOT / rel).is_file(), rel


def test_ignored_build_output_is_not_scanned(tmp_path):
    """After `pip wheel .` a clone holds build/lib/infercast/... (ignored by .gitignore): scanning it failed the
    suite on a copy of the code.  Git's ignore rules decide what is scanned."""
    if shutil.which("git") is None:
        import pytest

        pytest.skip("git is not installed")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=60)
    (tmp_path / ".gitignore").write_text("build/\n")
    (tmp_path / "mod.py").write_text("X = 1\n")
    (tmp_path / "build" / "lib").mkdir(parents=True)
    (tmp_path / "build" / "lib" / "copy.py").write_text("Q = 'infercast_target_up'\n")
    assert _python_files(tmp_path) == [tmp_path / "mod.py"]
