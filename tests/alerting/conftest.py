"""Fixtures of the alerting tests: the real promtool / amtool binaries (Debian packages), skipped when absent."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ALERTRULES = REPO / "alertrules"


def _binary(*names: str) -> str:
    for n in names:
        found = shutil.which(n) or (f"/usr/bin/{n}" if Path(f"/usr/bin/{n}").exists() else None)
        if found:
            return found
    pytest.skip(f"none of {names} is installed (scripts/install.sh installs the Debian packages)")


@pytest.fixture(scope="session")
def promtool() -> str:
    return _binary("promtool")


@pytest.fixture(scope="session")
def amtool() -> str:
    return _binary("amtool")


def run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, cwd=cwd, check=False)
