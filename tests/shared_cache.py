"""Results the suite computes once per test run and shares across its files and xdist workers (issue 25, item 5).

A heavy, deterministic fixture (a twin run, an LSTM training, the demo's arms) asks `SharedCache.get` for its
result under a key made of everything the result depends on: what the fixture names (the fleet file's bytes, the
arm, the seed, the parameters, the data) and, always, a digest of the product's sources (every file of the folders
that make up the `infercast` package, the shipped model file and the fleet files included).  The first asker
computes it and stores it; every later asker, in the same process or another worker, loads the stored copy.  A file
lock on the key makes a second worker wait for the first instead of computing it again.

The cache lives under the run's shared temporary root (`cache_root`): pytest makes a fresh one for every run and
keeps only the last few, so a result never outlives its run, and the sources digest in the key means even a root
that were reused could not hand one run's result to code that changed.

Every asker, the one that computed it included, gets the value unpickled from the stored file: each gets its own
copy (a test that mutates it changes nobody else's), and the value seen does not depend on which worker computed it.
"""

from __future__ import annotations

import dataclasses
import fcntl
import hashlib
import os
import pickle
import shutil
from collections.abc import Callable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import TypeVar

import numpy as np
import pytest

T = TypeVar("T")

REPO = Path(__file__).resolve().parent.parent
# The folders that install as the `infercast` package (pyproject.toml's packages and package-dir): the code, the
# shipped model file and the fleet files a result can depend on without the fixture naming them.
PRODUCT_DIRS = ("infercast", "exporters", "predictors", "alertrules", "dashboards", "actuators", "examples")


def _feed(h: hashlib._Hash, part: object) -> None:
    """Add one key part to the hash, tagged by kind so that e.g. the string "1" and the int 1 differ.  Only kinds
    whose content is the whole of their meaning: an arbitrary object's repr may carry an address, so it is refused."""
    if part is None or isinstance(part, bool | int | float | str):
        h.update(f"{type(part).__name__}:{part!r}\0".encode())
    elif isinstance(part, bytes):
        h.update(b"bytes:%d\0" % len(part) + part)
    elif isinstance(part, Path):  # a file's bytes, or every file of a folder with its relative path
        files = (
            sorted(f for f in part.rglob("*") if f.is_file() and "__pycache__" not in f.parts)
            if part.is_dir()
            else [part]
        )
        h.update(b"path:%d\0" % len(files))
        for f in files:
            _feed(h, f.relative_to(part).as_posix() if part.is_dir() else f.name)
            _feed(h, f.read_bytes())
    elif isinstance(part, np.ndarray):
        _feed(h, (str(part.dtype), part.shape))
        _feed(h, np.ascontiguousarray(part).tobytes())
    elif isinstance(part, Mapping):
        h.update(b"map:%d\0" % len(part))
        for k in sorted(part, key=repr):
            _feed(h, k)
            _feed(h, part[k])
    elif isinstance(part, list | tuple):
        h.update(b"seq:%d\0" % len(part))
        for p in part:
            _feed(h, p)
    elif dataclasses.is_dataclass(part) and not isinstance(part, type):
        _feed(h, type(part).__qualname__)
        _feed(h, {f.name: getattr(part, f.name) for f in dataclasses.fields(part)})
    else:
        raise TypeError(f"cannot key a shared result on a {type(part).__name__}: name its content instead")


def digest(*parts: object) -> str:
    """The SHA-256 of the key parts (see `_feed` for the kinds accepted)."""
    h = hashlib.sha256()
    _feed(h, list(parts))
    return h.hexdigest()


@cache  # the sources cannot change under a running suite; hashing them once per process is enough
def sources_digest() -> str:
    return digest(*(REPO / d for d in PRODUCT_DIRS))


class SharedCache:
    """Results stored under `root`, one entry per (name, key): `<name>-<digest>/value.pkl` and the entry's files."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def entry(self, name: str, key: Sequence[object]) -> Path:
        return self.root / f"{name}-{digest(name, sources_digest(), *key)[:20]}"

    def get(self, name: str, key: Sequence[object], compute: Callable[[Path], T]) -> T:
        """The result stored under (name, key), computed first if no one has.  `compute` gets an empty folder that
        stays with the result (for the files a result names, e.g. a report or a saved model) and returns a picklable
        value.  A compute that raises stores nothing: the error is the asker's, and the next asker tries again."""
        entry = self.entry(name, key)
        value_file = entry / "value.pkl"
        self.root.mkdir(parents=True, exist_ok=True)
        with open(entry.with_name(entry.name + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, also if this process dies
            if not value_file.exists():
                shutil.rmtree(entry, ignore_errors=True)  # what a compute that raised (or was killed) left
                (entry / "files").mkdir(parents=True)
                value = compute(entry / "files")
                partial = entry / "value.pkl.partial"
                partial.write_bytes(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
                os.replace(partial, value_file)  # the value file exists only whole
            return pickle.loads(value_file.read_bytes())


def cache_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run's shared temporary root: pytest-xdist gives each worker `<run's basetemp>/<worker id>` as its
    basetemp, so their parent is the run's own; without xdist the basetemp itself is."""
    base = tmp_path_factory.getbasetemp()
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-results"
