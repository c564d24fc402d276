"""The fleet: nodes, router, traffic and a control, advanced together in fixed ticks.

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

from collections import defaultdict

import numpy as np

from infercast.config import FleetConfig
from infercast.twin.controls import Action, Control, NoControl, Observation, PoolView, make_control
from infercast.twin.engine import Node, TickSink
from infercast.twin.requests import Requests
from infercast.twin.router import LatencyBook, Router
from infercast.twin.traffic import LONG_CONTEXT_TOKENS, ScenarioTraffic, TraceTraffic, Traffic


def _default_recorder():
    from exporters.router import RouterRecorder

    return RouterRecorder()


class Fleet:
    def __init__(
        self,
        cfg: FleetConfig,
        traffic: Traffic,
        control: str | Control = "none",
        seed: int = 0,
        recorder=None,
        sample_seconds: float = 5.0,
        reference=None,
    ) -> None:
        self.seed = seed
        ss = np.random.SeedSequence(seed)
        s_router, s_nodes, s_control = ss.spawn(3)
        self.control = (
            control
            if not isinstance(control, str)
            else make_control(control, cfg, traffic, int(s_control.generate_state(1)[0]), reference)
        )
        cfg = self.control.layout(cfg)  # the seeds' fixes run on the same hardware laid out as they ask
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
        self.recorder = recorder if recorder is not None else _default_recorder()
        self.book = LatencyBook(max(traffic.duration_s, 1.0) + 3600.0)
        self.router = Router(cfg, self.nodes, self.recorder, np.random.default_rng(s_router), self.book)
        self.router.tenant_names = tuple(getattr(traffic, "stream_names", ("main",)))
        auto = cfg.protections.autoscaler
        if auto is not None and auto.reservoir in cfg.pools:
            self.router.reservoir = {p: auto.reservoir for p in auto.pools if p in cfg.pools}
        self.actions: list[tuple[float, Action]] = []
        self.samples: list[dict] = []
        self.node_samples: list[dict] = []
        self._routed_mark: dict[str, int] = defaultdict(int)
        self._routed_long_mark: dict[str, int] = defaultdict(int)
        self._offered_mark = 0

    # --- observation and actions (the control loop's I/O edge) ------------------------------------------
    def observe(self) -> Observation:
        pools = []
        r = self.router
        for pool, pc in self.cfg.pools.items():
            nodes = r.pool_nodes[pool]
            up = [n for n in nodes if n.up]
            pools.append(
                PoolView(
                    name=pool,
                    nodes=len(nodes),
                    nodes_up=len(up),
                    nodes_starting=sum(1 for n in nodes if not n.up and n.up_at < float("inf")),
                    standby=pc.standby,
                    enabled=r.enabled[pool],
                    speed=self.cfg.versions[pc.version].peak_throughput_factor,
                    memory_usage=float(np.mean([n.memory_usage() for n in up])) if up else 0.0,
                    kv_usage=float(np.mean([n.kv_usage() for n in up])) if up else 0.0,
                    kv_usage_max=float(np.max([n.kv_usage() for n in up])) if up else 0.0,
                    waiting=sum(n.waiting for n in up) + r.flow_waiting(pool),
                    weight=r.weights[pool],
                    min_context_tokens=pc.min_context_tokens,
                    max_context_tokens=pc.max_context_tokens,
                )
            )
        return Observation(
            self.now,
            tuple(pools),
            self.cfg.twin.prefill_tokens_per_second,
            self.cfg.router.cold_start_seconds,
            fleet=lambda: self._admin().observe(),
        )

    def _admin(self):
        from actuators.backends.twin import TwinAdmin

        return TwinAdmin(self)

    def apply(self, action) -> None:
        if not isinstance(action, Action):  # a typed action of `actuators.actions`
            self._admin().apply(action)
            return
        r = self.router
        if action.kind == "set_policy":
            for k, v in action.args.items():
                setattr(r.policy, k, v)
        elif action.kind == "set_node_control":
            for n in self.nodes:
                for k, v in action.args.items():
                    setattr(n.control, k, v)
        elif action.kind == "set_tiers":
            for n in self.nodes:
                n.set_tiers(action.args["low_idle_memory"])
        elif action.kind == "set_rate_limit":
            r.set_rate_limit(action.args.get("rps"), action.args.get("burst"), action.args.get("queue_seconds"))
        elif action.kind == "set_quota_lane":
            a = action.args
            r.set_quota_lane(a["stream"], a["rps"], a.get("burst"), a.get("queue_seconds", 0.0))
        elif action.kind == "set_admission":
            r.set_admission(**action.args)
        elif action.kind == "prewarm":
            r.prewarm_pool(action.pool, self.now)
        elif action.kind == "scale":
            r.scale_pool(action.pool, int(action.args["replicas"]), self.now)
        elif action.kind == "set_weight":
            r.set_pool_weight(action.pool, action.args["weight"])
        elif action.kind == "set_breaker_threshold":
            r.set_breaker_threshold(action.pool, action.args["seconds"])
        else:
            raise ValueError(f"unknown action {action.kind!r}")
        self.actions.append((self.now, action))

    # --- time -------------------------------------------------------------------------------------------
    def advance(self, seconds: float) -> None:
        end = self.now + seconds
        while self.now < end - 1e-9:
            self.step()

    def step(self) -> None:
        t0 = self.now
        t1 = (self._tick_no + 1) * self.dt
        if not isinstance(self.control, NoControl):  # nothing to observe for
            for action in self.control.decide(self.observe()):
                self.apply(action)
        self.router.health_check(t0)
        arrivals = self.traffic.arrivals(t0, t1) if t0 < self.traffic.duration_s else Requests.empty()
        self.router.route(t0, t1, arrivals)
        client_timeout = self.cfg.router.client_timeout_seconds
        sinks = {}
        for node in self.nodes:
            sink = TickSink()
            node.step(t0, t1, sink, client_timeout)
            if sink.ttft or sink.failed or sink.completed:
                sinks[node.name] = sink
        self.router.collect(t1, sinks)
        self._tick_no += 1
        self.now = t1
        if self._tick_no % max(1, round(self.sample_seconds / self.dt)) == 0:
            self._sample()

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
                    "rps": routed / step,
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


def build_fleet(
    cfg: FleetConfig, control: str | Control = "none", seed: int | None = None, recorder=None, reference=None
) -> Fleet:
    """A fleet driven by the config's scenario (or, with none, a steady trickle): the exporter's in-process twin."""
    if cfg.scenario is None:
        raise ValueError("the fleet file has no `scenario:` section to drive the twin with")
    seed = cfg.scenario.seed if seed is None else seed
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    traffic = ScenarioTraffic(cfg.scenario, cfg.router.priority_shares, rng)
    return Fleet(cfg, traffic, control, seed, recorder, reference=reference)


def trace_fleet(cfg: FleetConfig, trace, control: str | Control = "none", seed: int = 0, recorder=None, **kw) -> Fleet:
    rng = np.random.default_rng(np.random.SeedSequence([seed, 1]))
    max_tokens = cfg.scenario.lengths.request_max_tokens if cfg.scenario else 512
    traffic = TraceTraffic(trace, cfg.router.priority_shares, rng, max_tokens)
    return Fleet(cfg, traffic, control, seed, recorder, **kw)


__all__ = ["LONG_CONTEXT_TOKENS", "Fleet", "build_fleet", "trace_fleet"]
