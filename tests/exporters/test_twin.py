"""The in-process twin as a source: `infercast exporter --config examples/flash-sale.yaml --once` with nothing else
running prints the full catalog for every node of the seed's fleet."""

from __future__ import annotations

import subprocess
import sys
import threading
import time

from infercast.config import load_config
from infercast.exporters.cli import _drive_twin
from infercast.exporters.server import Exporter
from infercast.simulator.twin.source import TwinSource
from tests.exporters.conftest import REPO
from tests.exporters.test_server import get, render, samples

CONFIG = load_config(REPO / "examples" / "flash-sale.yaml")


def test_twin_nodes_feed_the_catalog():
    source = TwinSource(CONFIG)
    exp = Exporter(CONFIG, [source], clock=lambda: source.now())
    source.advance(30)
    exp.scrape()
    source.advance(30)
    exp.scrape()
    m = samples(render(exp))
    exp.close()
    nodes = [n.name for n in source.fleet.nodes]
    assert len(nodes) == sum(p.nodes for p in CONFIG.pools.values())
    for node in source.fleet.nodes:
        ups = [v for (n, lab), v in m.items() if n == "infercast_target_up" and dict(lab)["target"] == node.name]
        if node.up_at == float("inf"):
            assert ups == []  # a switched-off cold-standby node is not a target
        else:
            assert ups == [1 if node.up else 0]
    up = [n for n in source.fleet.nodes if n.up]
    assert up, "no twin node is up after a minute of quiet traffic"
    n0 = up[0]
    labels = {"instance": n0.name, "pool": n0.pool, "version": n0.version}
    assert 0 <= get(m, "infercast_kv_cache_usage_ratio", **labels) <= 1
    assert 0 <= get(m, "infercast_kv_cache_fragmentation_ratio", **labels) <= 1  # from the engine extension
    assert get(m, "infercast_batch_saturation_ratio", **labels) >= 0  # max_num_seqs from the extension
    assert get(m, "infercast_kv_block_allocation_failures_total", **labels) >= 0
    assert get(m, "infercast_memory_efficiency_ratio", **labels) > 0
    assert get(m, "infercast_router_requests_total", pool="v4-main", version="v4", priority="normal", outcome="ok") > 0
    assert 0 <= get(m, "infercast_health_score", pool="v4-main", version="v4") <= 100
    assert 0 <= get(m, "infercast_avalanche_risk_score", pool="v4-main") <= 100


def test_once_on_the_seed_fleet_prints_a_full_exposition():
    r = subprocess.run(
        [sys.executable, "-m", "infercast.tools.cli", "exporter", "--config", "examples/flash-sale.yaml", "--once"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert r.returncode == 0, r.stderr
    m = samples(r.stdout)
    names = {n for n, _ in m}
    for name in (
        "infercast_kv_cache_usage_ratio",
        "infercast_kv_cache_fragmentation_ratio",
        "infercast_kv_block_allocation_failures_total",
        "infercast_batch_saturation_ratio",
        "infercast_requests_running",
        "infercast_requests_waiting",
        "infercast_memory_efficiency_ratio",
        "infercast_router_requests_total",
        "infercast_avalanche_risk_score",
        "infercast_health_score",
        "infercast_health_dimension_score",
        "infercast_gpu_memory_used_bytes",
        "infercast_target_up",
        "infercast_target_scrape_duration_seconds",
    ):
        assert name in names, name
    assert get(m, "infercast_target_up", target="twin", kind="twin") == 1
    # the twin models no prefix cache (enable_prefix_caching="False", no prefix counters): hit ratio absent, not 0
    assert "infercast_kv_cache_hit_ratio" not in names
    # NVML is read only where it finds a GPU (issue 38 item 3): no GPU here, no NVML target (no permanent up 0)
    from infercast.exporters.nvml import find_gpus

    nvml = [v for (n, labels), v in m.items() if n == "infercast_target_up" and dict(labels).get("kind") == "nvml"]
    assert nvml == ([] if find_gpus()[0] == 0 else [1.0])


def test_split_pools_of_one_version_keep_the_twins_own_pool_labels():
    """With the seeds' layout (`reactive`: v4-main split into v4-short and v4-long, both serving v4), a dashboard or
    a forecast per pool sees each half under its own name: every node's series carry the twin's `node.pool`, not a
    pool looked up through the node's version."""
    from infercast.exporters.router import RouterRecorder
    from infercast.simulator.twin import build_fleet
    from infercast.simulator.twin.layout import protected_layout

    laid = protected_layout(CONFIG)
    fleet = build_fleet(laid, seed=0, recorder=RouterRecorder())  # the exporter reads the router's decisions
    fleet.protect()
    source = TwinSource(laid, fleet=fleet)
    source.advance(30)
    pools_seen: dict[str, str] = {}
    for s in source.collect():
        if s.name == "infercast_kv_cache_usage_ratio":
            pools_seen[s.labels["instance"]] = s.labels["pool"]
    by_node = {n.name: n.pool for n in fleet.nodes if n.up}
    assert pools_seen == by_node
    assert {"v4-short", "v4-long"} <= set(pools_seen.values())


def test_the_served_twin_keeps_to_the_wall_clock():
    """`infercast exporter --twin-speed S` drives the twin at S simulated seconds per wall second, not faster.
    The twin advances in whole 0.25 s ticks; adding up the wall time between calls ran it at 1.5x at 1x speed
    (every 0.5 s call took three ticks), so in `deploy/local-stack.sh` the flash sale came at 400 s of wall time
    while the predictor's calendar said 600 s.  Driven by a fast loop (0.05 s, one tick at most each time) for
    about 1.5 s of wall time, the twin must end within one tick of the wall clock."""
    source = TwinSource(CONFIG)
    tick = CONFIG.twin.tick_seconds
    stop = threading.Event()
    t0 = time.monotonic()
    driver = threading.Thread(target=_drive_twin, args=(source, 1.0, stop, 0.05))
    driver.start()
    time.sleep(1.5)
    stop.set()
    driver.join(5)
    elapsed = time.monotonic() - t0
    assert not driver.is_alive()
    # never ahead of the wall clock by more than the tick it ends on (the old loop: 5 s of twin in 1.5 s), which a
    # busy machine cannot break (it only slows the driver); and it advanced.  How well it keeps up is load-bound, so
    # no lower bound (issue 25: no wall-clock assertion a busy machine can fail)
    assert 0 < source.now() <= elapsed + tick, (source.now(), elapsed)
