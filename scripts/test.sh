#!/usr/bin/env bash
# The project's test command (README, .ci/run): install what is missing, lint, then run the whole suite.
#
# In two runs: the tests that start no server on every core (pytest-xdist; a file's tests stay on one worker, so
# its module fixtures are built once), then the ones marked `servers` (real Prometheus, Alertmanager, Redis) apart
# from those: they run the stack on the wall clock, time accelerated, and must not compete with the CPU-bound tests.
# They mostly wait on that clock (the two longest, 100 s each, use a third of a core), so they run two files at a
# time.  Each run ends with its 15 slowest tests (where the budget goes).  Extra arguments go to both runs; a run
# that selects nothing is not a failure.  INFERCAST_TEST_JOBS sets the number of workers of the first run (default:
# the cores), INFERCAST_SERVER_TEST_JOBS of the second (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --engines  # the real-engine tests (marked `engines`) need vLLM's CPU build: docs/lab.md
.venv/bin/ruff check .
.venv/bin/ruff format --check .

status=0
run() {
  local rc=0
  .venv/bin/python -m pytest -q -p no:cacheprovider --durations=15 "$@" || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then  # 5: no test selected
    status=$rc
  fi
}
run -n "${INFERCAST_TEST_JOBS:-$(nproc)}" --dist loadfile -m "not servers" "$@"
run -n "${INFERCAST_SERVER_TEST_JOBS:-2}" --dist loadfile -m "servers and not engines" "$@"
# Real vLLM engines (infercast lab): alone, since they load both cores.
run -m engines "$@"
exit "$status"
