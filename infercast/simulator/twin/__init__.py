"""The fleet twin: a simulated inference fleet that reproduces the seed incidents (see docs/twin.md).

from infercast.simulator.twin import build_fleet, run_scenario, run_trace

The twin runs with no controller here; the arms (`basic`, `reactive`, `predictive`, `perfect-forecast`) are run by
`infercast.simulator.control.driver.run_arm`, which acts on the twin through its admin API.
"""

from infercast.simulator.twin.fleet import Fleet, build_fleet, trace_fleet
from infercast.simulator.twin.run import RunResult, run_scenario, run_trace, size_fleet_for_trace

__all__ = ["Fleet", "RunResult", "build_fleet", "run_scenario", "run_trace", "size_fleet_for_trace", "trace_fleet"]
