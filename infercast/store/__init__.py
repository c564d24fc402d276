"""One query interface over the metric stores: Prometheus (`prometheus.py`) and the in-memory store (`memory.py`).

Both answer `query_range(metric, matchers, start, end, step) -> list[Series]` with the same meaning: for every
label set of `metric` that matches `matchers` (exact label values), the samples on the grid `start, start+step, ...,
end`, where the value at a grid point is the newest raw sample at most `lookback` seconds older than it (Prometheus'
instant-vector semantics; its default lookback is 300 s).  Grid points with no such sample are left out, so a
series that appears or disappears mid-range is shorter, never padded with guesses.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np


class StoreError(RuntimeError):
    """The store could not answer (down, slow, refused the query, returned garbage); the message says which."""


@dataclass(frozen=True)
class Series:
    """One label set's samples: `t` in seconds (Unix or simulated), `v` the values (NaN allowed, as stored)."""

    labels: dict[str, str]
    t: np.ndarray
    v: np.ndarray

    def __post_init__(self) -> None:
        if self.t.shape != self.v.shape or self.t.ndim != 1:
            raise ValueError(f"t and v must be 1-D of the same length, got {self.t.shape} and {self.v.shape}")


@runtime_checkable
class Store(Protocol):
    def query_range(
        self, metric: str, matchers: dict[str, str] | None, start: float, end: float, step: float
    ) -> list[Series]: ...


def grid(start: float, end: float, step: float) -> np.ndarray:
    """The evaluation times of a range query (inclusive of `end` when it falls on the grid)."""
    if step <= 0:
        raise ValueError(f"step must be positive, got {step}")
    if end < start:
        raise ValueError(f"end ({end}) is before start ({start})")
    n = int(np.floor((end - start) / step + 1e-9)) + 1
    return start + step * np.arange(n)


__all__ = ["Series", "Store", "StoreError", "grid"]
