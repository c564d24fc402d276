"""Every arm runs on a real trace: each format the twin reads (Azure CSV, Mooncake JSONL, ServeGen directory), cut to
a few minutes, on the fleet sized for it (`sized_trace_fleet`), through the one driver; `infercast twin run --trace`
as a user runs it; and a fleet file whose quota lanes name streams a trace does not have."""

from __future__ import annotations

import argparse
import json
import logging
import math
import subprocess
import sys

import pytest

from infercast.config import load_config
from infercast.simulator.control.driver import ARMS, run_arm
from infercast.simulator.control.plans import better
from infercast.simulator.replay.traces import load_trace
from infercast.simulator.twin import fleet as twin_fleet
from infercast.simulator.twin.layout import protected_layout
from infercast.simulator.twin.tracefleet import always_on_nodes, sized_trace_fleet
from infercast.simulator.twin_cli import ALIASES, CONTROLS, add_arguments

# (path under tests/data, load_trace's window, Trace.window): a few minutes of each, the busy part included
SLICES = {
    "azure": ("traces/azure/AzureLLMInferenceTrace_code.csv", {}, (0.0, 360.0)),
    "mooncake": ("traces/mooncake/conversation_trace.jsonl", {}, (0.0, 240.0)),
    "servegen": ("traces/servegen/language/m-large", {"start_s": 0.0, "end_s": 480.0}, None),
}
#: what every arm's summary carries, finite (`infercast twin run --json`; docs/twin.md)
KEYS = ("goodput_rps", "urgent_goodput_rps", "oom_events", "p99_latency_ms", "gpu_seconds", "token_goodput_tps")
TIER_KEYS = ("offered", "served", "goodput_rps", "token_goodput_tps", "offered_tps")
LOOP_ARMS = ("scheduled", "last-value", "predict-linear", "predictive", "perfect-forecast")  # one control loop


@pytest.fixture(scope="module")
def cfg(repo_root):
    return load_config(repo_root / "examples" / "flash-sale.yaml")


def _trace(cfg, data_dir, kind):
    path, kw, window = SLICES[kind]
    trace = load_trace(data_dir / path, lengths=cfg.scenario.lengths, **kw)
    return trace.window(*window) if window else trace


def _finite(x) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def test_the_cli_lists_every_arm_of_the_driver():
    assert CONTROLS == ARMS
    p = argparse.ArgumentParser()
    add_arguments(p)
    args = p.parse_args(["run", "--trace", "t.csv", "--control", "oracle", "--search", "fast"])
    assert args.control in ALIASES and args.search == "fast"
    assert p.parse_args(["run", "--trace", "t.csv"]).search == "full"


def test_always_on_nodes_serve_the_median_minute_and_standby_the_rest():
    assert always_on_nodes(10, 3.0, 10.0, split=False) == (3, 7)
    assert always_on_nodes(10, 3.1, 10.0, split=False) == (4, 6)
    assert always_on_nodes(10, 0.0, 10.0, split=False) == (1, 9)
    assert always_on_nodes(10, 0.0, 10.0, split=True) == (2, 8)  # a short and a long pool need a node each
    assert always_on_nodes(4, 4.0, 4.0, split=False) == (4, 1)  # a flat trace still has a standby node


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(SLICES))
def test_every_arm_runs_on_each_trace_format_and_the_accounting_adds_up(cfg, data_dir, kind):
    trace = _trace(cfg, data_dir, kind)
    sized, notes = sized_trace_fleet(trace, cfg)
    assert "sized for the trace" in notes[0] and "token bucket at" in notes[1] and "no quota lanes" in notes[2]
    # the always-on pool, split by context, and its standby pool, which the autoscaler draws on
    (pool, pc), (standby, sc) = sized.pools.items()
    assert sc.standby and standby == f"{pool}-standby" and sc.nodes >= 1 and pc.nodes >= 2
    pr = sized.protections
    assert pr.autoscaler.reservoir == standby and pr.context_pools.pool == pool and not pr.quota_lanes
    summaries = {}
    for arm in ARMS:
        # hindsight's full search: on these slices the fast one (the best static split, then its change points)
        # misses the plan that beats perfect-forecast on Azure (a standby node from 120 s, where from 0 s it serves
        # less: outcomes are not monotonic in capacity)
        s = run_arm(sized, arm, 0, trace=trace, search="full").summary
        summaries[arm] = s
        assert s["control"] == arm
        assert s["served"] + s["rejected"] + s["failed"] + s["in_flight"] == s["offered"] > 0, arm
        for k in KEYS:
            assert _finite(s[k]), (arm, k, s[k])
        assert set(s["tiers"]) == {"urgent", "normal", "low"}
        for tier in s["tiers"].values():
            assert all(_finite(tier[k]) for k in TIER_KEYS), (arm, tier)
        assert sum(t["offered"] for t in s["tiers"].values()) == s["offered"]
        assert isinstance(s["actions"], int)
        assert ("decisions" in s) == (arm in LOOP_ARMS), arm
    h = summaries["hindsight"]
    assert h["search"] == "full" and isinstance(h["plan"], list) and h["plan_text"] and len(h["candidates"]) >= 2
    # reactive is one of hindsight's candidates (the empty plan), so the best plan does at least as well
    assert "no plan (reactive)" in [c["plan"] for c in h["candidates"]]
    assert h["urgent_goodput_rps"] >= summaries["reactive"]["urgent_goodput_rps"]
    # the bound holds against every arm built on reactive (the levers it searches are theirs): none beats
    # hindsight's plan by more than a tie (issue 22: where one does, the search is too narrow).  `none` and `basic`
    # run without the seeds' fixes, which cost a calm trace a little (docs/control.md)
    for arm, s in summaries.items():
        if arm in ("none", "basic"):
            continue
        assert not better(s, h), (arm, {k: s[k] for k in ("urgent_goodput_rps", "goodput_rps", "gpu_seconds")}, h)


@pytest.mark.slow
def test_cli_runs_a_controlled_arm_on_a_trace_with_the_fleet_sized_for_it(repo_root, data_dir, tmp_path):
    trace = data_dir / SLICES["azure"][0]
    r = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "twin", "run", "--trace", str(trace), "--size-fleet",
         "--control", "reactive", "--json", "--out", str(tmp_path)],
        capture_output=True, text=True, cwd=repo_root, timeout=300,
    )  # fmt: skip
    assert r.returncode == 0, r.stderr[-3000:]
    assert "sized for the trace" in r.stderr and "always on" in r.stderr and "standby" in r.stderr
    s = json.loads(r.stdout)
    assert s["control"] == "reactive"
    for k in KEYS:
        assert _finite(s[k]), k
    assert set(s["tiers"]) == {"urgent", "normal", "low"} and isinstance(s["actions"], int)
    assert s["served"] + s["rejected"] + s["failed"] + s["in_flight"] == s["offered"] > 1000
    assert (tmp_path / "summary.json").exists()


def test_quota_lanes_for_streams_the_trace_lacks_are_left_out_with_one_warning(cfg, data_dir, caplog, monkeypatch):
    """Without --size-fleet the file's protections stay as written: its lane for the `flash-sale` stream has no
    stream to act on in a trace, so `protect()` leaves it out and says so once, not once a run."""
    monkeypatch.setattr(twin_fleet, "_WARNED", set())
    trace = _trace(cfg, data_dir, "mooncake").window(0.0, 60.0)
    caplog.set_level(logging.WARNING, logger="infercast.simulator.twin.fleet")
    for _ in range(2):
        fleet = twin_fleet.trace_fleet(protected_layout(cfg), trace, 0)
        fleet.protect()
        assert fleet.router.lane_names == ["shared"]  # everyone's bucket, no lane of its own
    s = run_arm(cfg, "reactive", 0, trace=trace).summary
    assert s["served"] + s["rejected"] + s["failed"] + s["in_flight"] == s["offered"] > 0
    warned = [rec.getMessage() for rec in caplog.records if "quota_lanes" in rec.getMessage()]
    assert len(warned) == 1
    assert "'flash-sale'" in warned[0] and "'trace'" in warned[0] and "left out" in warned[0]
