"""Exporter speed: render cost against plain prometheus_client gauges, and a scrape cycle with bad targets.

    nice -n 10 .venv/bin/python bench/exporter.py [--repeat 20] [--timeout 2.0]

1. A fleet of 64 nodes x 8 GPUs serving 3 versions (each node: one engine's serving series; each GPU: the GPU
   families).  It times one `/metrics` body rendered from the exporter's prepared frame, and the frame build
   (windows, derived scores, families) plus render, against prometheus_client rendering the same series from
   plain labelled `Gauge`s in a registry, all in this run.  Goal: render <= 1.5x the baseline.
2. 100 loopback HTTP targets serving a real vLLM payload, of which 10 refuse connections and 5 answer after
   3 x the timeout: a full scrape cycle must take at most the per-target timeout + 10%.
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from infercast.catalog import (
    BATCH_SATURATION_RATIO,
    GPU_DRAM_ACTIVE_RATIO,
    GPU_ECC_ERRORS_TOTAL,
    GPU_MEMORY_TOTAL_BYTES,
    GPU_MEMORY_USED_BYTES,
    GPU_PCIE_BYTES_TOTAL,
    GPU_POWER_WATTS,
    GPU_SM_OCCUPANCY_RATIO,
    GPU_TEMPERATURE_CELSIUS,
    GPU_UTILIZATION_RATIO,
    KV_BLOCK_ALLOCATION_FAILURES_TOTAL,
    KV_CACHE_FRAGMENTATION_RATIO,
    KV_CACHE_HIT_RATIO,
    KV_CACHE_USAGE_RATIO,
    MEMORY_EFFICIENCY_RATIO,
    REQUESTS_RUNNING,
    REQUESTS_WAITING,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from prometheus_client import CollectorRegistry, Gauge, generate_latest  # noqa: E402

from infercast.config import load_config, parse_config  # noqa: E402
from infercast.exporters.base import Sample  # noqa: E402
from infercast.exporters.server import Exporter, build_sources  # noqa: E402
from infercast.servers import free_port  # noqa: E402

VERSIONS = ("v4", "v3.5", "v5")


def fleet_samples(nodes: int = 64, gpus: int = 8) -> list[list[Sample]]:
    """Per node: what its engine and dcgm-exporter targets yield after parsing."""
    out = []
    for n in range(nodes):
        version = VERSIONS[n % 3]
        pool = f"pool-{version}"
        s = {"pool": pool, "version": version, "instance": f"node-{n}"}
        samples = [
            Sample(KV_CACHE_USAGE_RATIO, s, 0.5 + n / 200),
            Sample(KV_CACHE_FRAGMENTATION_RATIO, s, 0.1),
            Sample(KV_BLOCK_ALLOCATION_FAILURES_TOTAL, s, 10.0 * n),
            Sample(BATCH_SATURATION_RATIO, s, 0.7),
            Sample(REQUESTS_RUNNING, s, 90.0),
            Sample(REQUESTS_WAITING, s, 4.0),
            Sample(MEMORY_EFFICIENCY_RATIO, s, 0.8),
            Sample(KV_CACHE_HIT_RATIO, s, 0.4),
        ]
        for g in range(gpus):
            lab = {"node": f"node-{n}", "gpu": str(g), "uuid": f"GPU-{n:04d}-{g}"}
            samples += [
                Sample(GPU_MEMORY_USED_BYTES, lab, 7.0e10),
                Sample(GPU_MEMORY_TOTAL_BYTES, lab, 8.5e10),
                Sample(GPU_UTILIZATION_RATIO, lab, 0.9),
                Sample(GPU_SM_OCCUPANCY_RATIO, lab, 0.3),
                Sample(GPU_DRAM_ACTIVE_RATIO, lab, 0.6),
                Sample(GPU_TEMPERATURE_CELSIUS, lab, 70.0),
                Sample(GPU_POWER_WATTS, lab, 600.0),
                Sample(GPU_PCIE_BYTES_TOTAL, {**lab, "direction": "tx"}, 1e12),
                Sample(GPU_PCIE_BYTES_TOTAL, {**lab, "direction": "rx"}, 2e12),
                Sample(GPU_ECC_ERRORS_TOTAL, {**lab, "type": "correctable"}, 0.0),
                Sample(GPU_ECC_ERRORS_TOTAL, {**lab, "type": "uncorrectable"}, 0.0),
            ]
        out.append(samples)
    return out


class MemorySource:
    kind = "vllm"

    def __init__(self, name: str, samples: list[Sample]) -> None:
        self.name, self.samples = name, samples

    def collect(self) -> list[Sample]:
        return self.samples

    def now(self) -> float:
        return time.monotonic()


def bench_config():
    data = {
        "versions": {
            v: {
                "model": {"name": f"chat-{v}", "layers": 40, "kv_heads": 8, "head_dim": 128, "weights_gb": 16},
                "kv_manager": "paged",
                "batcher": {"kind": "dynamic", "max_batch": 256},
            }
            for v in VERSIONS
        },
        "pools": {
            f"pool-{v}": {"version": v, "nodes": 22, "gpus_per_node": 8, "gpu": {"memory_gb": 80}} for v in VERSIONS
        },
    }
    data["pools"]["pool-v4"]["failover"] = ["pool-v3.5"]
    return parse_config(data)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def render_bench(repeat: int, nodes: int = 64, gpus: int = 8) -> dict:
    """One `/metrics` render of a fleet of `nodes` x `gpus` against prometheus_client Gauges with the same series
    (bench/scale.py runs it at 512 x 8)."""
    per_node = fleet_samples(nodes, gpus)
    config = bench_config()
    sources = [MemorySource(f"node-{i}", s) for i, s in enumerate(per_node)]
    exp = Exporter(config, sources)
    exp.scrape()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(exp)
    body = generate_latest(reg)

    # baseline: the same series as plain labelled gauges (what an exporter written with Gauge.labels() renders)
    base = CollectorRegistry(auto_describe=False)
    gauges: dict[str, Gauge] = {}
    for fam in exp.collect():
        for s in fam.samples:
            g = gauges.get(s.name)
            if g is None:
                g = gauges[s.name] = Gauge(s.name, fam.documentation, sorted(s.labels), registry=base)
            g.labels(**s.labels).set(s.value)
    base_body = generate_latest(base)
    series = body.count(b"\n") - body.count(b"\n#")

    t_base = best(lambda: generate_latest(base), repeat)
    t_render = best(lambda: generate_latest(reg), repeat)
    t_frame = best(lambda: (exp._build(time.monotonic()), generate_latest(reg)), repeat)
    exp.close()
    return {
        "nodes": nodes,
        "gpus_per_node": gpus,
        "series": series,
        "body_bytes": len(body),
        "baseline_series": base_body.count(b"\n") - base_body.count(b"\n#"),
        "baseline_ms": t_base * 1e3,
        "render_ms": t_render * 1e3,
        "frame_and_render_ms": t_frame * 1e3,
        "render_ratio": t_render / t_base,
        "frame_and_render_ratio": t_frame / t_base,
    }


class _Server(ThreadingHTTPServer):
    request_queue_size = 256
    daemon_threads = True


def serve(body: bytes, delay: float) -> _Server:
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            if delay:
                time.sleep(delay)
            try:
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass

    srv = _Server(("127.0.0.1", 0), H)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def cycle_bench(timeout: float, cycles: int) -> dict:
    body = (REPO / "tests" / "data" / "engines" / "vllm.prom").read_bytes()
    good = [serve(body, 0.0) for _ in range(85)]
    slow = [serve(body, 3 * timeout) for _ in range(5)]
    urls = [f"http://127.0.0.1:{s.server_address[1]}/metrics" for s in good + slow]
    urls += [f"http://127.0.0.1:{free_port()}/metrics" for _ in range(10)]  # nothing listens: dead
    base = load_config(REPO / "examples" / "flash-sale.yaml").model_dump()
    base["targets"] = [{"name": f"t{i:03d}", "kind": "vllm", "url": u} for i, u in enumerate(urls)]
    base["exporter"]["scrape_timeout_seconds"] = timeout
    config = parse_config(base)
    exp = Exporter(config, build_sources(config))
    took = []
    for _ in range(cycles):
        t0 = time.monotonic()
        exp.scrape()
        took.append(time.monotonic() - t0)
    up = sum(1 for st in exp.states if st.up)
    exp.close()
    for s in good + slow:
        s.shutdown()
    return {
        "targets": len(urls),
        "up": up,
        "timeout_s": timeout,
        "cycles": took,
        "worst_cycle_s": max(took),
        "worst_over_timeout": max(took) / timeout,
    }


def table_speed(result: dict) -> str:
    r, c = result["render"], result["cycle"]
    return "\n".join(
        [
            "| measurement | result | goal |",
            "|---|---|---|",
            f"| {r['nodes']} nodes x {r['gpus_per_node']} GPUs, 3 versions: {r['series']:,} series, `/metrics` render "
            f"vs prometheus_client `Gauge`s rendering the same series in the same run | {r['render_ms']:.1f} ms vs "
            f"{r['baseline_ms']:.1f} ms: **{r['render_ratio']:.2f}x** | <= 1.5x |",
            f"| same, frame build (windows, derived scores, families) + render | {r['frame_and_render_ms']:.1f} ms: "
            f"**{r['frame_and_render_ratio']:.2f}x** | - (once per scrape cycle, not per request) |",
            f"| {c['targets']} loopback targets, 10 dead, 5 answering after {3 * c['timeout_s']:g} s, timeout "
            f"{c['timeout_s']:g} s: worst of {len(c['cycles'])} full cycles | {c['worst_cycle_s']:.2f} s: "
            f"**{c['worst_over_timeout']:.3f}x** the timeout | <= 1.10x |",
            "",
            f"_Medians of {result['repeat']} renders; {result['machine']}; `bench/exporter.py`._",
        ]
    )


TABLES = {"speed": table_speed}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--timeout", type=float, default=2.0)
    p.add_argument("--cycles", type=int, default=3)
    p.add_argument("--no-publish", action="store_true", help="print only; do not write docs/results/exporter.json")
    a = p.parse_args()
    logging.basicConfig(level=logging.ERROR)  # the dead and slow targets are logged as down: expected here
    r = render_bench(a.repeat)
    print(f"render: {r['series']} series (baseline {r['baseline_series']})")
    print(f"  prometheus_client Gauges (baseline): {r['baseline_ms']:.1f} ms")
    print(
        f"  exporter /metrics render:            {r['render_ms']:.1f} ms  ratio {r['render_ratio']:.2f}x (goal <= 1.5x)"
    )
    print(
        f"  frame build + render:                {r['frame_and_render_ms']:.1f} ms  "
        f"ratio {r['frame_and_render_ratio']:.2f}x"
    )
    c = cycle_bench(a.timeout, a.cycles)
    print(f"scrape cycle: {c['targets']} targets (10 dead, 5 slow), {c['up']} up, per-target timeout {a.timeout:g} s")
    print("  cycles: " + ", ".join(f"{t:.2f} s" for t in c["cycles"]))
    print(f"  worst cycle / timeout: {c['worst_over_timeout']:.3f} (goal <= 1.10)")
    ok = r["render_ratio"] <= 1.5 and c["worst_over_timeout"] <= 1.10
    print("PASS" if ok else "MISS")
    if not a.no_publish:
        import platform

        from results import publish

        machine = f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}"
        result = {"render": r, "cycle": c, "repeat": a.repeat, "machine": machine}
        print("published", publish("exporter", result, TABLES))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
