"""Issue 24 item 8: the hostile-input suite.

Each finding of issue 24 has its own test (docs/security.md, "Tests": tests/actuators/test_intake.py, test_fencing.py,
test_single_leader.py, test_audit_truth.py, tests/exporters/test_scrape_faults.py, tests/test_config_bounds.py,
test_config_maxima.py, test_trace_bounds.py).  Here `bench/hostile.py` fires generated hostile payloads at every
listener (the actuator webhook, the exporter's ingest, the router admin API, the alert log, and the read-only
predictor /metrics and twin node pages), every parser (the exporter's text parser and collectors, fleet files,
traces, actions) and the backends' stored documents (the router's file, Redis) and must count no crash, hang,
memory growth or silent drop; and what it found is pinned (here, tests/test_trace_bounds.py and
tests/actuators/test_forged_records.py).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest

from infercast.config import ConfigError, load_config
from tests.conftest import REPO

TARGETS = {
    "webhook", "ingest", "router_api", "alert_log", "predictor_metrics", "twin_pages",
    "textparse", "config", "traces", "actions", "file_backend",
} | ({"redis_backend"} if shutil.which("redis-server") else set())  # fmt: skip


@pytest.mark.parametrize("engine", ["hypothesis", "random"])
def test_the_hostile_bench_finds_no_crash_hang_growth_or_silent_drop(tmp_path, engine):
    out = tmp_path / "hostile.json"
    r = subprocess.run(
        [sys.executable, "bench/hostile.py", "--n", "180", "--seed", "1", "--engine", engine, "--json", str(out)],
        capture_output=True, text=True, timeout=600, cwd=REPO, check=False,
    )  # fmt: skip
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    got = json.loads(out.read_text())["targets"]
    assert {t["target"] for t in got} == TARGETS
    assert sum(t["payloads"] for t in got) >= 180
    for t in got:
        assert (t["crashes"], t["hangs"], t["silent_drops"]) == (0, 0, 0), t
        assert t["growth_mib"] <= 64, t
    assert "crashes 0, hangs 0, memory growth 0, silent drops 0" in r.stdout


def test_a_fleet_file_nested_five_thousand_deep_is_a_config_error_not_a_recursion_crash(tmp_path):
    """Found by bench/hostile.py: `{` x 5000 made PyYAML's reader raise RecursionError (a traceback, rc 1); now it
    is a ConfigError saying so, and the command line exits 2."""
    path = tmp_path / "deep.yaml"
    path.write_text("{" * 5000)
    with pytest.raises(ConfigError, match="nested deeper than a fleet file can be"):
        load_config(path)
    r = subprocess.run([sys.executable, "-m", "infercast.tools.cli", "actuator", "--config", str(path)],
                       capture_output=True, text=True, timeout=120, cwd=REPO, check=False)  # fmt: skip
    assert r.returncode == 2 and "nested deeper" in r.stderr and "Traceback" not in r.stderr, r.stderr[-800:]
