"""Run the twin to the end of a scenario or trace and report what an SRE would ask about the run.

The same accounting for every arm (`RunResult.summary`):
- `offered`: requests clients sent (first attempts).  Each ends in exactly one of `served` (it got its first
  token), `rejected` (refused at once: a 429 from a token bucket, a 503 when no pool could take it, a 400 for a
  prompt over the length limit or an invalid payload) or `failed` (admitted, then lost: an OOM, a timeout, an
  error), judged on the client's last attempt (clients retry 429s, 503s and failures with backoff, not 400s);
  `in_flight` are the ones still waiting when the run stops.  `admitted_ratio` = served / offered.
- `oom_events`: node crashes for lack of GPU memory.
- `p99_latency_ms`: P99 time to first token of **urgent** requests after the surge starts (scenario) or over the
  whole run (trace), measured from the client's first send (retries included), over requests that were served.
  `p99_latency_ms_pre` is the same before the surge.
- `goodput_rps`: requests whose first token came within their priority's SLO (`router.slo_seconds`), per second
  of the run.
- With a fault injected (`scenario.faults`), the load test is what runs before it: P99, goodput and memory
  efficiency are measured until the first injected fault (`measured_until_seconds`), recovery after it (seed 004
  measures its table in a load test and recovery in a fault-injection test; the scenario runs them back to back).
- `recovery_seconds`: from the first injected fault (a scenario with `faults`) -- or, when the fleet was already
  failing then, from the first fault of that failure (an OOM or a breaker opening it had not recovered from: a kill
  that lands on a node already down starts no clock) -- or else from the end of the surge (a scenario whose load
  comes back down), or else from the first fault (an OOM or a breaker opening), until the
  moment from which the fleet serves again: the P99 of the urgent requests sent in the 10 s from then (or in as
  many 10 s windows, up to 60 s, as hold 100 urgent requests) — counting urgent requests that were refused or
  lost as infinitely late, except 400s, which are the client's fault — is under the urgent SLO and no breaker is
  open, and both stay so for 30 s.  The windows look forward from the moment they judge: a trailing window that
  must grow to 60 s to hold 100 requests on a small fleet would report recovery up to 50 s after it happened.
  `recovered` is false if that never happens (then `recovery_seconds` runs to the end of the run); a run with
  neither reports 0.
- `memory_efficiency`: seed 000's 显存效率比, effective compute memory (weights, KV of computed tokens, prefill
  activations) / total allocated memory, summed over the serving nodes (up and taking traffic; idle fallbacks and
  standby nodes are not serving) and over the run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np
import pandas as pd

from infercast.config import FleetConfig
from infercast.runfiles import write_json, write_run
from infercast.simulator.twin.fleet import Fleet, build_fleet, trace_fleet
from infercast.simulator.twin.requests import PRIORITY_NAMES
from infercast.simulator.twin.traffic import ScenarioTraffic


@dataclass
class RunResult:
    summary: dict
    timeseries: pd.DataFrame
    nodes: pd.DataFrame
    events: list[dict] = field(default_factory=list)

    def write(self, out_dir: str | Path) -> Path:
        out = Path(out_dir)
        path = write_run(out, self.timeseries, self.events, nodes=self.nodes)
        self.summary["timeseries"] = str(path)
        write_json(out / "summary.json", self.summary)
        return path


def _ms(x: float) -> float | None:
    return None if math.isnan(x) else round(x * 1000.0, 1)


RECOVERY_WINDOW_SECONDS = 10.0  # seed 004's short-window P99 (短时（10s）P99 <1s)
RECOVERY_HOLD_SECONDS = 30.0
RECOVERY_MIN_REQUESTS = 100
RECOVERY_MAX_WINDOW_SECONDS = 60.0


def summarise(fleet: Fleet, surge_start: float | None, surge_end: float | None = None) -> dict:
    book = fleet.book
    end = fleet.now
    injected = sorted(f.at_seconds for f in (fleet.cfg.scenario.faults if fleet.cfg.scenario else ()))
    # with a fault injected, the load test is what runs before it and recovery what follows (seed 004 measures
    # its table in a load test and recovery in a fault-injection test; the scenario runs them back to back)
    measured = min(end, injected[0]) if injected else end
    s0 = surge_start if surge_start is not None else 0.0
    p99 = book.quantile(0.99, 0, s0, measured)
    p99_pre = book.quantile(0.99, 0, 0.0, s0) if surge_start else float("nan")
    r = fleet.router
    nodes = pd.DataFrame(fleet.node_samples)
    serving = nodes[nodes["serving"] & (nodes["t"] <= measured)] if len(nodes) else nodes
    alloc = float(serving["allocated_bytes"].sum()) if len(serving) else 0.0
    eff = float(serving["effective_bytes"].sum()) / alloc if alloc > 0 else float("nan")
    crashes = sorted((t, why) for n in fleet.nodes for t, why in zip(n.crash_log, n.crash_reasons, strict=True))
    first_oom = next((t for t, why in crashes if why == "oom"), None)
    first_crash = crashes[0][0] if crashes else None  # an OOM or an injected fault
    faults = [t for t in (first_crash, r.breaker_log[0][1] if r.breaker_log else None) if t is not None]
    if injected:  # a fault-injection test: recovery from the injected fault, or the failure it landed in
        own = [t for t, why in crashes if why == "oom"] + [opened for _, opened, _ in r.breaker_log]
        since = failing_since(fleet, own, injected[0]) if injected[0] < end else None
    elif surge_end is not None and surge_end < end:
        since = surge_end
    else:
        since = min(faults) if faults else None
    rec, recovered = recovery(fleet, since)
    in_flight = r.offered_total - r.served_total - r.rejected_total - r.failed_total
    span = max(measured, 1e-9)
    tiers = {
        name: {
            "offered": int(r.offered_by_tier[i]),
            "served": book.counts(i, 0.0, measured)[0],
            "goodput_rps": round(book.within_slo_count(0.0, measured, i) / span, 2),
            "token_goodput_tps": round(book.within_slo_tokens_sum(0.0, measured, i) / span, 1),
            "offered_tps": round(float(r.offered_tokens_by_tier[i]) / span, 1),
        }
        for i, name in enumerate(PRIORITY_NAMES)
    }
    # GPU-seconds held: every node up or starting, times its GPUs, over the samples (the cost of pre-warming)
    held = nodes[nodes["provisioned"]] if len(nodes) else nodes
    gpu_seconds = float(held["gpus"].sum()) * fleet.sample_seconds if len(held) else 0.0
    return {
        "seed": fleet.seed,
        "simulated_seconds": end,
        "oom_events": int(sum(n.oom_events for n in fleet.nodes)),
        "p99_latency_ms": _ms(p99),
        "p99_latency_ms_pre": _ms(p99_pre),
        "goodput_rps": round(book.within_slo_count(0.0, measured) / span, 2),
        "urgent_goodput_rps": tiers["urgent"]["goodput_rps"],
        "token_goodput_tps": round(book.within_slo_tokens_sum(0.0, measured) / span, 1),
        "gpu_seconds": round(gpu_seconds, 1),
        "tiers": tiers,
        "offered": int(r.offered_total),
        "served": int(r.served_total),
        "rejected": int(r.rejected_total),
        "failed": int(r.failed_total),
        "in_flight": int(in_flight),
        "admitted_ratio": round(r.served_total / max(r.offered_total, 1), 4),
        "recovery_seconds": rec,
        "recovered": recovered,
        "recovery_from_seconds": since,
        "memory_efficiency": None if math.isnan(eff) else round(eff, 4),
        "admitted_attempts": int(r.admitted_total),
        "interrupted": int(r.interrupted_total),
        "degraded_requests": int(r.degraded_total),
        "first_oom_seconds": first_oom,
        "first_degradation_seconds": r.degradation_log[0][0] if r.degradation_log else None,
        "surge_start_seconds": surge_start,
        "surge_end_seconds": surge_end,
        "measured_until_seconds": measured,
    }


def _urgent_ok(fleet: Fleet, t: float) -> bool:
    """Over the urgent requests sent in the 10 s from t (longer, up to 60 s, until it holds 100 of them, so that a
    P99 means something on a small fleet): P99 (refused and lost requests counted as infinitely late) within the
    urgent SLO, and no breaker open at t."""
    book, r = fleet.book, fleet.router
    t1 = t + RECOVERY_WINDOW_SECONDS
    served, lost = book.counts(0, t, t1)
    while served + lost < RECOVERY_MIN_REQUESTS and t1 - t < RECOVERY_MAX_WINDOW_SECONDS:
        t1 += RECOVERY_WINDOW_SECONDS
        served, lost = book.counts(0, t, t1)
    if lost > 0.01 * (served + lost):
        return False
    if served:
        # the P99 over served and lost together is the served requests' quantile at 0.99 of the whole
        q = min(1.0, 0.99 * (served + lost) / served)
        if book.quantile(q, 0, t, t1) > r.slo[0]:
            return False
    return not any(opened <= t < until for _, opened, until in r.breaker_log)


def recovery(fleet: Fleet, since: float | None) -> tuple[float | None, bool]:
    """(seconds from `since` until the fleet recovered, whether it did): see the module docstring."""
    if since is None:
        return 0.0, True
    step = fleet.book.window_s / 2
    # a window needs its 10 s of requests to be judged: the last start is 10 s before the run ends
    checks = np.arange(since, fleet.now - RECOVERY_WINDOW_SECONDS + 1e-9, step)
    ok = [_urgent_ok(fleet, float(t)) for t in checks]
    hold = round(RECOVERY_HOLD_SECONDS / step)
    for i in range(len(ok) - hold):
        if all(ok[i : i + hold + 1]):
            return round(float(checks[i] - since), 1), True
    return round(float(fleet.now - since), 1), False


def failing_since(fleet: Fleet, faults: list[float], injected: float) -> float:
    """When the failure the injected fault lands in began: `injected` if the fleet was serving well then, else the
    first of `faults` (its own OOMs and breaker openings) that it had not recovered from by then.  Seed 004 measures
    recovery from the anomaly (异常恢复时间): on an unprotected bed that has been crashing since the load test began,
    the kill at its end may strike a node already down, and the clock must not restart there."""
    for f in sorted(faults):
        if f >= injected:
            break
        rec, ok = recovery(fleet, f)
        if not (ok and f + rec + RECOVERY_HOLD_SECONDS <= injected):  # not recovered from it before the kill
            return f
    return injected


def _action_fields(a) -> dict:
    """An applied action as event fields: the twin's own (`kind`, `pool`, `args`) or a typed one of `actuators`."""
    if hasattr(a, "args"):
        return {"action": a.kind, "pool": a.pool, **a.args}
    d = a.to_dict()
    return {"action": d.pop("kind"), **d}


def _result(fleet: Fleet, surge: float | None, surge_end: float | None = None, arm: Arm | None = None) -> RunResult:
    summary = {"control": arm.name if arm is not None else "none", **summarise(fleet, surge, surge_end)}
    events = [{"t": t, "event": "action", **_action_fields(a)} for t, a in fleet.actions]
    events += [
        {
            "t": t,
            "event": why,  # oom, or killed (an injected fault)
            "node": n.name,
            "pool": n.pool,
            "memory_usage": round(m, 4),
            "fragmentation": round(f, 4),
        }
        for n in fleet.nodes
        for t, m, f, why in zip(n.crash_log, n.crash_memory, n.crash_fragmentation, n.crash_reasons, strict=True)
    ]
    events += [
        {"t": t, "event": "degradation", "from_pool": a, "to_pool": b, "reason": why, "requests": k}
        for t, a, b, why, k in fleet.router.degradation_log
    ]
    events.sort(key=lambda e: e["t"])
    return RunResult(summary, pd.DataFrame(fleet.samples), pd.DataFrame(fleet.node_samples), events)


class Arm(Protocol):
    """A controller the twin is run under (`infercast.simulator.control.arms`): how it lays the fleet out, how it sets
    it up before the run, and what it does every `step_seconds` of simulated time (through the fleet's admin API)."""

    name: str
    step_seconds: float

    def layout(self, cfg: FleetConfig) -> FleetConfig: ...

    def configure(self, fleet: Fleet) -> None: ...

    def tick(self, fleet: Fleet) -> None: ...


def _drive(fleet: Fleet, arm: Arm | None, until: float) -> None:
    """Advance the fleet to `until`, letting the arm act every `arm.step_seconds` (first at the start)."""
    if arm is None:
        fleet.advance(until - fleet.now)
        return
    arm.configure(fleet)
    while fleet.now < until - 1e-9:
        arm.tick(fleet)
        fleet.advance(min(arm.step_seconds, until - fleet.now))


def _arm(arm: Arm | str | None) -> Arm | None:
    if arm is None or arm == "none":
        return None
    if isinstance(arm, str):
        raise ValueError(
            f"arm {arm!r}: the twin runs arms as objects; `infercast.simulator.control.driver` builds them by name"
        )
    return arm


def run_scenario(
    cfg: FleetConfig, arm: Arm | str | None = None, seed: int | None = None, step_seconds: float = 5.0, recorder=None
) -> RunResult:
    """The scenario on the fleet as `arm` lays it out and runs it (None or "none": as the file has it)."""
    arm = _arm(arm)
    fleet = build_fleet(arm.layout(cfg) if arm else cfg, seed, recorder, sample_seconds=step_seconds)
    _drive(fleet, arm, cfg.scenario.duration_seconds)
    assert isinstance(fleet.traffic, ScenarioTraffic)
    return _result(fleet, fleet.traffic.surge_start(), fleet.traffic.surge_end(), arm)


def run_trace(
    trace, cfg: FleetConfig, arm: Arm | str | None = None, seed: int = 0, step_seconds: float = 15.0, recorder=None
) -> RunResult:
    arm = _arm(arm)
    fleet = trace_fleet(arm.layout(cfg) if arm else cfg, trace, seed, recorder, sample_seconds=step_seconds)
    _drive(fleet, arm, fleet.traffic.duration_s)
    # a surge laid on the trace (`Trace.surged`, `--surge`): P99 from its start, recovery from its end
    surges = getattr(trace, "surges", ())
    start = min((x.start_s for x in surges), default=None)
    end = max((x.end_s for x in surges), default=None)
    return _result(fleet, start, end, arm)


def _busiest_minute_kv(result: RunResult, pool: str) -> float:
    ts = result.timeseries
    v = ts[ts.pool == pool]
    if v.empty:
        return 0.0
    minute = (v.t // 60).astype(int)
    return float(v.groupby(minute)["kv_usage_max"].mean().max())


def _sizing_arrays(trace) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The trace's arrival times, prompt and output tokens as floats, what a fleet is sized from; ValueError for
    an empty trace (there is nothing to size for)."""
    t = np.asarray(trace.arrivals_s, dtype=np.float64)
    if len(t) == 0:
        raise ValueError("cannot size a fleet for an empty trace")
    return t, np.asarray(trace.prompt_tokens, dtype=np.float64), np.asarray(trace.output_tokens, dtype=np.float64)


def trace_minute_load(trace, cfg: FleetConfig) -> np.ndarray:
    """The KV tokens each minute of the trace keeps resident, by Little's law: per minute from t = 0 to the last
    arrival's, the sum over its arrivals of (prompt + half the output) x residence (the prefill floor plus up to
    2,048 output tokens at 1.5x the fleet's inter-token time), over 60 s.  The load `size_fleet_for_trace` sizes
    the busiest minute for, and `tracefleet.sized_trace_fleet` compares the median minute with."""
    from infercast.simulator.twin.latency import prefill_floor_seconds

    t, prompt, out = _sizing_arrays(trace)
    itl = cfg.twin.inter_token_seconds * 1.5
    residence = prefill_floor_seconds(prompt) + np.minimum(out, 2048) * itl
    minute = (t // 60).astype(np.int64)
    return np.bincount(minute, weights=(prompt + out / 2) * residence) / 60.0


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

    This is the whole fleet a trace needs at its peak; `infercast twin run --trace F --size-fleet` and the demo
    keep that many nodes but run only the median minute's share of them always on, the rest standby, with the
    fleet file's protections set up again (`infercast.simulator.twin.tracefleet.sized_trace_fleet`).
    """
    t, prompt, out = _sizing_arrays(trace)
    pool_name, pc = next((p, pc) for p, pc in cfg.pools.items() if not pc.standby and pc.weight > 0)
    # an engine as usually deployed (vLLM's gpu_memory_utilization 0.9): at the peak it preempts, it does not OOM
    pc = pc.model_copy(update={"memory_utilization": 0.9})
    # the model serves the trace's longest request (traces carry up to 128k-token prompts)
    vc = cfg.versions[pc.version]
    longest = int(np.max(prompt + out))
    if longest > vc.max_model_len:
        vc = vc.model_copy(update={"max_model_len": longest})
        cfg = cfg.model_copy(update={"versions": {**cfg.versions, pc.version: vc}})
    busiest = float(trace_minute_load(trace, cfg).max())
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
