"""Shared test fixtures.  Tests never read ../shared/: what they need lives under tests/data/ (see its README).

The run fails on any skip whose reason is not a missing GPU, and lists them (`tests/skipguard.py`).

Heavy, deterministic fixtures (twin runs, an LSTM training, the demo) take their result from `shared_results`:
computed once per test run, whichever file and xdist worker asks first (`tests/shared_cache.py`).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.shared_cache import SharedCache, cache_root
from tests.skipguard import pytest_configure  # noqa: F401 - the skip guard: a pytest hook, found by name here

REPO = Path(__file__).resolve().parent.parent
DATA = Path(__file__).resolve().parent / "data"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def data_dir() -> Path:
    return DATA


@pytest.fixture(scope="session")
def shared_results(tmp_path_factory: pytest.TempPathFactory) -> SharedCache:
    """Results computed once per run and shared across files and workers (`SharedCache.get`)."""
    return SharedCache(cache_root(tmp_path_factory))
