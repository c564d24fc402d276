"""The twin's gateway pieces: the token bucket, a pool's circuit breaker, the quota lane, and the policy the
controls set on the router (`RouterPolicy`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from infercast.simulator.twin.requests import (
    RequestQueue,
)


class TokenBucket:
    def __init__(self, rate: float, burst: float | None) -> None:
        self.rate = float(rate)
        self.burst = float(burst if burst is not None else rate)
        self.tokens = self.burst

    def take(self, n: int, dt: float) -> int:
        self.tokens = min(self.burst, self.tokens + self.rate * dt)
        k = min(n, int(self.tokens))
        self.tokens -= k
        return k


@dataclass
class Breaker:
    """Per-pool breaker over a sliding window of (bad, total) per tick."""

    window_ticks: int
    open_seconds: float
    ratio: float
    min_requests: int
    bad: list[int] = field(default_factory=list)
    total: list[int] = field(default_factory=list)
    open_until: float = -1.0
    reason: str = "timeout"

    def record(self, bad: int, total: int) -> None:
        self.bad.append(bad)
        self.total.append(total)
        if len(self.bad) > self.window_ticks:
            self.bad.pop(0)
            self.total.pop(0)

    def is_open(self, t: float) -> bool:
        return t < self.open_until

    def evaluate(self, t: float, reason: str) -> bool:
        """Open when the window's bad ratio crosses the threshold; returns True on the closed->open edge."""
        if self.is_open(t):
            return False
        total = sum(self.total)
        if total >= self.min_requests and sum(self.bad) / total >= self.ratio:
            self.open_until = t + self.open_seconds
            self.reason = reason
            self.bad.clear()
            self.total.clear()  # half-open afterwards: judged afresh on new traffic
            return True
        return False


@dataclass
class RouterPolicy:
    """What the controls change (the seed's fixes and infercast's own levers); defaults = the seed's fleet."""

    reject_context_tokens: int | None = None
    validate_requests: bool = False  # refuse malformed requests at the gateway (seed 004's 预过滤层)
    dynamic_timeout: bool = False
    memory_pressure_limit: float | None = None  # don't route to nodes above this memory ratio
    failover_headroom: float | None = None  # degrade only to pools whose memory is below this, queues unsaturated
    # seed 004's tiers at the gateway: normal and low wait up to these seconds over a lane's rate (None: one FIFO
    # with the lane's queue time); urgent passes the shared lane at once, and a tenant's quota lane serves it first
    # out of its bucket and refuses it at once over the rate (see `Router._through_lane`)
    tier_queue_seconds: tuple[float, float, float] | None = None
    cold_standby: frozenset[str] = frozenset()  # switched-off failover pools, started when a failover needs them
    # flow control at the gateway (GIE's): a pool is saturated at this many waiting requests per serving node;
    # normal and low requests for a saturated pool wait at the gateway (None: everything goes straight to nodes)
    flow_control_waiting: float | None = None
    # seed 004's length gates (输入长度拦截): first attempts of prompts over the first bound get a 429 (their retry is
    # admitted: the gateway kept their metadata), prompts over the second a 400, except from the long-text lane's
    # tenants (stream indices); None: off
    length_gates: tuple[int, int, frozenset[int]] | None = None
    # seed 004's DRF between tenants (stream index -> weight, min quota, max quota) for a pool's room under flow
    # control; None: max-min fair between quota lanes, as before
    drf: dict[int, tuple[float, float, float]] | None = None


SATURATED_WAITING_PER_NODE = 5.0  # GIE's and WVA's saturation: 5 waiting requests per server ...
SATURATED_KV_USAGE = 0.8  # ... or KV-cache usage of 0.8


@dataclass
class Lane:
    """A quota lane at the gateway: a token bucket (None: unlimited) and its waiting requests per class."""

    bucket: TokenBucket | None
    queue_seconds: float
    queues: dict[int | None, RequestQueue] = field(default_factory=lambda: {c: RequestQueue() for c in (None, 0, 1, 2)})
