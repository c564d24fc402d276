"""The twin reproduces seed 000's 3 AM avalanche and seed 004's benchmark table (docs/twin.md's calibration targets).

Each assertion names what the seed reports; the runs are shared by the module (about a minute on 2 cores).
"""

from __future__ import annotations

import numpy as np
import pytest

from infercast.actuators.inputs import reference_series
from infercast.config import load_config
from infercast.simulator.control.driver import run_arm

SURGE = 600.0


@pytest.fixture(scope="module")
def cfg(repo_root):
    return load_config(repo_root / "examples" / "flash-sale.yaml")


@pytest.fixture(scope="module")
def runs(cfg, repo_root, shared_results):
    # the first 20 minutes: ten before the sale, ten into it
    seconds, arms, seed, step = 1200.0, ("none", "reactive"), 0, 2.5

    def compute(_):
        short = cfg.model_copy(update={"scenario": cfg.scenario.model_copy(update={"duration_seconds": seconds})})
        return {c: run_arm(short, c, seed=seed, step_seconds=step) for c in arms}

    key = (repo_root / "examples" / "flash-sale.yaml", seconds, arms, seed, step)  # the file `cfg` is read from
    return shared_results.get("flash-sale-runs", key, compute)


def _first_failing_v4(result):
    nodes = result.nodes
    t_oom = result.summary["first_oom_seconds"]
    down = nodes[(nodes.t > t_oom) & (nodes.t <= t_oom + 2.5) & ~nodes.up & nodes.node.str.startswith("v4-main")]
    assert len(down), "the first OOM must be on a v4 node"
    name = down.node.iloc[0]
    return name, t_oom, nodes[(nodes.node == name) & (nodes.t <= t_oom)]


def test_steady_state_before_the_surge_is_healthy(runs):
    r = runs["none"]
    ts = r.timeseries
    v4 = ts[(ts.pool == "v4-main") & (ts.t > 300) & (ts.t <= SURGE)]
    # seed 000: memory at 45% before the flash sale; nothing crashes, nothing degrades
    assert 0.38 <= v4["memory_usage"].mean() <= 0.52
    assert r.summary["first_oom_seconds"] > SURGE
    assert r.summary["first_degradation_seconds"] is None or r.summary["first_degradation_seconds"] > SURGE
    # the >8k share the router sees is the seed's 15%
    assert 0.12 <= v4.long_share.mean() <= 0.18


def test_first_v4_node_climbs_45_72_89_98_then_ooms(runs):
    r = runs["none"]
    name, t_oom, tr = _first_failing_v4(r)
    # OOM within 30-150 s of the surge (seed: about 90 s)
    assert 30.0 <= t_oom - SURGE <= 150.0, t_oom
    pre = tr.loc[(tr.t > SURGE - 60) & (tr.t <= SURGE), "memory_usage"]
    assert 0.35 <= pre.mean() <= 0.55, f"{name} before the surge: {pre.mean():.2f} (seed: 45%)"
    during = tr[tr.t > SURGE]
    mem = during["memory_usage"].to_numpy()
    t = during.t.to_numpy()

    def first_at(level):
        hit = np.flatnonzero(mem >= level)
        assert len(hit), f"{name} never reached {level:.0%} before its OOM: {np.round(mem, 2)}"
        return t[hit[0]]

    # sampled every 2.5 s it passes about 72% and then about 89% before the OOM (the seed's staircase) ...
    t72, t89 = first_at(0.70), first_at(0.85)
    assert SURGE < t72 <= t89 < t_oom
    # ... and the card tips over from 98% or more (the seed's last reading before the OOM)
    oom = next(e for e in r.events if e["event"] == "oom")
    assert oom["node"] == name and oom["memory_usage"] >= 0.98
    # fragmentation of its paged KV cache rises above 25% along the way (sampled, or at the moment it broke)
    assert max(during["fragmentation"].max(), oom["fragmentation"]) > 0.25


def test_the_v4_pool_climbs_the_seeds_staircase(runs):
    r = runs["none"]
    ts = r.timeseries
    v4 = ts[ts.pool == "v4-main"]
    t_oom = r.summary["first_oom_seconds"]
    before = v4[(v4.t > SURGE - 30) & (v4.t <= SURGE)]["memory_usage"].mean()
    at_oom = v4[(v4.t > t_oom - 7.5) & (v4.t <= t_oom)]["memory_usage"].mean()
    # the pool's mean memory: about 45% before, about 72% or more by the first OOM
    assert 0.38 <= before <= 0.52
    assert at_oom >= 0.65, at_oom


def test_router_then_fails_over_to_v35_which_falls_over(runs):
    r = runs["none"]
    t_oom = r.summary["first_oom_seconds"]
    t_deg = r.summary["first_degradation_seconds"]
    assert t_deg is not None and t_deg >= t_oom - 1.0, "failover to v3.5 comes after the first v4 OOM"
    assert t_deg - t_oom <= 120.0
    nodes = r.nodes
    v35 = nodes[nodes.node.str.startswith("v3.5") & (nodes.t >= t_deg) & (nodes.t <= t_deg + 60.0)]
    crashed = (~v35.up).any()
    saturated = ((v35.running >= 32) | (v35.waiting > 0)).any()
    assert crashed or saturated, "v3.5 nodes crash or saturate within a minute of the failover"


def test_urgent_p99_after_the_surge_is_ten_times_before(runs):
    s = runs["none"].summary
    assert s["p99_latency_ms"] >= 10.0 * s["p99_latency_ms_pre"], s


def test_the_seeds_fixes_do_what_the_seeds_say(runs):
    none, reactive = runs["none"].summary, runs["reactive"].summary
    # seed 000's memory breaker, checked per request (显存双重熔断: stop admitting at 80%): no card runs out of memory
    assert none["oom_events"] > 0 and reactive["oom_events"] == 0
    # seed 004: the protections raise what is served (availability 61% -> 97%) ...
    assert reactive["goodput_rps"] > none["goodput_rps"]
    assert reactive["served"] > none["served"]
    # ... and the fleet recovers (seed 004: 45 s for its dynamic breakers), where the unprotected one does not
    assert reactive["recovered"]


# seed 004's table (生产环境基准测试): goodput relative to no protection, urgent P99 ms, memory efficiency.
# The bed's load-test multiple (4.5) was fitted to the three goodput ratios (docs/twin.md): asserting them checks that
# the fit still holds on the file as committed, not a prediction.  Memory efficiency, P99 and recovery were not fitted.
SEED004_GOODPUT = {"basic": 238 / 142, "reactive": 315 / 142, "perfect-forecast": 400 / 142}
SEED004_EFFICIENCY = {"none": 0.58, "basic": 0.72, "reactive": 0.89}
SEED004_NONE_P99_MS = 15_000.0
GOODPUT_REL = 0.20  # goodput ratios: the table's within 20%
EFFICIENCY_ABS = 0.07  # memory efficiency: the table's within 7 points
RECOVERY_REL = 0.30  # recovery: the table's bounds within 30%
VLLM_DEFAULT_UTILIZATION = 0.9  # vLLM's gpu_memory_utilization default (issue 22, finding 7)


@pytest.fixture(scope="module")
def bed_cfg(repo_root):
    return load_config(repo_root / "examples" / "seed004-bench.yaml")


@pytest.fixture(scope="module")
def bed(bed_cfg, repo_root, shared_results):
    """Seed 004's test bed and load test (examples/seed004-bench.yaml), every arm on the file's seed."""
    arms, seed = ("none", "basic", "reactive"), 0

    def compute(_):
        s = {c: run_arm(bed_cfg, c, seed=seed) for c in arms}
        s["perfect-forecast"] = run_arm(
            bed_cfg, "perfect-forecast", seed=seed, reference=reference_series(s["reactive"].timeseries)
        )
        return {c: r.summary for c, r in s.items()}

    key = (repo_root / "examples" / "seed004-bench.yaml", arms, "perfect-forecast", seed)  # the file `bed_cfg` reads
    return shared_results.get("seed004-bed-summaries", key, compute)


def test_seed004_bed_runs_at_vllms_default_memory_utilization(bed_cfg):
    """The bed is vLLM's default, not seed 000's defect (a KV pool allowed to fill the whole card)."""
    assert {p.memory_utilization for p in bed_cfg.pools.values()} == {VLLM_DEFAULT_UTILIZATION}


def test_seed004_unprotected_bed_collapses_into_a_queue_not_an_oom(bed_cfg, bed):
    """What the table's no-protection row is at 0.9: the KV pool stops at 90% of the card, so prefill activations
    always fit and no card runs out of memory; the overload waits for KV blocks instead, up to the client's 30 s
    timeout (its urgent P99 is that timeout, above the table's 15 s), the timeouts open the pool's breaker before the
    kill at 300 s, and what is served late is not goodput.  The same bed at 1.0 (seed 000's defect) crashes."""
    none = bed["none"]
    fault = bed_cfg.scenario.faults[0].at_seconds
    assert none["oom_events"] == 0 and none["first_oom_seconds"] is None, none
    assert none["p99_latency_ms"] >= SEED004_NONE_P99_MS, none["p99_latency_ms"]
    assert none["p99_latency_ms"] >= 1000.0 * bed_cfg.router.client_timeout_seconds, "served at the client's timeout"
    assert none["failed"] > bed["reactive"]["failed"], "timed out in the engines' queues"
    assert none["recovery_from_seconds"] < fault, "failing (its breaker open on timeouts) before the kill"
    at_one = bed_cfg.model_copy(
        update={"pools": {k: p.model_copy(update={"memory_utilization": 1.0}) for k, p in bed_cfg.pools.items()}}
    )
    assert run_arm(at_one, "none", seed=0).summary["oom_events"] > 0, "at 1.0 the unprotected bed runs out of memory"


def test_seed004_goodput_and_memory_efficiency_as_its_table_says(bed):
    """Goodput / `none` of each fix is the table's within 20% (the fitted cells), memory efficiency of the first three
    rows within 7 points (not fitted: the allocator's release time is the twin's default)."""
    base = bed["none"]["goodput_rps"]
    for arm, ratio in SEED004_GOODPUT.items():
        assert bed[arm]["goodput_rps"] / base == pytest.approx(ratio, rel=GOODPUT_REL), arm
    for arm, eff in SEED004_EFFICIENCY.items():
        assert bed[arm]["memory_efficiency"] == pytest.approx(eff, abs=EFFICIENCY_ABS), arm


def test_seed004_urgent_p99_in_the_order_of_its_table(bed):
    """The order holds (15,000 > 1,200 > 680 > < 500 ms); the values do not (docs/twin.md says why)."""
    p99 = {arm: s["p99_latency_ms"] for arm, s in bed.items()}
    assert p99["none"] > p99["basic"] > p99["reactive"] >= p99["perfect-forecast"], p99
    assert p99["perfect-forecast"] < 500.0, "the ideal row: under 500 ms"


def test_seed004_recovery_after_the_killed_node(bed):
    """Recovery after the killed node (seed 004's 10 s P99 under 1 s, held): the seeds' fixes recover at least as
    fast as the table's 45 s (within 30%), the ideal row in under 30 s, and no arm runs out of memory.  The
    unprotected bed has been failing since its breaker first opened on timeouts in the load test, and recovers from
    that only after the load test ends: the table's > 300 s (within 30%).  Not reproduced: basic rate limiting's
    120 s (docs/twin.md)."""
    rec = {arm: s["recovery_seconds"] for arm, s in bed.items()}
    assert all(s["recovered"] for s in bed.values()), rec
    assert bed["reactive"]["recovery_seconds"] <= 45.0 * (1 + RECOVERY_REL), rec
    assert bed["perfect-forecast"]["recovery_seconds"] < 30.0, rec
    assert bed["none"]["recovery_seconds"] >= (1 - RECOVERY_REL) * 300.0, rec
    assert rec["none"] > rec["basic"] > rec["reactive"] >= rec["perfect-forecast"], rec
    assert all(s["oom_events"] == 0 for s in bed.values()), {a: s["oom_events"] for a, s in bed.items()}
