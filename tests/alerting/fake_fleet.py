"""Test-only: a realistic exposition of every catalog metric for the flash-sale fleet, as a function of time.

It stands in for `infercast exporter` + `infercast predictor` where the dashboards test needs history (a live
backtest panel looks one forecast horizon back): `history()` writes OpenMetrics text for the last minutes, which
`promtool tsdb create-blocks-from openmetrics` turns into blocks, and `serve()` continues the same series live.
Label values follow examples/flash-sale.yaml (pools v4-main / v3.5-fallback, versions v4 / v3.5).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from infercast.catalog import CATALOG, Kind, MetricSpec

POOLS = (("v4-main", "v4"), ("v3.5-fallback", "v3.5"))
GPUS = (("node-1", "0", "GPU-1a"), ("node-1", "1", "GPU-1b"), ("node-2", "0", "GPU-2a"))
TARGETS = (("twin", "twin"), ("dcgm-node-1", "dcgm"))
OTHER = {
    "from_version": ("v4",),
    "to_version": ("v3.5",),
    "forecaster": ("lstm", "prophet"),
    "horizon": ("300s",),
    "threshold": ("0.75",),
    "series": ("kv",),
    "xid": ("79",),
    "action": ("prewarm_pool", "set_pool_weight"),
    "kind": ("latency",),
    "metric": ("vllm:kv_cache_usage_perc",),
}


def label_sets(m: MetricSpec) -> Iterator[dict[str, str]]:
    """Every label combination the fake fleet exposes for `m`."""
    labels = list(m.labels)
    groups: list[list[dict[str, str]]] = []
    if "pool" in labels and "version" in labels:
        groups.append([{"pool": p, "version": v} for p, v in POOLS])
        labels = [x for x in labels if x not in ("pool", "version")]
    elif "pool" in labels:
        groups.append([{"pool": p} for p, _ in POOLS])
        labels.remove("pool")
    if "instance" in labels:
        groups.append([{"instance": f"n{i}"} for i in (1, 2)])
        labels.remove("instance")
    if {"node", "gpu", "uuid"} <= set(labels):
        groups.append([{"node": n, "gpu": g, "uuid": u} for n, g, u in GPUS])
        labels = [x for x in labels if x not in ("node", "gpu", "uuid")]
    if "target" in labels:
        groups.append([{"target": t, "kind": k} for t, k in TARGETS])
        labels = [x for x in labels if x not in ("target", "kind")]
    enums = dict(m.enums)
    for label in labels:
        values = enums.get(label) or OTHER.get(label, (f"{label}-a",))  # a label added later: one value
        groups.append([{label: v} for v in values])
    for combo in itertools.product(*groups):
        merged: dict[str, str] = {}
        for part in combo:
            merged.update(part)
        if "instance" in merged and "pool" in merged:
            merged["instance"] = f"{merged['pool']}-{merged['instance']}"
        yield merged


def value(m: MetricSpec, labels: dict[str, str], t: float) -> float:
    """A plausible value at unix time `t` (counters grow linearly; gauges wobble slowly)."""
    seed = sum(ord(c) for c in m.name + "".join(sorted(labels.values()))) % 97 / 97
    wobble = 0.05 * math.sin(t / 120 + seed * 6.28)
    if m.kind is Kind.COUNTER:
        rate = {"infercast_router_requests_total": 20.0, "infercast_gpu_pcie_bytes_total": 2e9}.get(m.name, 0.2)
        return round(rate * (1 + seed) * (t - 1.7e9), 3)
    if m.name == "infercast_forecast_last_success_timestamp_seconds":
        return math.floor(t / 15) * 15
    if m.name == "infercast_forecast_breach_eta_seconds":
        return 240.0 if labels["pool"] == "v4-main" else math.inf
    if m.name.startswith("infercast_forecast_") and "band" in labels:
        base = 0.6 if "kv_cache" in m.name else 2000.0
        factor = {"point": 1.0, "lower": 0.85, "upper": 1.25}[labels["band"]]
        return round(base * factor * (1 + wobble), 4)
    if m.name == "infercast_kv_cache_usage_ratio" and labels.get("instance") == "v4-main-n2":
        # one nearly full instance (over the 0.75 trigger, under the 0.80 breaker): the fragmentation of full
        # instances (InfercastKVCacheFragmentationCritical's series) has a value
        return round(0.78 * (1 + wobble / 10), 4)
    if m.name == "infercast_gpu_memory_total_bytes":
        return 42_949_672_960.0
    if m.name == "infercast_gpu_memory_used_bytes":
        return round(42_949_672_960.0 * (0.6 + 0.3 * seed), 0)
    by_unit = {"ratio": 0.3 + 0.5 * seed, "score": 40 + 50 * seed, "celsius": 60 + 20 * seed, "watts": 250 + 100 * seed}
    if m.unit in by_unit:
        base = by_unit[m.unit]
        return round(base * (1 + wobble), 4)
    if m.unit == "seconds":
        return round(0.02 + 0.05 * seed, 4)
    fixed = {
        "infercast_actuator_leader": 1.0,
        "infercast_actuator_active": 0.0,
        "infercast_actuator_frozen": 0.0,
        "infercast_actuator_fenced": 0.0,
        "infercast_target_up": 1.0,
    }
    return fixed.get(m.name, round(1 + 40 * seed, 0))


#: a histogram's cumulative share of observations per bucket (the fake decision latency: mostly under 100 ms)
HISTOGRAM_SHARES = (("0.05", 0.3), ("0.1", 0.6), ("0.25", 0.9), ("0.5", 0.97), ("1.0", 1.0), ("+Inf", 1.0))


def histogram(m: MetricSpec, labels: dict[str, str], t: float) -> list[tuple[str, dict[str, str], float]]:
    """(sample name, labels, value) of a histogram at `t`: buckets, count and sum growing at 0.2 observations/s."""
    count = round(0.2 * (t - 1.7e9), 3)
    out = [(f"{m.name}_bucket", {**labels, "le": le}, round(count * share, 3)) for le, share in HISTOGRAM_SHARES]
    return [*out, (f"{m.name}_count", labels, count), (f"{m.name}_sum", labels, round(count * 0.08, 3))]


def _fmt_labels(labels: dict[str, str]) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return "{" + inner + "}" if inner else ""


def _fmt_value(v: float) -> str:
    return "+Inf" if v == math.inf else repr(float(v))


def exposition(t: float) -> str:
    """Prometheus text format (0.0.4) of every catalog metric at time `t`."""
    out = []
    for m in CATALOG:
        out.append(f"# HELP {m.name} {m.help}")
        out.append(f"# TYPE {m.name} {m.kind.value if m.kind is not Kind.INFO else 'gauge'}")
        for labels in label_sets(m):
            if m.kind is Kind.HISTOGRAM:
                out += [f"{name}{_fmt_labels(lbls)} {_fmt_value(v)}" for name, lbls, v in histogram(m, labels, t)]
            else:
                out.append(f"{m.name}{_fmt_labels(labels)} {_fmt_value(value(m, labels, t))}")
    return "\n".join(out) + "\n"


def history(start: float, end: float, step: float, extra: dict[str, str]) -> str:
    """OpenMetrics text with samples every `step` seconds in [start, end), for promtool's backfill."""
    out = []
    for m in CATALOG:
        family = m.name.removesuffix("_total") if m.kind is Kind.COUNTER else m.name
        kind = {Kind.COUNTER: "counter", Kind.HISTOGRAM: "histogram"}.get(m.kind, "gauge")
        out.append(f"# TYPE {family} {kind}")
        for labels in label_sets(m):
            text = _fmt_labels({**labels, **extra})
            t = start
            while t < end:
                if m.kind is Kind.HISTOGRAM:  # one point: every bucket, the count and the sum at the same time
                    out += [
                        f"{name}{_fmt_labels({**lbls, **extra})} {_fmt_value(v)} {t:.3f}"
                        for name, lbls, v in histogram(m, labels, t)
                    ]
                else:
                    out.append(f"{m.name}{text} {_fmt_value(value(m, labels, t))} {t:.3f}")
                t += step
    return "\n".join(out) + "\n# EOF\n"


class FakeFleetServer:
    """Serves `exposition(now)` on /metrics at a loopback port (test-only)."""

    def __init__(self, port: int = 0, clock=None) -> None:
        import time

        clock = clock or time.time

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = exposition(clock()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self._server.server_address[1]
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
