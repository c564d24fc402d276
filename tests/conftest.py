"""Shared test fixtures.  Tests never read ../shared/: what they need lives under tests/data/ (see its README).

The run fails on any skip whose reason is not a missing GPU, and lists them (`tests/skipguard.py`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.skipguard import pytest_configure  # noqa: F401 - the skip guard: a pytest hook, found by name here

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA
