"""Run the twin to the end of a scenario or trace and report what an SRE would ask about the run.

Report fields (`RunResult.summary`):
- `oom_events`: node crashes for lack of GPU memory.
- `p99_latency_ms`: P99 time to first token of **urgent** requests after the surge starts (scenario) or over the
  whole run (trace), measured from the client's first send (retries included), over requests that were served;
  requests that never got a token show in `admitted_ratio` and `goodput_rps` instead, as on a serving dashboard.
  `p99_latency_ms_pre` is the same before the surge.
- `goodput_rps`: requests whose first token came within their priority's SLO (`router.slo_seconds`), per second.
- `admitted_ratio`: requests that were served (got a first token) / requests offered.
- `recovery_seconds`: from the first failure (OOM, or breaker opening) until every node is up again and urgent
  P99 over 30 s is back under twice its pre-surge value; if it never recovers, the time until the run ended and
  `recovered` is false.
- `memory_efficiency`: seed 000's 显存效率比, memory holding live tokens and weights / memory allocated, averaged
  over up nodes and time.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from infercast.config import FleetConfig
from infercast.twin.fleet import Fleet, build_fleet, trace_fleet
from infercast.twin.traffic import ScenarioTraffic


@dataclass
class RunResult:
    summary: dict
    timeseries: pd.DataFrame
    nodes: pd.DataFrame
    events: list[dict] = field(default_factory=list)

    def write(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        path = out / "timeseries.csv"
        self.timeseries.to_csv(path, index=False)
        self.nodes.to_csv(out / "nodes.csv", index=False)
        self.summary["timeseries"] = str(path)
        (out / "summary.json").write_text(json.dumps(self.summary, indent=2, default=_json_default))
        (out / "events.json").write_text(json.dumps(self.events, indent=1, default=_json_default))
        return path


def _json_default(o):
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    raise TypeError(type(o).__name__)


def _ms(x: float) -> float | None:
    return None if math.isnan(x) else round(x * 1000.0, 1)


def summarise(fleet: Fleet, surge_start: float | None) -> dict:
    book = fleet.book
    end = fleet.now
    s0 = surge_start if surge_start is not None else 0.0
    p99 = book.quantile(0.99, 0, s0, end)
    p99_pre = book.quantile(0.99, 0, 0.0, s0) if surge_start else float("nan")
    r = fleet.router
    nodes = pd.DataFrame(fleet.node_samples)
    eff = float(nodes["memory_efficiency"].mean()) if len(nodes) else float("nan")
    crashes = sorted(t for n in fleet.nodes for t in n.crash_log)
    first_failure = crashes[0] if crashes else None
    rec, recovered = _recovery(fleet, first_failure, p99_pre)
    return {
        "control": fleet.control.name,
        "seed": fleet.seed,
        "simulated_seconds": end,
        "oom_events": int(sum(n.oom_events for n in fleet.nodes)),
        "p99_latency_ms": _ms(p99),
        "p99_latency_ms_pre": _ms(p99_pre),
        "goodput_rps": round(float(book.within_slo.sum()) / max(end, 1e-9), 2),
        "admitted_ratio": round(r.served_total / max(r.offered_total, 1), 4),
        "recovery_seconds": rec,
        "recovered": recovered,
        "memory_efficiency": round(eff, 4),
        "offered_requests": int(r.offered_total),
        "served_requests": int(r.served_total),
        "failed_requests": int(r.failed_total),
        "rejected_requests": int(r.rejected_total),
        "degraded_requests": int(r.degraded_total),
        "first_oom_seconds": first_failure,
        "first_degradation_seconds": r.degradation_log[0][0] if r.degradation_log else None,
        "surge_start_seconds": surge_start,
    }


def _recovery(fleet: Fleet, first_failure: float | None, p99_pre: float) -> tuple[float | None, bool]:
    if first_failure is None:
        return 0.0, True
    nodes = pd.DataFrame(fleet.node_samples)
    ok_p99 = 2.0 * p99_pre if not math.isnan(p99_pre) else 1.0
    for t in np.arange(first_failure + 5.0, fleet.now + 1e-9, 5.0):
        at = nodes[(nodes["t"] > t - 2.5) & (nodes["t"] <= t + 2.5)]
        serving = at[~at["node"].isin(_standby_nodes(fleet))]
        if len(serving) and serving["up"].all():
            p = fleet.book.quantile(0.99, 0, t - 30.0, t)
            if not math.isnan(p) and p <= ok_p99:
                return round(float(t - first_failure), 1), True
    return round(float(fleet.now - first_failure), 1), False


def _standby_nodes(fleet: Fleet) -> set[str]:
    return {n.name for n in fleet.nodes if fleet.cfg.pools[n.pool].standby and not fleet.router.enabled[n.pool]}


def _result(fleet: Fleet, surge: float | None) -> RunResult:
    summary = summarise(fleet, surge)
    events = [{"t": t, "event": "action", "action": a.kind, "pool": a.pool, **a.args} for t, a in fleet.actions]
    events += [
        {
            "t": t,
            "event": "oom",
            "node": n.name,
            "pool": n.pool,
            "memory_usage": round(m, 4),
            "fragmentation": round(f, 4),
        }
        for n in fleet.nodes
        for t, m, f in zip(n.crash_log, n.crash_memory, n.crash_fragmentation, strict=True)
    ]
    events += [
        {"t": t, "event": "degradation", "from_pool": a, "to_pool": b, "reason": why, "requests": k}
        for t, a, b, why, k in fleet.router.degradation_log
    ]
    events.sort(key=lambda e: e["t"])
    return RunResult(summary, pd.DataFrame(fleet.samples), pd.DataFrame(fleet.node_samples), events)


def run_scenario(cfg: FleetConfig, control="none", seed: int | None = None, step_seconds: float = 5.0) -> RunResult:
    fleet = build_fleet(cfg, control, seed)
    fleet.sample_seconds = step_seconds
    fleet.advance(cfg.scenario.duration_seconds)
    assert isinstance(fleet.traffic, ScenarioTraffic)
    return _result(fleet, fleet.traffic.surge_start())


def run_trace(trace, cfg: FleetConfig, control="none", seed: int = 0, step_seconds: float = 15.0) -> RunResult:
    fleet = trace_fleet(cfg, trace, control, seed, sample_seconds=step_seconds)
    fleet.advance(fleet.traffic.duration_s)
    return _result(fleet, None)


def _busiest_minute_kv(result: RunResult, pool: str) -> float:
    ts = result.timeseries
    v = ts[ts.pool == pool]
    if v.empty:
        return 0.0
    minute = (v.t // 60).astype(int)
    return float(v.groupby(minute)["kv_usage_max"].mean().max())


def size_fleet_for_trace(trace, cfg: FleetConfig, target_peak_kv: float = 0.85, seed: int = 0) -> FleetConfig:
    """A one-pool fleet of the config's first serving version, sized so the trace's busiest minute averages about
    `target_peak_kv` of KV capacity on the busiest node.

    How: the KV tokens the busiest minute keeps resident are estimated by Little's law (arrival rate x tokens x
    residence); that many tokens at `target_peak_kv` set the KV capacity to provide.  Nodes: enough prefill
    throughput for the busiest 10 s at 70%, and enough KV; when the trace needs less KV than those nodes' cards
        hold (public traces are samples of a fleet's traffic), the cards are sized down instead.  One replay of the
    trace on that fleet then measures the busiest minute and rescales the capacity
    once to hit the target.  The sizing is fixed per trace and uses nothing but the trace; the gateway's rate
    limit, standby pools and failover are left out so the series shows the trace's own load, and the engine keeps
    10% of the card for activations (vLLM's default), so peaks preempt rather than crash.
    """
    from infercast.twin.latency import prefill_floor_seconds

    t = np.asarray(trace.arrivals_s, dtype=np.float64)
    if len(t) == 0:
        raise ValueError("cannot size a fleet for an empty trace")
    prompt = np.asarray(trace.prompt_tokens, dtype=np.float64)
    out = np.asarray(trace.output_tokens, dtype=np.float64)
    pool_name, pc = next((p, pc) for p, pc in cfg.pools.items() if not pc.standby and pc.weight > 0)
    # an engine as usually deployed (vLLM's gpu_memory_utilization 0.9): at the peak it preempts, it does not OOM
    pc = pc.model_copy(update={"memory_utilization": 0.9})
    # the model serves the trace's longest request (traces carry up to 128k-token prompts)
    vc = cfg.versions[pc.version]
    longest = int(np.max(prompt + out))
    if longest > vc.max_model_len:
        vc = vc.model_copy(update={"max_model_len": longest})
        cfg = cfg.model_copy(update={"versions": {**cfg.versions, pc.version: vc}})
    itl = cfg.twin.inter_token_seconds * 1.5
    residence = prefill_floor_seconds(prompt) + np.minimum(out, 2048) * itl
    minute = (t // 60).astype(np.int64)
    busiest = float(np.bincount(minute, weights=(prompt + out / 2) * residence).max()) / 60.0
    # compute: enough prefill throughput for the busiest 10 s at 70% utilisation
    peak_prefill = float(np.bincount((t // 10).astype(np.int64), weights=prompt).max()) / 10.0
    per_node_prefill = cfg.twin.prefill_tokens_per_second * vc.peak_throughput_factor
    n_compute = max(1, int(np.ceil(peak_prefill / (0.7 * per_node_prefill))))

    def fleet_for(kv_tokens_needed: float) -> FleetConfig:
        overhead = cfg.twin.overhead_gb_per_gpu * pc.gpus_per_node
        per_node_gb = pc.gpus_per_node * pc.gpu.memory_gb * pc.memory_utilization - vc.model.weights_gb - overhead
        need_gb = kv_tokens_needed * vc.model.kv_bytes_per_token / 1024**3
        nodes = max(n_compute, round(need_gb / per_node_gb))
        pool = pc.model_copy(update={"nodes": nodes, "failover": (), "weight": 1.0})
        if need_gb / nodes < per_node_gb:  # less KV than a node's cards hold: smaller cards
            card = (vc.model.weights_gb + overhead + need_gb / nodes) / (pc.gpus_per_node * pc.memory_utilization)
            gpu = pc.gpu.model_copy(update={"memory_gb": round(card, 3), "name": f"{pc.gpu.name} (sized)"})
            pool = pool.model_copy(update={"gpu": gpu})
        # no gateway rate limit, and a breaker that trips on failures, not on the seed's 200 ms
        router = cfg.router.model_copy(
            update={
                "rate_limit_rps": None,
                "rate_limit_burst": None,
                "breaker_latency_seconds": cfg.router.client_timeout_seconds,
            }
        )
        return cfg.model_copy(update={"pools": {pool_name: pool}, "router": router, "targets": ()})

    # never smaller than a few of the trace's largest requests (the largest must fit, with company)
    largest = float(np.quantile(prompt + out, 0.999))
    need = max(busiest / target_peak_kv, 4.0 * largest)
    sized = fleet_for(need)
    for _ in range(3):
        measured = _busiest_minute_kv(run_trace(trace, sized, "none", seed, step_seconds=5.0), pool_name)
        if measured <= 0 or abs(measured - target_peak_kv) < 0.05:
            break
        # a saturated fleet reads ~1.0 whatever its shortfall: grow it by a step instead of by the ratio
        need = max(need * (1.6 if measured >= 0.97 else measured / target_peak_kv), 4.0 * largest)
        sized = fleet_for(need)
    return sized
