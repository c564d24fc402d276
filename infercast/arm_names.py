"""The names of the arms the twin compares: one list for the driver (`infercast/simulator/control/driver.py`, which
builds them), the command line (`infercast twin run --control`, `infercast demo --arms`) and the benches.  Kept here,
with no imports, so that `--help` does not load the actuators."""

from __future__ import annotations

ARMS = (
    "none",
    "basic",
    "reactive",
    "scheduled",
    "last-value",
    "predict-linear",
    "predictive",
    "perfect-forecast",
    "hindsight",
)
ALIASES = {"oracle": "perfect-forecast"}  # the old name of perfect-forecast


def canonical(arm: str) -> str:
    """An arm's name, with the old names mapped to the new."""
    return ALIASES.get(arm, arm)


__all__ = ["ALIASES", "ARMS", "canonical"]
