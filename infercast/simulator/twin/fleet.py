"""The fleet: nodes, router and traffic, advanced together in fixed ticks.  Controllers act on it from outside,
through its admin API (`infercast/simulator/twin/admin.py`), between calls to `advance`.

Why fixed ticks (default 250 ms) rather than one event per request: at 12,000 req/s a per-request event loop in
Python cannot run 30x faster than real time.  The twin moves requests through the router as cohorts (numpy
arrays), and keeps per-request (per-block) fidelity only inside nodes, where it decides the outcome: which request
gets a KV block, when the prefill queue spills, when memory tips over.  What happens inside a tick is not
quantised: arrivals keep their exact times, prefills their exact start and end, so latencies are continuous.
Memory climbs over tens of seconds and a cold start takes 90 s, so 250 ms is finer than anything the controls
react to.

Deterministic: every random stream is derived from the one seed (`numpy.random.SeedSequence`), so the same
scenario and seed give the same result to the last digit.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from infercast.config import FleetConfig
from infercast.simulator.twin.accounting import CountingRecorder, LatencyBook, Recorder
from infercast.simulator.twin.engine import Node, TickSink
from infercast.simulator.twin.gateway import RouterPolicy
from infercast.simulator.twin.requests import Requests
from infercast.simulator.twin.router import Router
from infercast.simulator.twin.traffic import LONG_CONTEXT_TOKENS, ScenarioTraffic, TraceTraffic, Traffic

log = logging.getLogger(__name__)
_WARNED: set[str] = set()  # warnings already logged in this process (hindsight sets a fleet up once a plan)


@dataclass(frozen=True)
class PoolLive:
    """What the engines of one pool show right now (what an HPA reads through the Prometheus adapter)."""

    name: str
    nodes_up: int
    nodes_starting: int
    memory_usage: float  # mean over the nodes that are up
    kv_usage: float  # mean over the nodes that are up
    kv_usage_max: float  # the fullest node that is up
    waiting: int  # requests waiting on its nodes and, under flow control, at the gateway for it

    @property
    def replicas(self) -> int:
        return self.nodes_up + self.nodes_starting


class Fleet:
    def __init__(
        self,
        cfg: FleetConfig,
        traffic: Traffic,
        seed: int = 0,
        recorder: Recorder | None = None,
        sample_seconds: float = 5.0,
    ) -> None:
        self.seed = seed
        ss = np.random.SeedSequence(seed)
        s_router, s_nodes, _ = ss.spawn(3)
        self.cfg = cfg
        self.traffic = traffic
        self.dt = cfg.twin.tick_seconds
        self.now = 0.0
        self._tick_no = 0
        self.sample_seconds = sample_seconds
        self.nodes: list[Node] = []
        node_seeds = s_nodes.spawn(sum(p.nodes for p in cfg.pools.values()))
        k = 0
        for pool, pc in cfg.pools.items():
            vc = cfg.versions[pc.version]
            for i in range(pc.nodes):
                node = Node(
                    f"{pool}-{i}",
                    pool,
                    pc.version,
                    vc,
                    pc,
                    cfg.twin,
                    np.random.default_rng(node_seeds[k]),
                    cfg.router.cold_start_seconds,
                    engine_index=0,
                )
                if pc.standby:
                    node.shutdown()
                self.nodes.append(node)
                k += 1
        self.recorder: Recorder = recorder if recorder is not None else CountingRecorder()
        self.book = LatencyBook(max(traffic.duration_s, 1.0) + 3600.0)
        self.router = Router(cfg, self.nodes, self.recorder, np.random.default_rng(s_router), self.book)
        self.router.tenant_names = tuple(getattr(traffic, "stream_names", ("main",)))
        auto = cfg.protections.autoscaler
        if auto is not None and auto.reservoir in cfg.pools:
            self.router.reservoir = {p: auto.reservoir for p in auto.pools if p in cfg.pools}
        self.actions: list[tuple[float, Any]] = []  # (time, action) as applied through the admin API
        self.samples: list[dict] = []
        self.node_samples: list[dict] = []
        self._routed_mark: dict[str, int] = defaultdict(int)
        self._routed_long_mark: dict[str, int] = defaultdict(int)
        self._served_mark: dict[str, int] = defaultdict(int)
        self._offered_mark = 0

    # --- what a controller reads and sets (the control loop's I/O edge) ----------------------------------
    def live(self) -> dict[str, PoolLive]:
        r = self.router
        out = {}
        for pool in self.cfg.pools:
            up = [n for n in r.pool_nodes[pool] if n.up]
            out[pool] = PoolLive(
                name=pool,
                nodes_up=len(up),
                nodes_starting=sum(1 for n in r.pool_nodes[pool] if not n.up and n.up_at < float("inf")),
                memory_usage=float(np.mean([n.memory_usage() for n in up])) if up else 0.0,
                kv_usage=float(np.mean([n.kv_usage() for n in up])) if up else 0.0,
                kv_usage_max=float(np.max([n.kv_usage() for n in up])) if up else 0.0,
                waiting=sum(n.waiting for n in up) + r.flow_waiting(pool),
            )
        return out

    def protect(self) -> None:
        """Switch on the seeds' fixes (`protections` and `thresholds` of the fleet file) as the router and the
        engines are deployed with them; the layout (context pools, cold standby) is the config's own
        (`layout.protected_layout`).  A quota lane for a stream the traffic does not have (the file's own scenario's,
        on a trace) is left out, with a warning logged once."""
        th, pr = self.cfg.thresholds, self.cfg.protections
        tiers = pr.tiers
        r = self.router
        r.policy = RouterPolicy(
            reject_context_tokens=th.context_reject_tokens,
            validate_requests=pr.validate_requests,
            dynamic_timeout=True,
            memory_pressure_limit=th.memory_breaker,
            failover_headroom=pr.failover_headroom,
            tier_queue_seconds=(0.0, tiers.normal_queue_seconds, tiers.low_queue_seconds),
            cold_standby=frozenset(pr.cold_standby),
            flow_control_waiting=pr.flow_control_waiting,
        )
        for n in self.nodes:
            n.control.stop_admit_memory = th.memory_breaker
            n.control.release_fragmentation = th.fragmentation_release
            n.set_tiers(tiers.low_idle_memory)
        for pool in self.cfg.pools:  # the dynamic timeout's base: seed 000's 200 ms, scaled by context and load
            r.set_breaker_threshold(pool, th.timeout_base_seconds)
        if pr.rate_limit is not None:
            self.limit_rate()
        for stream, b in pr.quota_lanes.items():
            if stream not in r.tenant_names:
                # a lane for a stream of the fleet file's own scenario, replayed on other traffic (a trace is one
                # stream): there is nothing to give a lane to; said once, not once a run
                msg = (
                    f"protections.quota_lanes: no stream {stream!r} in the traffic (it has "
                    f"{', '.join(repr(n) for n in r.tenant_names)}); its quota lane is left out"
                )
                if msg not in _WARNED:
                    _WARNED.add(msg)
                    log.warning(msg)
                continue
            r.set_quota_lane(stream, b.rps, b.depth, b.queue_seconds)
        self._seed004_levers()

    def _seed004_levers(self) -> None:
        """Seed 004's levers, each as `protections` sets it (none by default): the length gates and DRF at the
        gateway, API-key tiers as quota lanes (after `quota_lanes`: a stream's tier overrides its lane's rate), the
        KV partitions and max_seq_len on every engine.  A stream the traffic does not have is left out, as for
        quota lanes."""
        pr, r = self.cfg.protections, self.router
        index = {name: i for i, name in enumerate(r.tenant_names)}

        def known(streams, key: str) -> list[str]:
            missing = [s for s in streams if s not in index]
            for s in missing:
                msg = f"protections.{key}: no stream {s!r} in the traffic; left out"
                if msg not in _WARNED:
                    _WARNED.add(msg)
                    log.warning(msg)
            return [s for s in streams if s in index]

        if pr.length_gates is not None:
            g = pr.length_gates
            vip = frozenset(index[s] for s in known(g.long_text_streams, "length_gates"))
            r.policy.length_gates = (g.retry_above_tokens, g.drop_above_tokens, vip)
        if pr.api_key_tiers is not None:
            tiers = pr.api_key_tiers
            for stream in known(tiers.streams, "api_key_tiers"):
                rps = tiers.rps[tiers.streams[stream]]
                # over the tier's rate a request waits as long as its priority tier allows at the gateway (urgent:
                # a 429 at once), as on any quota lane
                r.set_quota_lane(stream, rps, tiers.burst_factor * rps, 0.0)
        if pr.drf_tenants:
            r.policy.drf = {
                index[s]: (t.weight, t.min_quota, t.max_quota)
                for s, t in pr.drf_tenants.items()
                if s in known([s], "drf_tenants")
            }
        for n in self.nodes:
            if pr.kv_partitions is not None:
                n.control.kv_partitions = pr.kv_partitions.shares
            if pr.max_seq_len is not None:
                n.control.max_seq_len = pr.max_seq_len

    def limit_rate(self) -> None:
        """Everyone's token bucket at the gateway, as `protections.rate_limit` sets it (seed 004's 基础限流)."""
        b = self.cfg.protections.rate_limit
        if b is None:
            raise ValueError("the fleet file has no protections.rate_limit")
        self.router.set_rate_limit(b.rps, b.depth, b.queue_seconds)

    # --- time -------------------------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end - 1e-9:
            self.step()

    def step(self) -> None:
        t0 = self.now
        t1 = (self._tick_no + 1) * self.dt
        self.router.health_check(t0)
        arrivals = self.traffic.arrivals(t0, t1) if t0 < self.traffic.duration_s else Requests.empty()
        self.router.route(t0, t1, arrivals)
        client_timeout = self.cfg.router.client_timeout_seconds
        sinks = {}
        killed = self._faults_due(t0, t1)
        for node in self.nodes:
            sink = TickSink()
            if node.name in killed and node.up:
                node.crash(t0, sink, reason="killed")
            node.step(t0, t1, sink, client_timeout)
            if sink.ttft or sink.failed or sink.completed:
                sinks[node.name] = sink
        self.router.collect(t1, sinks)
        self._tick_no += 1
        self.now = t1
        if self._tick_no % max(1, round(self.sample_seconds / self.dt)) == 0:
            self._sample()

    def _faults_due(self, t0: float, t1: float) -> set[str]:
        faults = self.cfg.scenario.faults if self.cfg.scenario is not None else ()
        return {f.node for f in faults if t0 <= f.at_seconds < t1}

    # --- sampling -----------------------------------------------------------------------------------------
    def _sample(self) -> None:
        t = self.now
        r = self.router
        step = self.sample_seconds
        offered = r.offered_total - self._offered_mark
        self._offered_mark = r.offered_total
        for pool in r.pools:
            nodes = r.pool_nodes[pool]
            up = [n for n in nodes if n.up]
            routed = r.routed[pool] - self._routed_mark[pool]
            routed_long = r.routed_long[pool] - self._routed_long_mark[pool]
            self._routed_mark[pool] = r.routed[pool]
            self._routed_long_mark[pool] = r.routed_long[pool]
            served = r.served[pool] - self._served_mark[pool]
            self._served_mark[pool] = r.served[pool]
            frag = [n.fragmentation(t) for n in up]
            self.samples.append(
                {
                    "t": t,
                    "pool": pool,
                    "version": r.version_of[pool],
                    "kv_usage": float(np.mean([n.kv_usage() for n in up])) if up else np.nan,
                    "kv_usage_max": float(np.max([n.kv_usage() for n in up])) if up else np.nan,
                    "memory_usage": float(np.mean([n.memory_usage() for n in up])) if up else np.nan,
                    "fragmentation": float(np.mean(frag)) if up else np.nan,
                    "rps": routed / step,  # sent to the pool, retries and requests it refuses included
                    "served_rps": served / step,  # answered by the pool (the router's outcome ok)
                    "long_share": routed_long / routed if routed else np.nan,
                    "running": sum(n.running for n in up),
                    "waiting": sum(n.waiting for n in up),
                    "alloc_failures_total": sum(n.alloc_failures_total for n in nodes),
                    "nodes_up": len(up),
                    "offered_rps": offered / step,
                }
            )
            takes_traffic = r.enabled[pool] and r.weights[pool] > 0
            for n in nodes:
                effective, allocated = n.memory_split(t) if n.up else (0.0, 0.0)
                self.node_samples.append(
                    {
                        "t": t,
                        "node": n.name,
                        "pool": pool,
                        "up": n.up,
                        # holding its GPUs: up, or starting (a cold start or a restart after a crash occupies the
                        # cards as much as serving does); a standby node not started and a stopped one do not
                        "provisioned": n.up or n.up_at < float("inf"),
                        "gpus": self.cfg.pools[pool].gpus_per_node,
                        # serving: up and taking traffic (an idle hot fallback or a standby node is not serving)
                        "serving": n.up and (takes_traffic or n.load > 0),
                        "effective_bytes": effective,
                        "allocated_bytes": allocated,
                        "memory_usage": n.memory_usage() if n.up else np.nan,
                        "kv_usage": n.kv_usage() if n.up else np.nan,
                        "fragmentation": n.fragmentation(t) if n.up else np.nan,
                        "memory_efficiency": n.memory_efficiency(t) if n.up else np.nan,
                        "running": n.running,
                        "waiting": n.waiting,
                    }
                )


def build_fleet(cfg: FleetConfig, seed: int | None = None, recorder: Recorder | None = None, **kw) -> Fleet:
    """A fleet driven by the config's scenario: the fleet as the file lays it out, with no controller."""
    if cfg.scenario is None:
        raise ValueError("the fleet file has no `scenario:` section to drive the twin with")
    seed = cfg.scenario.seed if seed is None else seed
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    traffic = ScenarioTraffic(cfg.scenario, cfg.router.priority_shares, rng)
    return Fleet(cfg, traffic, seed, recorder, **kw)


def trace_fleet(cfg: FleetConfig, trace, seed: int = 0, recorder: Recorder | None = None, **kw) -> Fleet:
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    max_tokens = cfg.scenario.lengths.request_max_tokens if cfg.scenario else 512
    traffic = TraceTraffic(trace, cfg.router.priority_shares, rng, max_tokens)
    return Fleet(cfg, traffic, seed, recorder, **kw)


__all__ = ["LONG_CONTEXT_TOKENS", "Fleet", "PoolLive", "build_fleet", "trace_fleet"]
