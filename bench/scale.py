"""Scale on Kubernetes (issue 14): the predictor's tick at 10,000 series on one replica and on two shards, and the
exporter's /metrics render at 512 nodes x 8 GPUs.

    nice -n 10 .venv/bin/python bench/scale.py [--series 10000] [--nodes 512] [--repeat 3] [--no-publish]

1. Forecasting: 10,000 (pool, version) KV-usage series with an hour of 15 s history, served from memory (the cost
   measured is the forecasting, not Prometheus).  One `PredictorLoop.tick` over all of them is the baseline; then
   each of two replicas' ticks through `ShardedStore` (`--shard i/2`), one after the other in this process.  Two
   replicas run side by side on their own pods, so a tick costs them the slower shard's time: the figure is that
   over the baseline (1/2 is a perfect split).  Both shards together must publish exactly the one replica's series.
2. Exporter: the fleet exporter (one process scraping every node: the worst case; on Kubernetes each GPU node's
   DaemonSet pod renders only its own GPUs) rendering 512 nodes x 8 GPUs, against prometheus_client rendering the
   same series from plain labelled Gauges, both in this run (bench/exporter.py's method at 8x the fleet).

Publishes docs/results/scale.json and the `<!-- bench:scale:... -->` blocks (bench/results.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from infercast.catalog import FORECAST_KV_CACHE_USAGE_RATIO, KV_CACHE_USAGE_RATIO

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

import results  # noqa: E402

from infercast.config import PredictorConfig  # noqa: E402
from infercast.store import Series  # noqa: E402
from predictors.service import PredictorLoop  # noqa: E402
from predictors.shard import Shard, ShardedStore  # noqa: E402

T0 = 1_800_000_000.0


class FixedStore:
    """Every KV series of the fleet, already in memory; no other metric (no traffic series: KV only)."""

    def __init__(self, series: list[Series]) -> None:
        self.series = series

    def query_range(self, metric, matchers, start, end, step) -> list[Series]:
        return self.series if metric == KV_CACHE_USAGE_RATIO else []


def fleet(n: int) -> list[Series]:
    t = np.arange(T0 - 3600.0, T0 + 1.0, 15.0)
    rng = np.random.default_rng(14)
    return [
        Series(
            {"pool": f"pool-{i:05d}", "version": f"v{i % 3}", "instance": "n0"},
            t,
            np.clip(0.3 + 0.4 * (i / n) + 1e-5 * (t - T0) + rng.normal(0, 0.01, t.size), 0, 1),
        )
        for i in range(n)
    ]


def _tick(store) -> tuple[float, set]:
    loop = PredictorLoop(PredictorConfig(history_seconds=3600.0), rps_model="kalman")
    t0 = time.perf_counter()
    out = loop.tick(T0, store)
    took = time.perf_counter() - t0
    keys = {(s.name, tuple(sorted(s.label_dict.items()))) for s in out if s.name == FORECAST_KV_CACHE_USAGE_RATIO}
    return took, keys


def forecast_bench(n: int) -> dict:
    _tick(FixedStore(fleet(20)))  # warm-up: imports and first-call costs are not the fleet's
    store = FixedStore(fleet(n))
    whole_s, whole = _tick(store)
    shards = [_tick(ShardedStore(store, Shard(i, 2))) for i in range(2)]
    parts = [k for _, k in shards]
    if parts[0] & parts[1] or parts[0] | parts[1] != whole:
        raise SystemExit("scale: the two shards do not publish exactly the one replica's forecasts")
    slower = max(s for s, _ in shards)
    return {
        "series": n,
        "one_replica_tick_s": whole_s,
        "shard_tick_s": [s for s, _ in shards],
        "two_replicas_tick_s": slower,
        "two_replicas_ratio": slower / whole_s,
        "per_series_ms": whole_s / n * 1e3,
        "forecast_series_published": len(whole),
    }


def exporter_bench(nodes: int, gpus: int, repeat: int) -> dict:
    from exporter import render_bench

    return render_bench(repeat, nodes, gpus)


def table_forecast(r: dict) -> str:
    f = r["forecast"]
    return "\n".join(
        [
            "| predictor replicas | tick for the whole fleet (s) | x one replica | per series (ms) |",
            "|---|---:|---:|---:|",
            f"| 1 (baseline) | {f['one_replica_tick_s']:.1f} | 1.00 | {f['per_series_ms']:.2f} |",
            f"| 2 (`--shard i/2`, the slower shard) | {f['two_replicas_tick_s']:.1f} | "
            f"{f['two_replicas_ratio']:.2f} | {f['two_replicas_tick_s'] / f['series'] * 2e3:.2f} |",
            "",
            f"{f['series']:,} KV-usage series, an hour of 15 s history each; {r['machine']}.",
        ]
    )


def table_exporter(r: dict) -> str:
    e = r["exporter"]
    return "\n".join(
        [
            "| /metrics of the fleet exporter | ms | x baseline |",
            "|---|---:|---:|",
            f"| prometheus_client Gauges, same series (baseline) | {e['baseline_ms']:.0f} | 1.00 |",
            f"| exporter render | {e['render_ms']:.0f} | {e['render_ratio']:.2f} |",
            f"| exporter frame build + render | {e['frame_and_render_ms']:.0f} | {e['frame_and_render_ratio']:.2f} |",
            "",
            f"{e['nodes']} nodes x {e['gpus_per_node']} GPUs: {e['series']:,} series, "
            f"{e['body_bytes'] / 1e6:.1f} MB per scrape; {r['machine']}.",
        ]
    )


TABLES = {"forecast": table_forecast, "exporter": table_exporter}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--series", type=int, default=10_000)
    p.add_argument("--nodes", type=int, default=512)
    p.add_argument("--gpus", type=int, default=8)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-publish", action="store_true", help="print only")
    a = p.parse_args()
    if a.series < 2 or a.nodes < 1 or a.gpus < 1 or a.repeat < 1:
        p.error("--series must be >= 2; --nodes, --gpus and --repeat >= 1")
    logging.basicConfig(level=logging.ERROR)
    r = {
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs (shared), Python {platform.python_version()}",
        "exporter": exporter_bench(a.nodes, a.gpus, a.repeat),
        "forecast": forecast_bench(a.series),
    }
    print(table_forecast(r))
    print()
    print(table_exporter(r))
    if not a.no_publish:
        print(results.publish("scale", r, TABLES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
