"""The twin's router: token bucket, weighted pools, breakers, health checks, degradation paths, client retries.

It is also the twin's control surface: the admin methods (`set_pool_weight`,
`set_breaker_threshold`, `prewarm_pool`, ...) are what a controller — or an operator over the admin HTTP API in
`surfaces.py` — turns, exactly as they would on a real router.

Routing each tick is vectorised over the tick's cohort: pool choice by weight and context range, then water-filling
over the pool's healthy nodes (the least-loaded get the most), so 12,000 req/s cost a handful of array operations.
Every decision is recorded through the exporter's router SDK (`infercast.exporters.router.RouterRecorder`), so the twin
feeds `infercast_router_requests_total` and `infercast_degradations_total` the way a real router would.

Its parts beside it: the gateway's bucket, breakers, lanes and policy (`gateway`), what it reports into
(`accounting`), and the arithmetic on cohorts (`sharing`).
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from infercast.config import FleetConfig
from infercast.fairshare import max_min_share
from infercast.simulator.twin.accounting import LatencyBook, Recorder
from infercast.simulator.twin.drf import drf_share
from infercast.simulator.twin.engine import Node, TickSink
from infercast.simulator.twin.gateway import (
    SATURATED_KV_USAGE,
    SATURATED_WAITING_PER_NODE,
    Breaker,
    Lane,
    RouterPolicy,
    TokenBucket,
)
from infercast.simulator.twin.requests import (
    PRIORITY_NAMES,
    PriorityQueue,
    Requests,
    is_sorted,
    stable_order,
)
from infercast.simulator.twin.sharing import pick, pool_row, retry_cohorts, share_by_room, water_fill
from infercast.simulator.twin.traffic import LONG_CONTEXT_TOKENS


class Router:
    def __init__(self, cfg: FleetConfig, nodes: list[Node], recorder: Recorder, rng: np.random.Generator, book):
        self.cfg = cfg
        self.rc = cfg.router
        self.nodes = nodes
        self.recorder = recorder
        self.rng = rng
        self.book: LatencyBook = book
        self.pools = list(cfg.pools)
        self.pool_nodes: dict[str, list[Node]] = {p: [n for n in nodes if n.pool == p] for p in self.pools}
        self.version_of = {p: cfg.pools[p].version for p in self.pools}
        self.weights = {p: cfg.pools[p].weight for p in self.pools}
        self.enabled = {p: not cfg.pools[p].standby for p in self.pools}
        self.breaker_threshold = {p: self.rc.breaker_latency_seconds for p in self.pools}
        ticks = max(1, round(self.rc.breaker_window_seconds / cfg.twin.tick_seconds))
        self.breakers = {
            p: Breaker(ticks, self.rc.breaker_open_seconds, self.rc.breaker_error_ratio, self.rc.breaker_min_requests)
            for p in self.pools
        }
        self.policy = RouterPolicy()
        bucket = TokenBucket(self.rc.rate_limit_rps, self.rc.rate_limit_burst) if self.rc.rate_limit_rps else None
        # lane 0 is everyone's; `set_quota_lane` gives a stream (tenant) a lane of its own
        self.lanes: list[Lane] = [Lane(bucket, self.rc.rate_limit_queue_seconds)]
        self.lane_names = ["shared"]
        self.lane_of_tenant = np.zeros(128, dtype=np.int64)
        self.tenant_names: tuple[str, ...] = ("main",)
        self.reservoir: dict[str, str] = {}  # pool -> standby pool whose nodes `scale_pool` may start
        self.breaker_log: list[tuple[str, float, float]] = []  # (pool, opened at, open until)
        # requests waiting for room in a pool (flow control), per pool and per quota lane
        self.flow: dict[str, dict[int, PriorityQueue]] = {p: defaultdict(PriorityQueue) for p in self.pools}
        self.draining: set[str] = set()  # nodes scaled down: no new requests, stopped once empty
        self.prompt_ewma = {p: 2048.0 for p in self.pools}  # mean prompt tokens sent to each pool, recently
        self.tenant_prompt_ewma: dict[str, dict[int, float]] = {p: {} for p in self.pools}  # per tenant (DRF)
        # standby nodes join the rotation only after they pass a health check
        self.healthy = {n.name: not cfg.pools[n.pool].standby for n in nodes}
        self._health_fails = {n.name: 0 for n in nodes}
        self._next_health = 0.0
        self._retries: dict[int, list[Requests]] = defaultdict(list)
        # failed attempts whose clients retry, since the last `route`: filed into `_retries` by `_file_retries`
        self._pending_retries: list[tuple[Requests, np.ndarray, np.ndarray]] = []
        self.qps = 0.0
        self.slo = np.array([self.rc.slo_seconds.get(p, 30.0) for p in PRIORITY_NAMES])
        # one accounting for every arm: each offered request ends served (got its first token), rejected (refused
        # at once: a 429, a 400 for length or payload, no pool to take it) or failed (admitted, then lost: OOM,
        # timeout, error), judged on its last attempt; the rest are still in flight when the run stops
        self.offered_total = 0
        self.offered_by_tier = np.zeros(3, dtype=np.int64)  # first attempts per priority (urgent, normal, low)
        self.offered_tokens_by_tier = np.zeros(3, dtype=np.float64)  # their prompt tokens
        self.served_total = 0
        self.rejected_total = 0
        self.failed_total = 0
        self.admitted_total = 0  # attempts that passed the gateway (retries included)
        self.interrupted_total = 0  # served, then lost before finishing (counted as served)
        self.degraded_total = 0
        self.degradation_log: list[tuple[float, str, str, str, int]] = []  # (t, from pool, to pool, reason, n)
        self.routed: dict[str, int] = defaultdict(int)  # requests enqueued on a pool's nodes (retries included)
        self.served: dict[str, int] = defaultdict(int)  # requests a pool answered (outcome ok), as the router counts
        self.routed_long: dict[str, int] = defaultdict(int)
        self._ctx_lo = np.array([cfg.pools[p].min_context_tokens for p in self.pools])
        self._ctx_hi = np.array([cfg.pools[p].max_context_tokens or 2**62 for p in self.pools])
        # where which pools' context ranges a prompt fits changes (`_choose_pools`)
        self._ctx_bounds = np.unique(np.concatenate((self._ctx_lo, self._ctx_hi + 1)))
        # each group's cumulative pool weights (`pool_row`) for the shares and weights in `_rows_key`
        self._rows_key: tuple[bytes, bytes] | None = None
        self._rows: dict[int, tuple[np.ndarray, bool]] = {}
        # within `route`, before it sends requests to the pools, nothing changes the nodes in rotation, the weights or
        # the pools switched on (what `_choose_pools` weighs by): their shares, taken once there (None: not yet)
        self._routing = False
        self._shares: tuple[np.ndarray, np.ndarray] | None = None

    # --- admin API (the control surface) ----------------------------------------------------------------
    def set_pool_weight(self, pool: str, weight: float) -> None:
        if pool not in self.weights:
            raise KeyError(f"unknown pool {pool!r}")
        if not (weight >= 0.0):
            raise ValueError("a pool weight must be >= 0")
        self.weights[pool] = float(weight)

    def set_breaker_threshold(self, pool: str, seconds: float) -> None:
        if pool not in self.breaker_threshold:
            raise KeyError(f"unknown pool {pool!r}")
        if not (seconds > 0.0):
            raise ValueError("a breaker threshold must be > 0 seconds")
        self.breaker_threshold[pool] = float(seconds)

    def prewarm_pool(self, pool: str, t: float) -> int:
        """Boot a standby pool's nodes (cold start) and route to them once up; returns nodes started."""
        if pool not in self.pool_nodes:
            raise KeyError(f"unknown pool {pool!r}")
        started = 0
        for n in self.pool_nodes[pool]:
            if not n.up and n.up_at == float("inf"):
                n.start(t)
                started += 1
        self.enabled[pool] = True
        return started

    @property
    def bucket(self) -> TokenBucket | None:
        """The shared lane's token bucket."""
        return self.lanes[0].bucket

    def set_rate_limit(
        self, rps: float | None, burst: float | None = None, queue_seconds: float | None = None, lane: int = 0
    ) -> None:
        """Set (or with rps None remove) a lane's token bucket; `queue_seconds` how long over-rate requests wait."""
        ln = self.lanes[lane]
        if rps is None:
            ln.bucket = None
        elif ln.bucket is None:
            ln.bucket = TokenBucket(rps, burst)
        else:
            ln.bucket.rate = float(rps)
            ln.bucket.burst = float(burst if burst is not None else rps)
        if queue_seconds is not None:
            ln.queue_seconds = float(queue_seconds)

    def set_quota_lane(self, tenant: str, rps: float, burst: float | None, queue_seconds: float) -> int:
        """Give a stream (tenant) a token bucket of its own (seed 000's 专用配额通道); returns the lane's index."""
        if tenant not in self.tenant_names:
            raise KeyError(f"unknown stream {tenant!r} (have {list(self.tenant_names)})")
        if tenant in self.lane_names:
            lane = self.lane_names.index(tenant)
            self.set_rate_limit(rps, burst, queue_seconds, lane)
            return lane
        self.lanes.append(Lane(TokenBucket(rps, burst), queue_seconds))
        self.lane_names.append(tenant)
        self.lane_of_tenant[self.tenant_names.index(tenant)] = len(self.lanes) - 1
        return len(self.lanes) - 1

    def _replicas(self, pool: str) -> list[Node]:
        return [n for n in self.pool_nodes[pool] if (n.up or n.up_at < float("inf")) and n.name not in self.draining]

    def lane_index(self, lane: str) -> int:
        if lane not in self.lane_names:
            raise KeyError(f"unknown lane {lane!r} (have {self.lane_names})")
        return self.lane_names.index(lane)

    def set_lane_rate(self, lane: str, rps: float | None, burst: float | None = None) -> None:
        """A quota lane's token bucket by name (`shared`: everyone's); rps None removes it."""
        self.set_rate_limit(rps, burst, lane=self.lane_index(lane))

    def admission(self) -> dict:
        """The admission limits in force: memory breaker, longest prompt, gateway waits of normal and low work."""
        limits = {n.control.stop_admit_memory for n in self.nodes}
        tiers = self.policy.tier_queue_seconds
        return {
            "memory_limit": limits.pop() if len(limits) == 1 else None,
            "max_context_tokens": self.policy.reject_context_tokens,
            "normal_queue_seconds": tiers[1] if tiers else None,
            "low_queue_seconds": tiers[2] if tiers else None,
        }

    def set_admission(
        self,
        memory_limit: float | None = None,
        max_context_tokens: int | None = None,
        normal_queue_seconds: float | None = None,
        low_queue_seconds: float | None = None,
    ) -> None:
        """Change the admission limits given (None: unchanged)."""
        for v in (memory_limit, normal_queue_seconds, low_queue_seconds):
            if v is not None and not (0.0 <= v < float("inf")):
                raise ValueError(f"an admission limit must be finite and >= 0, got {v!r}")
        if memory_limit is not None:
            for n in self.nodes:
                n.control.stop_admit_memory = float(memory_limit)
        if max_context_tokens is not None:
            self.policy.reject_context_tokens = int(max_context_tokens)
        if normal_queue_seconds is not None or low_queue_seconds is not None:
            urgent, normal, low = self.policy.tier_queue_seconds or (0.0, self.rc.rate_limit_queue_seconds,
                                                                     self.rc.rate_limit_queue_seconds)  # fmt: skip
            self.policy.tier_queue_seconds = (
                urgent,
                normal if normal_queue_seconds is None else float(normal_queue_seconds),
                low if low_queue_seconds is None else float(low_queue_seconds),
            )

    def pool_replicas(self, pool: str) -> int:
        """Nodes of a pool that serve or are starting, not draining (what a Deployment's replica count says)."""
        return len(self._replicas(pool))

    def scale_pool(self, pool: str, replicas: int, t: float) -> int:
        """Set a pool's replica count, as a Deployment scales: up, nodes that were draining stay, then nodes of the
        pool's reservoir start (they serve after the cold start); down, starting nodes stop at once and serving
        ones drain (no new requests; they stop and go back to the reservoir once empty).  Never below one node;
        returns the replicas now."""
        if pool not in self.pool_nodes:
            raise KeyError(f"unknown pool {pool!r}")
        current = self._replicas(pool)
        res = self.reservoir.get(pool)
        if replicas > len(current):
            need = replicas - len(current)
            for n in [n for n in self.pool_nodes[pool] if n.name in self.draining][:need]:
                self.draining.discard(n.name)
                need -= 1
            spare = [n for n in self.pool_nodes[res] if not n.up and n.up_at == float("inf")] if res else []
            for n in spare[:need]:
                self._move(n, res, pool)
                n.start(t)
                self.healthy[n.name] = False  # joins the rotation once a health check passes
        elif replicas < len(current):
            victims = sorted(current, key=lambda n: (n.up, n.load))[: len(current) - max(1, replicas)]
            for n in victims:
                if n.up:
                    self.draining.add(n.name)
                else:
                    n.shutdown()
                    self._move(n, pool, res or pool)
        return self.pool_replicas(pool)

    def _finish_draining(self) -> None:
        for name in sorted(self.draining):  # sorted: a set of names iterates in a per-process hash order
            n = next(x for x in self.nodes if x.name == name)
            if n.load == 0 or not n.up:
                self.draining.discard(name)
                n.shutdown()
                self.healthy[name] = False
                pool = n.pool
                self._move(n, pool, self.reservoir.get(pool, pool))

    def _move(self, node: Node, src: str, dst: str) -> None:
        if src == dst:
            return
        self.pool_nodes[src].remove(node)
        self.pool_nodes[dst].append(node)
        node.pool = dst

    # --- per tick ---------------------------------------------------------------------------------------
    def _tick_index(self, t: float) -> int:
        return int(np.floor(t / self.cfg.twin.tick_seconds + 1e-9))

    def route(self, t0: float, t1: float, new: Requests) -> None:
        dt = t1 - t0
        self.offered_total += len(new)
        if len(new):
            self.offered_by_tier += np.bincount(new.prio.astype(np.int64), minlength=3)
            self.offered_tokens_by_tier += np.bincount(new.prio.astype(np.int64), weights=new.prompt, minlength=3)
        self._routing, self._shares = True, None
        try:
            chosen = self._route(t0, dt, new)
        finally:
            self._routing, self._shares = False, None
        if chosen is not None:
            reqs, pool_idx = chosen
            for pi, pool in enumerate(self.pools):
                sel = (pool_idx == pi).nonzero()[0]
                if len(sel):
                    self._send_to_pool(pool, reqs.take(sel), t0, set())
        if self.policy.flow_control_waiting is not None:
            self._drain_flow(t0)

    def _route(self, t0: float, dt: float, new: Requests) -> tuple[Requests, np.ndarray] | None:
        """`route` up to the pools' choice: the requests that pass the gateway and each one's pool (None: nothing
        to route this tick); `route` then sends them on."""
        self._file_retries()
        due = self._retries.pop(self._tick_index(t0), [])
        src = Requests.concat([new, *due])
        # `sel`: the rows of `src` still on their way, in the order they go (None: all of them, as they are).  Each
        # step below narrows it, and the requests are copied once, where they leave (a 400, a 429, a lane's queue,
        # the pools): picking rows of rows of `src` is picking rows of `src`, so every cohort holds what taking the
        # requests step by step gave
        sel = None
        if len(src) > 1 and not is_sorted(src.att_t):
            # the streams' arrivals and the retries come as separate cohorts: in the order they were sent, so that
            # no stream goes first within a tick (each node serves first come, first served)
            sel = stable_order(src.att_t)
        n = len(src)
        self.qps = 0.9 * self.qps + 0.1 * (n / dt)
        buckets = any(ln.bucket is not None for ln in self.lanes)
        if not n and not buckets:
            return None
        lim = self.policy.reject_context_tokens
        refuse = np.zeros(n, dtype=bool)
        if lim is not None:
            refuse |= pick(src.prompt, sel) > lim
        if self.policy.validate_requests:
            refuse |= pick(src.malformed, sel)
        defer = None
        if self.policy.length_gates is not None:
            retry_above, drop_above, vip = self.policy.length_gates
            prompt = pick(src.prompt, sel)
            lane = np.isin(pick(src.tenant, sel), list(vip)) if vip else np.zeros(n, dtype=bool)
            refuse |= (prompt > drop_above) & ~lane
            defer = (prompt > retry_above) & ~lane & ~refuse & (pick(src.attempt, sel) == 1)
        if refuse.any():  # a 400: the client does not retry it
            bad = src.take(pick(sel, refuse.nonzero()[0]))
            self._final(bad, self._choose_pools(bad), "rejected", t0)
            keep = ~refuse
            sel = pick(sel, keep.nonzero()[0])
            defer = None if defer is None else defer[keep]
        if defer is not None and defer.any():  # a 429 keeping the metadata: the client's retry is let in
            later = src.take(pick(sel, defer.nonzero()[0]))
            self._fail(later, self._choose_pools(later), "rejected", t0)
            sel = pick(sel, (~defer).nonzero()[0])
        # with buckets every tick, arrivals or not: the buckets refill and their queues drain on the clock
        reqs = self._rate_limit(src, t0, dt, sel) if buckets else src if sel is None else src.take(sel)
        self.admitted_total += len(reqs)
        return reqs, self._choose_pools(reqs)

    def _rate_limit(self, reqs: Requests, t: float, dt: float, sel: np.ndarray | None = None) -> Requests:
        """Token buckets at the gateway, one per quota lane.  Over the rate, requests wait in their lane's queue
        up to its time (with tiers: urgent requests pass at once, outside the bucket; normal, then low, wait up to
        their tier's time), then get a 429 and their clients retry.  `sel`: the rows of `reqs` that come, in that
        order (None: all)."""
        if len(self.lanes) == 1:
            return self._through_lane(self.lanes[0], reqs, t, dt, sel=sel)
        lane_of = self.lane_of_tenant[pick(reqs.tenant, sel)]
        out = []
        for li, lane in enumerate(self.lanes):
            out.append(self._through_lane(lane, reqs, t, dt, quota=li > 0, sel=pick(sel, (lane_of == li).nonzero()[0])))
        return Requests.concat(out)

    def _through_lane(
        self, lane: Lane, reqs: Requests, t: float, dt: float, quota: bool = False, sel: np.ndarray | None = None
    ) -> Requests:
        """One lane's bucket: `quota` for a tenant's own lane (its quota covers all its requests), else the shared
        lane; `sel` the rows of `reqs` that come to it, in that order (None: all)."""
        tiers = self.policy.tier_queue_seconds
        classes = (0, 1, 2) if tiers is not None else (None,)
        if tiers is None:
            lane.queues[None].push(reqs if sel is None else reqs.take(sel))
        else:
            prio = pick(reqs.prio, sel)
            for c in classes:
                idx = (prio == c).nonzero()[0]
                if len(idx):  # (an empty cohort is not queued: nothing to take)
                    lane.queues[c].push(reqs.take(pick(sel, idx)))
        # with tiers, the shared lane serves urgent requests at once, outside the bucket (seed 004: 紧急请求：立即处理)
        # and meters normal and low work.  A tenant's own lane is a quota: it meters the tenant's urgent requests
        # too, first out of the bucket, and refuses those over the rate at once (urgent waits 0), or a tenant that
        # marks its surge urgent would pass its lane untouched -- the customer the lane exists to contain
        metered = classes if quota else tuple(c for c in classes if c != 0)
        waiting = sum(len(lane.queues[c]) for c in metered)
        budget = waiting if lane.bucket is None else lane.bucket.take(waiting, dt)
        out = []
        for c in classes:
            q = lane.queues[c]
            take = min(budget, len(q)) if c in metered else len(q)
            if take > 0:
                out.append(q.pop_many(take))
                # (on the shared lane, as before, the urgent requests passed unmetered still come out of what the
                # bucket hands normal and low work this tick)
                budget = max(0, budget - take)
            # what is left waits, up to the limit (0: nothing waits)
            max_wait = lane.queue_seconds if c is None else tiers[c]
            gone = q.drop_older_than(t - max_wait + 1e-9) if max_wait > 0 else q.drain()
            if len(gone):
                self._fail(gone, self._choose_pools(gone), "rejected", t)
        return Requests.concat(out)

    def _choose_pools(self, reqs: Requests) -> np.ndarray:
        """Pick a pool per request: share = weight x nodes in rotation (weights are per node, as in Envoy's EDS),
        among pools whose context range fits.  A pool with no node in rotation gets no share while another has
        one; when none has, pools fall back to their bare weights and the failover paths take over."""
        if self._shares is None:
            in_rotation = np.array([sum(self.healthy[n.name] for n in self.pool_nodes[p]) for p in self.pools])
            w = np.array([self.weights[p] if self.enabled[p] else 0.0 for p in self.pools])
            share = w * in_rotation
            if self._routing:  # the rotation and the weights hold until `route` sends the tick's requests on
                self._shares = (share, w)
        else:
            share, w = self._shares
        # Which pools' context ranges a prompt fits changes only at the ranges' bounds, so the prompts fall into a
        # few groups with one row of pool weights each; the draw is per request, as it would be over an n x pools
        # matrix of identical rows (the same cumulative sums, the same comparisons)
        bounds = self._ctx_bounds
        group = bounds.searchsorted(reqs.prompt, side="right")
        present = (np.bincount(group, minlength=len(bounds) + 1)).nonzero()[0].tolist()
        # a group's row depends only on the shares and the weights: kept while they stay as they are
        key = (share.tobytes(), w.tobytes())
        if key != self._rows_key:
            self._rows_key, self._rows = key, {}
        rows = []
        for g in present:
            c = self._rows.get(g)
            if c is None:  # from the group's first prompt, as before (every prompt of a group fits the same pools)
                first = int(reqs.prompt[int(np.argmax(group == g))])
                c = self._rows[g] = pool_row(first, self._ctx_lo, self._ctx_hi, share, w)
            rows.append(c)
        u = self.rng.random(len(reqs))
        out = np.empty(len(reqs), dtype=np.int64)
        for (c, finite), g in zip(rows, present, strict=True):
            sel = (group == g).nonzero()[0] if len(rows) > 1 else slice(None)
            x = u[sel] * c[-1]
            if finite:  # the pool the draw lands in: how many cumulative weights it reaches
                out[sel] = c.searchsorted(x, side="right")  # (they climb: the weights are >= 0)
            else:
                out[sel] = (x[:, None] >= c).sum(axis=1)
        return np.minimum(out, len(self.pools) - 1)

    def _unavailable_reason(self, pool: str, t: float) -> str | None:
        if not self.enabled[pool]:
            return "manual"
        br = self.breakers[pool]
        if br.is_open(t):
            return br.reason
        if not self._routable(pool):
            nodes = self.pool_nodes[pool]
            if any(not n.up and n.oom_events for n in nodes):
                return "oom"
            if self.policy.memory_pressure_limit is not None and all(n.up for n in nodes):
                return "memory_pressure"
            return "health_check"
        return None

    def _routable(self, pool: str) -> list[Node]:
        lim = self.policy.memory_pressure_limit
        return [
            n
            for n in self.pool_nodes[pool]
            # the router's view: a node is routable until its health checks fail (a crash is noticed late)
            if self.healthy[n.name]
            and (n.up or n.up_at < float("inf"))
            and n.name not in self.draining
            and (lim is None or n.memory_usage() < lim)
        ]

    def _has_headroom(self, pool: str) -> bool:
        """The check seed 000's failover lacked: the target's memory is below the headroom limit and its queues
        are not saturated (GIE's 5 waiting per server)."""
        lim = self.policy.failover_headroom
        if lim is None:
            return True
        up = [n for n in self.pool_nodes[pool] if n.up]
        if not up:
            return False
        memory = float(np.mean([n.memory_usage() for n in up]))
        waiting = float(np.mean([n.waiting for n in up]))
        return memory < lim and waiting < SATURATED_WAITING_PER_NODE

    def _send_to_pool(self, pool: str, reqs: Requests, t: float, visited: set[str]) -> None:
        reason = self._unavailable_reason(pool, t)
        if reason is not None:
            visited = visited | {pool}
            for target in self.cfg.pools[pool].failover:
                if target in self.policy.cold_standby and not self.enabled[target]:
                    self.prewarm_pool(target, t)  # cold standby: started now, takes traffic after its cold start
                if target in visited or not self.enabled[target] or self._unavailable_reason(target, t):
                    continue
                if not self._has_headroom(target):
                    continue
                self.recorder.record_degradation(self.version_of[pool], self.version_of[target], reason, len(reqs))
                self.degraded_total += len(reqs)
                self.degradation_log.append((t, pool, target, reason, len(reqs)))
                self._send_to_pool(target, reqs, t, visited)
                return
            # no pool can take it: a 503 at once, the client retries
            self._fail(reqs, self.pools.index(pool), "shed", t)
            return
        if self.policy.flow_control_waiting is None:
            self._to_nodes(pool, reqs, t)
            return
        # flow control: dispatched by `_drain_flow` as the pool has room, fairly between quota lanes (with DRF: between
        # tenants, by their weighted dominant shares)
        if self.policy.drf is not None:
            lanes = reqs.tenant.astype(np.int64)
            for k in np.unique(lanes):  # each tenant's recent prompt length in this pool: its KV demand per request
                mean = float(reqs.prompt[lanes == k].mean())
                ewma = self.tenant_prompt_ewma[pool]
                ewma[int(k)] = 0.9 * ewma.get(int(k), mean) + 0.1 * mean
        elif len(self.lanes) > 1:
            lanes = self.lane_of_tenant[reqs.tenant]
        else:
            lanes = np.zeros(len(reqs), dtype=np.int64)
        for lane in np.unique(lanes):
            self.flow[pool][int(lane)].push(reqs.take((lanes == lane).nonzero()[0]))

    def flow_waiting(self, pool: str) -> int:
        """Requests waiting at the gateway for room in this pool (flow control)."""
        return sum(len(q) for q in self.flow[pool].values())

    def _drain_flow(self, t: float) -> None:
        """Dispatch waiting requests to pools with room, urgent first, and within a tier fairly between quota lanes
        (max-min: a lane that needs less than an equal share gets all it needs; GIE's fairness between flows): a
        pool is saturated when its serving nodes hold `flow_control_waiting` waiting requests each (GIE's
        saturation detector); low work goes only to the nodes with room to start it, below the tier's idle memory
        level; requests that wait longer than their tier allows (urgent: not at all) get a 429 (their clients
        retry)."""
        limit = self.policy.flow_control_waiting
        waits = self.policy.tier_queue_seconds or (
            0.0,
            self.rc.rate_limit_queue_seconds,
            self.rc.rate_limit_queue_seconds,
        )
        for pi, pool in enumerate(self.pools):
            keys = [k for k, q in self.flow[pool].items() if len(q)]
            queues = [self.flow[pool][k] for k in keys]
            if not queues:
                continue
            prompt = self.prompt_ewma[pool]
            nodes = [n for n in self._routable(pool) if n.up]
            node_fits = [self._fits(n, prompt) for n in nodes]  # shared by the tiers, most urgent first
            given = 0
            for c in (0, 1):
                # a tier's room in the nodes' queues counts only what the nodes serve before it; what a node can start
                # now (`fits`) first drains its own queue, so a node whose backlog is over the limit offers no room
                # (counting its free slots beside a full queue kept that backlog from ever draining)
                room = max(
                    0,
                    sum(max(0, int(limit) + f - n.waiting_upto(c)) for n, f in zip(nodes, node_fits, strict=True))
                    - given,
                )
                want = np.array([len(q.classes[c]) for q in queues])
                give = self._share(pool, keys, want, room) if want.sum() > room else want
                for q, k in zip(queues, give, strict=True):
                    if k:
                        self._to_nodes(pool, q.classes[c].pop_many(int(k)), t)
                given += int(give.sum())
            # low-priority work goes to each node that has spare capacity now (seed 004: 空闲时处理), as much as it
            # can start; not only when the whole pool is at rest, which on a fleet with one busy node (or any normal
            # request just dispatched) starved the tier while most nodes had room
            spare = np.array([self._low_room(n, prompt, f) for n, f in zip(nodes, node_fits, strict=True)])
            room = int(spare.sum())
            want = np.array([len(q.classes[2]) for q in queues])
            give = self._share(pool, keys, want, room) if want.sum() > room else want
            low = [q.classes[2].pop_many(int(k)) for q, k in zip(queues, give, strict=True) if k]
            if low:
                self._to_nodes(pool, Requests.concat(low), t, nodes=nodes, room=spare)
            for q in queues:
                for c in (0, 1, 2):
                    cq = q.classes[c]
                    gone = cq.drop_older_than(t - waits[c] + 1e-9) if waits[c] > 0 else cq.drain()
                    if len(gone):
                        self._fail(gone, pi, "rejected", t)

    def _share(self, pool: str, keys: list[int], want: np.ndarray, room: int) -> np.ndarray:
        """A pool's room split between the flows that want more than it: max-min fair between quota lanes, or with
        DRF weighted dominant-resource-fair between tenants, with their floors and caps (`drf.drf_share`)."""
        drf = self.policy.drf
        if drf is None:
            return max_min_share(want, room)
        ewma = self.tenant_prompt_ewma[pool]
        mean = max(self.prompt_ewma[pool], 1.0)
        # the room is counted in requests of the pool's mean prompt: a tenant's request costs one batch slot and its
        # prompt's KV; its dominant resource is whichever it uses the larger share of
        cost = np.array([max(1.0, ewma.get(k, mean) / mean) for k in keys])
        spec = [drf.get(k, (1.0, 0.0, 1.0)) for k in keys]
        return drf_share(
            want,
            room,
            cost,
            np.array([w for w, _, _ in spec]),
            np.array([lo for _, lo, _ in spec]),
            np.array([hi for _, _, hi in spec]),
        )

    @staticmethod
    def _low_room(node: Node, prompt_tokens: float, fits: int) -> int:
        """Low-priority requests a node can take now: what it can start (`fits`) beyond everything already waiting
        on it (the higher tiers it serves first, and low work it holds), and no more than keeps it below the tier's
        idle memory level (where the node stops admitting low work and would only hold it); none at or above it."""
        room = fits - node.waiting_upto(2)
        idle = node.control.low_idle_memory
        if idle is not None:
            headroom = (idle - node.memory_usage()) * node.physical_bytes / node.bytes_per_token
            room = min(room, int(max(0.0, headroom) // max(prompt_tokens, 1.0)))
        return max(0, room)

    @staticmethod
    def _fits(node: Node, prompt_tokens: float) -> int:
        """Requests a node can start now beyond its queue (flow control): the prompts, of the pool's recent mean
        length, that fit in its free batch slots and its KV headroom below GIE's saturation (0.8) and below its
        memory breaker, as the engine's metrics show them; none while its memory breaker holds its queue."""
        if node.memory_blocked:
            return 0
        headroom = (SATURATED_KV_USAGE - node.kv_usage()) * node.kv_capacity_tokens
        lim = node.control.stop_admit_memory
        if lim is not None:
            headroom = min(headroom, (lim - node.memory_usage()) * node.physical_bytes / node.bytes_per_token)
        fits = int(max(0.0, headroom) // max(prompt_tokens, 1.0))
        return min(max(0, node.max_batch - node.running), fits)

    def _to_nodes(
        self, pool: str, reqs: Requests, t: float, nodes: list[Node] | None = None, room: np.ndarray | None = None
    ) -> None:
        """Water-fill requests over the pool's routable nodes; or, given each node's `room` (which must hold them
        all), split them over `nodes` in proportion to it, never beyond it."""
        if nodes is None or room is None:
            nodes = self._routable(pool)
            counts = water_fill(np.array([n.load for n in nodes], dtype=np.float64), len(reqs))
        else:
            counts = share_by_room(room, len(reqs))
        assign = self.rng.permutation(np.repeat(np.arange(len(nodes)), counts))
        to = counts.nonzero()[0].tolist()  # the nodes that get some
        # node i's requests are those drawn i, in arrival order: one stable sort groups them all (one node: all of
        # them, in their order; the draw above is made all the same, so the random stream is the same)
        order = assign.argsort(kind="stable") if len(to) > 1 else None
        ends = counts.cumsum().tolist()
        for i in to:
            node = nodes[i]
            part = reqs.take(slice(None) if order is None else order[ends[i] - int(counts[i]) : ends[i]])
            part.sent_t = np.maximum(part.att_t, t)
            if node.up:
                node.enqueue(part)
                # the mean as `np.mean` takes it (a float64 sum, divided by the count) without its Python wrapper
                mean = float(np.add.reduce(part.prompt, dtype=np.float64)) / len(part)
                self.prompt_ewma[pool] = 0.9 * self.prompt_ewma[pool] + 0.1 * mean
                self.routed[pool] += len(part)
                self.routed_long[pool] += int(np.count_nonzero(part.prompt > LONG_CONTEXT_TOKENS))
            else:  # crashed since the last health check: connection refused
                self._fail(part, self.pools.index(pool), "error", t)

    # --- outcomes ---------------------------------------------------------------------------------------
    def _fail(self, reqs: Requests, pool_idx: np.ndarray | int, outcome: str, t: float) -> None:
        """A failed attempt: the client retries with exponential backoff until it runs out of attempts.
        `pool_idx`: each request's pool, or one pool for them all."""
        if not len(reqs):
            return
        one = isinstance(pool_idx, int)
        retry = reqs.attempt < self.rc.retry.max_attempts
        idx = retry.nonzero()[0]
        n_retry = len(idx)
        self._count(pool_idx if one else pool_idx[idx], reqs.prio[idx], "retried")
        if n_retry:
            attempt = reqs.attempt[idx]
            backoff = self.rc.retry.backoff_seconds * self.rc.retry.backoff_multiplier ** (attempt - 1.0)
            when = t + backoff * self.rng.uniform(0.5, 1.5, len(idx))
            # filed with the other failures' retries at the next `route` (`_file_retries`); the draw is made now,
            # in the order the failures happen, so the random stream is the same
            self._pending_retries.append((reqs, idx, when))
        if n_retry == 0:  # every one gives up (`_final` only reads them: no copy needed)
            self._final(reqs, pool_idx, outcome, t)
        elif n_retry < len(reqs):
            idx = (~retry).nonzero()[0]
            self._lost(pool_idx if one else pool_idx[idx], reqs.prio[idx], reqs.served[idx], outcome, t)

    def retrying(self) -> int:
        """Requests whose clients will retry them (waiting out their backoff)."""
        filed = sum(len(r) for cohorts in self._retries.values() for r in cohorts)
        return filed + sum(len(idx) for _, idx, _ in self._pending_retries)

    def _file_retries(self) -> None:
        """File the retries of the failures since the last `route` into per-tick cohorts (`_retries[tick]`, which
        `route` concatenates in the order they were filed).  Each tick gets what filing every failure's retries on
        its own gave -- failure after failure, its retries sorted stably by the time they are sent again, cut at
        the ticks -- as one slice of one buffer sorted stably by tick: `route` concatenates a few slices (one per
        tick that failed) instead of one per failure and tick.  Nothing reads `_retries` between the failures and
        the next `route`, so filing them there changes nothing it sends.  `route` sorts each tick's arrivals and
        retries by their attempt time, stably, so handing it cohorts already in that order lets its sort merge runs
        instead of sorting from scratch."""
        pending = self._pending_retries
        if not pending:
            return
        self._pending_retries = []
        for k, r in retry_cohorts(pending, self.cfg.twin.tick_seconds):
            self._retries[k].append(r)

    def _final(self, reqs: Requests, pool_idx: np.ndarray | int, outcome: str, t: float) -> None:
        """The client gives up (or was told not to retry): the request ends `rejected` or `failed`.  One that already
        had its first token stays counted as served (its stream broke: `interrupted`)."""
        self._lost(pool_idx, reqs.prio, reqs.served, outcome, t)

    def _lost(self, pool_idx: np.ndarray | int, prio: np.ndarray, served: np.ndarray, outcome: str, t: float) -> None:
        """`_final` from the two columns it reads (priority, whether the first token came)."""
        self._count(pool_idx, prio, outcome)
        interrupted = int(np.count_nonzero(served))
        n = len(prio) - interrupted
        self.interrupted_total += interrupted
        if outcome in ("rejected", "shed"):  # refused at once
            self.rejected_total += n
        else:
            self.failed_total += n
        if n:
            self.book.add_lost(t, prio[~served] if interrupted else prio)

    def _count(self, pool_idx: np.ndarray | int, prio: np.ndarray, outcome: str) -> None:
        """Record requests by (pool, priority), in that order; `pool_idx` per request, or one pool for them all."""
        if not len(prio):
            return
        if isinstance(pool_idx, int):  # one pool: its keys are pool_idx * 3 + the priorities, in the same order
            counts = np.bincount(prio, minlength=3)
            base = 3 * pool_idx
        else:
            counts = np.bincount(pool_idx.astype(np.int64) * 3 + prio.astype(np.int64), minlength=3 * len(self.pools))
            base = 0
        nz = counts.nonzero()[0]
        for k, n in zip((nz + base).tolist(), counts[nz].tolist(), strict=True):
            pool = self.pools[k // 3]
            if outcome == "ok":
                self.served[pool] += n
            self.recorder.record_request(pool, self.version_of[pool], PRIORITY_NAMES[k % 3], outcome, n)

    def collect(self, t: float, sinks: dict[str, TickSink]) -> None:
        """Take the nodes' tick results: first tokens, failures (to retry), breaker windows."""
        if self.draining:
            self._finish_draining()
        served = []  # every first token of the tick, in order: one `book.add` (its float sums add them in this order)
        for pool in self.pools:
            bad = total = 0
            pi = self.pools.index(pool)
            for node in self.pool_nodes[pool]:
                sink = sinks.get(node.name)
                if sink is None:
                    continue
                for orig_t, sent_t, end_t, prio, prompt in sink.ttft:
                    served.append((orig_t, end_t - orig_t, prio, prompt))
                    self.served_total += len(orig_t)
                    self._count(pi, prio, "ok")
                    thr = self._thresholds(pool, prompt)
                    bad += int(np.count_nonzero((end_t - sent_t) > thr))
                    total += len(orig_t)
                for reqs, reason in sink.failed:
                    if reason == "too_long":  # a 400 before any work: retrying cannot help
                        self._final(reqs, pi, "rejected", t)
                        continue
                    if reason == "malformed":  # a 400 after the prefill: admitted, then lost; no retry
                        self._final(reqs, pi, "error", t)
                        bad += len(reqs)
                        total += len(reqs)
                        continue
                    outcome = "timeout" if reason == "timeout" else "error"
                    self._fail(reqs, pi, outcome, t)
                    bad += len(reqs)
                    total += len(reqs)
            br = self.breakers[pool]
            br.record(bad, total)
            if br.evaluate(t, "timeout"):
                self.breaker_log.append((pool, t, br.open_until))
        if served:
            orig_t, latency, prio, prompt = (np.concatenate(c) for c in zip(*served, strict=True))
            self.book.add(orig_t, latency, prio, self.slo, prompt)

    def _thresholds(self, pool: str, prompt: np.ndarray) -> np.ndarray | float:
        base = self.breaker_threshold[pool]
        if not self.policy.dynamic_timeout:
            return base
        th = self.cfg.thresholds
        # seed 000: 200 ms x max(1, ctx/4000) x min(3, qps/3000); the load factor is floored at 1 (see docs/twin.md)
        load = min(th.timeout_max_load_factor, max(1.0, self.qps / th.timeout_qps_unit))
        return base * np.maximum(1.0, prompt / th.timeout_context_tokens) * load

    def health_check(self, t: float) -> None:
        if t < self._next_health:
            return
        self._next_health = t + self.rc.health_check_interval_seconds
        for n in self.nodes:
            if n.healthy(t):
                self._health_fails[n.name] = 0
                self.healthy[n.name] = True
            else:
                self._health_fails[n.name] += 1
                if self._health_fails[n.name] >= self.rc.health_check_failures:
                    self.healthy[n.name] = False
