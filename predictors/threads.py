"""One math thread for a backtest: OpenBLAS (numpy's and scipy's bundled copies) and torch's intra-op pool.

A backtest solves thousands of tiny problems one after another: Holt-Winters' L-BFGS-B fit on 5 parameters per
forecast, the LSTM on a 60-step window.  With their default pools (a thread per core), every BLAS call on a 5-element
vector and every LSTM step wakes and joins threads; on a busy machine those threads wait for a core, and the cost is
that wait, not arithmetic.  Measured on this project's 2-core machine at load 6-8 (issue 37): an hour of ServeGen
replayed and backtested took 98.8 s wall (38.6 s user CPU) with the default pools, 28.5 s (11.2 s) with one thread.
The scores are the same numbers (tests/predictors/test_threads.py compares a backtest's JSON both ways; the
predictor service runs torch on one thread too, `predictor.torch_threads`).

OpenBLAS is reached through ctypes (its `*_set_num_threads` entry points in the wheels' bundled libraries), because
its thread count is otherwise fixed from the environment when numpy is first imported; where no such library is found
(another BLAS, another platform) nothing changes there.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import importlib.util
import logging
import os
import sys
from collections.abc import Iterator

log = logging.getLogger(__name__)

#: Entry points by the names the numpy/scipy wheels' OpenBLAS builds export them (64-bit-int builds suffix `64_`).
_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads")
_GETTERS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads")


def _openblas_paths() -> list[str]:
    """The OpenBLAS libraries bundled with numpy and scipy (their wheels' `*.libs` / `.dylibs` folders)."""
    out: list[str] = []
    for pkg in ("numpy", "scipy"):
        spec = importlib.util.find_spec(pkg)
        if spec is None or not spec.submodule_search_locations:
            continue
        root = next(iter(spec.submodule_search_locations))
        for folder in (f"{root}.libs", os.path.join(root, ".dylibs")):
            out += sorted(glob.glob(os.path.join(folder, "*openblas*")))
    return out


def _controls() -> list[tuple[ctypes._CFuncPtr, ctypes._CFuncPtr]]:
    """(get, set) thread-count functions of every bundled OpenBLAS found."""
    found = []
    for path in _openblas_paths():
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        get = next((getattr(lib, n) for n in _GETTERS if hasattr(lib, n)), None)
        put = next((getattr(lib, n) for n in _SETTERS if hasattr(lib, n)), None)
        if get is not None and put is not None:
            get.restype = ctypes.c_int
            put.argtypes = [ctypes.c_int]
            found.append((get, put))
    return found


@contextlib.contextmanager
def one_math_thread() -> Iterator[None]:
    """Run the block with one OpenBLAS thread and one torch intra-op thread; the previous counts come back after."""
    blas = []
    try:
        blas = _controls()
    except Exception as e:  # a BLAS we cannot steer only costs speed
        log.debug("OpenBLAS thread control unavailable: %s", e)
    before_blas = [get() for get, _ in blas]
    torch = sys.modules.get("torch")  # only if a model loaded it: importing torch for nothing costs seconds
    before_torch = torch.get_num_threads() if torch is not None else None
    try:
        for _, put in blas:
            put(1)
        if torch is not None:
            torch.set_num_threads(1)
        yield
    finally:
        for (_, put), n in zip(blas, before_blas, strict=True):
            put(max(1, int(n)))
        if torch is not None and before_torch is not None:
            torch.set_num_threads(before_torch)


__all__ = ["one_math_thread"]
