"""`infercast demo`: the seed's avalanche replayed under every control, with a report (docs/demo.md)."""

from infercast.simulator.demo.cli import add_arguments, run

__all__ = ["add_arguments", "run"]
