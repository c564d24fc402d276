#!/usr/bin/env bash
# The project's test command (README, .ci/run): install what is missing, lint, then run the whole suite.
#
# In three runs: the tests that start no server on every core (pytest-xdist; a file's tests stay on one worker, so
# its module fixtures are built once) and, at the same time, the ones marked `servers` (real Prometheus,
# Alertmanager, Redis), two files at a time.  The server tests run the stack on the wall clock, time accelerated, and
# must not wait for a core: they run at normal priority, the CPU-bound tests under `nice -n 10`.  Then the real
# engines, alone.  Each run ends with its 15 slowest tests (where the budget goes).  Extra arguments go to every run;
# a run that selects nothing is not a failure.  INFERCAST_TEST_JOBS sets the number of workers of the first run
# (default: the cores), INFERCAST_SERVER_TEST_JOBS of the second (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --engines  # the real-engine tests (marked `engines`) need vLLM's CPU build: docs/lab.md
.venv/bin/ruff check .
.venv/bin/ruff format --check .

status=0
pytest_run() {  # the suite's pytest; 5 (no test selected) is no failure
  local rc=0
  "$@" || rc=$?
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then
    return "$rc"
  fi
}
PYTEST=(.venv/bin/python -m pytest -q -p no:cacheprovider --durations=15)
# The CPU-bound tests and the server tests at the same time: the server tests wait on the wall clock most of the time
# (two thirds of a core between them), so they run at normal priority and the CPU-bound ones under `nice -n 10`,
# which gives the servers the cores the moment they wake.  One after the other they took 8.5 + 5.5 minutes.
cpu_log="$(mktemp)"
trap 'rm -f "$cpu_log"' EXIT
pytest_run nice -n 10 "${PYTEST[@]}" -n "${INFERCAST_TEST_JOBS:-$(nproc)}" --dist loadfile -m "not servers" "$@" \
  >"$cpu_log" 2>&1 &
cpu_pid=$!
echo "test.sh: the tests that start no server run now under nice; their output follows the server tests'"
pytest_run "${PYTEST[@]}" -n "${INFERCAST_SERVER_TEST_JOBS:-2}" --dist loadfile -m "servers and not engines" "$@" ||
  status=$?
wait "$cpu_pid" || status=$?
echo "test.sh: the tests that start no server:"
cat "$cpu_log"
# Real vLLM engines (infercast lab): alone, since they load both cores.
pytest_run "${PYTEST[@]}" -m engines "$@" || status=$?
exit "$status"
