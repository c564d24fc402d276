"""The twin configured as the lab's engines, replaying the lab's own arrivals (issue 40 item 5).  Pure but for the
twin run itself.

What the twin is told, and where each figure comes from:

- the pool: N nodes of one engine each, each with the lab's KV pool (`--num-gpu-blocks-override` blocks of
  `block_size` tokens), its `--max-num-seqs` and `--max-model-len`; the card is sized so that its KV capacity is
  exactly that pool (the tiny model's shape: 2 layers, 2 KV heads, head_dim 64, bfloat16), with no CUDA overhead and
  no activation memory (the engines run on CPU);
- the pool: smaller than one of the twin's 128-block segments, so it is allocated whole at the first request (as
  vLLM allocates its pool at start; `infercast.simulator.twin.kvcache.PagedKV` caps a segment at the pool);
- the step time: the decode time per token and the prefill rate *measured in the lab* (`measured_from`) by the
  engines themselves (their inter-token latency and prefill-time histograms) on a slice that is not scored
  (bench/lab.py's calibration run);
- the router: every request one priority (the lab has none), no gateway, no breaker that a 16-block engine would
  trip (the lab's HAProxy has none), clients that never time out (the lab's load waits for every answer).

The comparison (`compare`): the KV usage of each engine, sampled every second in the lab and every second in the
twin, as the mean absolute difference over the run; preemptions; TTFT P50 and P99 (the client's in the lab, the
twin's request book in the twin).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from infercast.config import GIB, FleetConfig, parse_config
from infercast.simulator.lab.engines import MODEL_NAME, EngineShape

#: the tiny model's shape (infercast/simulator/lab/tinymodel.py): KV bytes per token = 2 x 2 layers x 2 heads x 64 x 2 B
TINY_SHAPE = {"layers": 2, "kv_heads": 2, "head_dim": 64, "dtype": "bfloat16"}
TINY_WEIGHTS_GB = 0.001  # ~0.6 M parameters in bfloat16 (about 1.3 MB)
#: ClientRow: (planned arrival s, sent s, TTFT s or None, done s or None, prompt tokens, output tokens, ok), as
#: `infercast.simulator.lab.run.run_load` reports each request under "client"
ClientRow = tuple[float, float, float | None, float | None, int, int, bool]


@dataclass(frozen=True)
class Measured:
    """The engines' speed as measured in the lab, from the client's timings of each request."""

    inter_token_seconds: float  # decode time per token at batch 1 (the twin's model: x(1 + batch/64) above it)
    prefill_tokens_per_second: float
    requests: int  # the requests it was measured on

    def as_dict(self) -> dict[str, Any]:
        return {
            "inter_token_ms": round(self.inter_token_seconds * 1000, 2),
            "prefill_tokens_per_second": round(self.prefill_tokens_per_second),
            "requests": self.requests,
        }


def measured_from(report: dict[str, Any], engines: int | None = None) -> Measured:
    """The step time from one lab run's report (`engine_timing`: what the engines measured of themselves).

    The engines' mean inter-token latency is at the batch they ran; the twin's per-token time grows as
    (1 + batch/64) from its batch-1 value (infercast.simulator.twin.latency), so it is given the measured value divided
    by that factor at the run's mean decoding batch per engine (the decode seconds all requests spent / the run's
    seconds / the engines).  The prefill rate is prompt tokens per second of the engines' prefill time."""
    t = report.get("engine_timing") or {}
    itl_ms, rate, tokens = t.get("inter_token_ms"), t.get("prefill_tokens_per_second"), t.get("decode_tokens", 0)
    if not itl_ms or not rate:
        raise ValueError(f"the run's report has no engine timing to measure the step time on: {t}")
    n = engines or len({e for _, e, _ in report.get("kv_series", ())}) or 1
    seconds = float(report.get("seconds") or (report.get("trace") or {}).get("seconds") or 60.0)
    batch = (itl_ms / 1000.0) * tokens / seconds / n
    return Measured(itl_ms / 1000.0 / (1.0 + batch / 64.0), float(rate), int(report.get("completed", 0)))


def twin_fleet(engines: int, shape: EngineShape, measured: Measured) -> FleetConfig:
    """The fleet file of a twin of the lab: see the module docstring."""
    bytes_per_token = 2 * TINY_SHAPE["layers"] * TINY_SHAPE["kv_heads"] * TINY_SHAPE["head_dim"] * 2
    utilization = 0.95
    kv_bytes = (shape.kv_tokens + 0.5) * bytes_per_token  # + half a token: the twin floors the capacity
    memory_gb = (TINY_WEIGHTS_GB * GIB + kv_bytes) / utilization / GIB
    doc = {
        "name": "lab-twin",
        "versions": {
            "tiny": {
                "model": {"name": MODEL_NAME, **TINY_SHAPE, "weights_gb": TINY_WEIGHTS_GB},
                "block_size_tokens": shape.block_size,
                "max_model_len": shape.max_model_len,
                "batcher": {"kind": "dynamic", "max_batch": shape.max_num_seqs},
            }
        },
        "pools": {
            "lab": {
                "version": "tiny",
                "nodes": engines,
                "gpus_per_node": 1,
                "gpu": {"name": "lab-cpu", "memory_gb": memory_gb},
                "memory_utilization": utilization,
            }
        },
        "router": {
            "priority_shares": {"urgent": 1.0, "normal": 0.0, "low": 0.0},
            "client_timeout_seconds": 3600.0,
            "breaker_latency_seconds": 3600.0,
            "breaker_min_requests": 1_000_000,
        },
        "twin": {
            "tick_seconds": 0.05,
            "inter_token_seconds": measured.inter_token_seconds,
            "prefill_tokens_per_second": measured.prefill_tokens_per_second,
            "overhead_gb_per_gpu": 0.0,
            "activation_gb_per_1k_tokens": 0.0,
            "prefill_chunk_tokens": shape.max_model_len,
        },
    }
    return parse_config(doc, source="the lab's twin")


def replay_on_twin(
    client: list[ClientRow], duration_s: float, cfg: FleetConfig, seed: int = 0, drain_limit_s: float = 600.0
) -> dict[str, Any]:
    """The lab's arrivals (planned times and token counts) on the twin `cfg`: its KV series per engine (every
    second), preemptions and TTFT percentiles."""
    from infercast.simulator.replay.traces import Trace
    from infercast.simulator.twin.fleet import trace_fleet

    rows = sorted(client, key=lambda r: r[0])
    trace = Trace(
        name="lab arrivals",
        source="lab",
        arrivals_s=np.array([r[0] for r in rows], dtype=np.float64),
        prompt_tokens=np.array([r[4] for r in rows], dtype=np.int64),
        output_tokens=np.array([r[5] for r in rows], dtype=np.int64),
        duration_s=float(duration_s),
    )
    fleet = trace_fleet(cfg, trace, seed, None, sample_seconds=1.0)
    fleet.advance(duration_s)
    # the lab's run lasts until every request is answered: so does the twin's (bounded, in case one never is)
    for _ in range(int(drain_limit_s)):
        if all(n.load == 0 for n in fleet.nodes):
            break
        fleet.advance(1.0)
    book = fleet.book

    def ms(q: float) -> float | None:
        v = book.quantile(q, 0, 0.0, fleet.now)
        return None if math.isnan(v) else round(v * 1000, 1)

    return {
        "kv_series": [(float(s["t"]), str(s["node"]), float(s["kv_usage"])) for s in fleet.node_samples],
        "preemptions": int(sum(n.preemptions_total for n in fleet.nodes)),
        "ttft_p50_ms": ms(0.5),
        "ttft_p99_ms": ms(0.99),
        "kv_peak": round(max((float(s["kv_usage"]) for s in fleet.node_samples), default=0.0), 4),
        "oom_events": int(sum(n.oom_events for n in fleet.nodes)),
        "seconds": round(fleet.now, 1),
    }


def kv_mad(
    lab: list[tuple[float, str, float]], twin: list[tuple[float, str, float]], duration_s: float, window_s: int = 1
) -> float:
    """Mean absolute difference of the engines' KV usage, lab vs twin, each engine's series on a 1 s grid over the
    run (the last sample at or before each second; engines paired in order of their total usage: the twin's node 0
    is not the lab's engine-0, the proxy and the router place requests each their own way).  `window_s` > 1
    compares the means of consecutive windows of that many seconds instead of single seconds: the level of the
    usage without the coming and going of single requests."""

    def grid(series: list[tuple[float, str, float]]) -> list[np.ndarray]:
        by: dict[str, list[tuple[float, float]]] = {}
        for t, name, kv in series:
            by.setdefault(name, []).append((t, kv))
        out = []
        ts = np.arange(1.0, math.floor(duration_s) + 1.0)
        for rows in by.values():
            rows.sort()
            t = np.array([r[0] for r in rows])
            v = np.array([r[1] for r in rows])
            idx = np.searchsorted(t, ts, side="right") - 1
            out.append(np.where(idx >= 0, v[np.clip(idx, 0, None)], 0.0))
        return sorted(out, key=lambda a: float(np.sum(a)), reverse=True)

    if window_s < 1 or math.floor(duration_s) < window_s:
        # numpy's mean of nothing is NaN with a warning: a figure that compares as "not within" and says nothing
        raise ValueError(
            f"a run of {duration_s:g} s holds no whole comparison window of {window_s} s: no KV difference to measure"
        )
    a, b = grid(lab), grid(twin)
    if not a or len(a) != len(b):
        raise ValueError(f"the lab has {len(a)} engines' series and the twin {len(b)}")

    def windows(x: np.ndarray) -> np.ndarray:
        n = len(x) // window_s * window_s
        return x[:n].reshape(-1, window_s).mean(axis=1) if window_s > 1 else x

    return float(np.mean([np.mean(np.abs(windows(x) - windows(y))) for x, y in zip(a, b, strict=True)]))
