"""The benches under `bench/` are scripts, not a package: tests load one from its file, under a name of their own."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str, as_name: str) -> ModuleType:
    """`bench/NAME.py` executed as a fresh module called `as_name` (not put in `sys.modules`)."""
    spec = importlib.util.spec_from_file_location(as_name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
