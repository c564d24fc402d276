"""Who owns the reserve: where the spare nodes (a standby reservoir) go, set as per-pool autoscaler floors and
ceilings.  Pure: per-pool signals, the previous plan and a time in, a `ReservePlan` out.

Spare capacity goes to whoever asks first, and each pool's autoscaler asks in proportion to its own backlog (the
twin's `Hpa`, Kubernetes' HPA and KEDA alike).  On the unannounced flash sale that splits the four standby nodes two
and two between the short- and the long-context pool, where all four on the short-context pool serve several
times the urgent requests (docs/control.md).  So the controller decides where a node is worth most and makes it
stick the way a cluster can: each pool's floor (`minReplicas`) and ceiling (`maxReplicas`) are a standing plan,
kept current every tick, that the autoscaler's own reaction then follows.

**The value of one more node to a pool** is the urgent goodput it would add, in requests per second:

- what a node serves: the requests per second a node of the pool answers per unit of KV usage (averaged over the
  last scrapes, `averaged`), times the autoscaler's KV target (`capacity`; the measure
  `policy.requests_per_node` ranks pools by);
- what the pool needs beyond the nodes it has or is starting (`nodes_needed`): the larger of the demand (the
  arrivals now or the traffic forecast's upper band over the horizon, plus the queue to drain: waiting requests
  over `drain_seconds`, more when the queue grows) beyond both what the pool answers now and what its replicas
  serve at the target (each within the HPA's 10% tolerance), over what a node serves; and, once the KV forecast's
  upper band reaches the trigger, the nodes its KV trajectory asks for (that peak over the target, as the HPA's own
  rule computes it on the present);
- weighted by the share of the pool's arrivals that is urgent (urgent goodput first; other work counts
  `other_weight` as much).

A node started now serves only after a cold start, so the demand it is judged by is the one over the horizon the
forecasts see past that cold start (the KV and traffic peaks), never the present alone.

**The plan.**  Nodes of the reservoir are earmarked one at a time, each to the pool where the next node is worth
most (a pool's value per node holds until its need is covered: a greedy split that is optimal for such
stepwise-constant values).  An earmarked node is a floor (`base + earmark`): started now, held while it is worth
something.  Nodes worth nothing anywhere are left free: every pool's ceiling is `floor + free`, so the autoscaler
may still start them for whichever pool's metrics ask, but can never take an earmarked node for another pool.
With no need anywhere (a calm day) the plan is the autoscaler's own: floors at the pools' own nodes, ceilings at
those plus the whole reservoir, and nothing is written.

**Steadiness.**  A plan that flips with every scrape would start and stop nodes that take a cold start to serve.
What a node serves is averaged over `capacity_seconds`, not read from one scrape.  An earmark rises at once where
free nodes cover it (nodes a pool's autoscaler started are that pool's until its scale-down window has passed since
it last started one); it moves from one pool to another only when the receiving pool's next node is worth
`switch_margin` more than the giving pool's last one, never back within `switch_hold_seconds` of the move, and never
away from a pool that runs the node and needed it within `release_hold_seconds` (one quiet scrape between two busy
ones says nothing about the next minute); and it falls only once the pool has needed nothing for
`release_hold_seconds` (the HPA's scale-down window by default).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from infercast.config import HPA_SCALE_DOWN_STABILIZATION_SECONDS, PolicyConfig, Thresholds

#: a node's capacity is never judged on less KV than this (an idle pool's figure says nothing)
MIN_KV = 0.05
#: no pool needs more nodes than this (a pool serving almost nothing would otherwise need an infinity)
MAX_NEED = 10_000.0


@dataclass(frozen=True)
class PoolNeed:
    """One pool's signals, as the control loop reads them (live figures, and the forecasts' upper bands)."""

    pool: str
    base: int  # the pool's own nodes: its floor when nothing is planned
    replicas: int  # nodes up or starting now
    ready: int  # nodes serving now
    kv_now: float  # KV-cache usage now (the fullest instance)
    kv_peak: float  # the KV forecast's upper peak over the horizon (kv_now without one)
    arrivals_rps: float  # requests per second sent to the pool over the last scrape interval
    served_rps: float  # requests per second it answered (the router's outcome ok)
    demand_peak_rps: float = 0.0  # the traffic forecast's upper peak over the horizon (arrivals without one)
    urgent_share: float = 1.0  # share of its arrivals that is urgent
    waiting: float = 0.0  # requests waiting for it (engines and gateway)
    waiting_growth_rps: float = 0.0  # how fast that queue grew over the last interval (requests per second)

    def __post_init__(self) -> None:
        for name in ("kv_now", "kv_peak", "arrivals_rps", "served_rps", "demand_peak_rps", "waiting"):
            v = getattr(self, name)
            if not math.isfinite(v) or v < 0:
                raise ValueError(f"pool {self.pool}: {name} must be finite and >= 0, got {v!r}")
        if self.base < 0 or self.replicas < 0 or self.ready < 0:
            raise ValueError(f"pool {self.pool}: node counts must be >= 0")
        if not 0.0 <= self.urgent_share <= 1.0:
            raise ValueError(f"pool {self.pool}: urgent_share must be within [0, 1], got {self.urgent_share!r}")


@dataclass(frozen=True)
class ReserveSettings:
    # the defaults are the fleet file's (`reserve_policy.reserve_settings` gives a file's own values)
    kv_target: float = PolicyConfig().target_kv  # KV usage per node a node's capacity is counted at
    kv_trigger: float = Thresholds().kv_forecast_trigger  # a KV forecast at or over this asks for nodes
    min_need: float = 0.5  # a need of less than this much of a node is noise
    tolerance: float = 0.1  # demand within this share over what a pool serves is met (the HPA's tolerance)
    drain_seconds: float = 60.0  # a queue is to be drained within this long
    other_weight: float = 0.1  # a non-urgent request served counts this much of an urgent one
    switch_margin: float = 0.25  # an earmark moves pools only for this much more value per node
    #: an earmark is held this long after its pool last needed it (the autoscaler's scale-down window)
    release_hold_seconds: float = HPA_SCALE_DOWN_STABILIZATION_SECONDS
    #: a node moved to a pool is not moved back within this long (the same window): a moved node drains on one pool
    #: and serves on the other only after a cold start, so values that cross and re-cross with every scrape (two
    #: pools both short of nodes in a surge) must not move it back and forth
    switch_hold_seconds: float = HPA_SCALE_DOWN_STABILIZATION_SECONDS
    #: what a node serves is averaged over about this long (an exponential average): a node's throughput per unit of
    #: KV is a property of the pool's request shapes, not of one scrape, and one scrape's ratio of a minute's answered
    #: requests to one instant's KV swings tenfold on bursty traffic (Mooncake: 1.1 to 16 req/s a node in a minute)
    capacity_seconds: float = HPA_SCALE_DOWN_STABILIZATION_SECONDS


@dataclass(frozen=True)
class Throughput:
    """A pool's answered requests per second and its KV load (ready nodes x KV usage), averaged up to `at`."""

    served_rps: float
    load: float
    at: float


@dataclass(frozen=True)
class ReservePlan:
    """Floors and ceilings per pool, the reservoir's nodes earmarked per pool, and why."""

    reserve: int
    floors: dict[str, int]
    ceilings: dict[str, int]
    earmarks: dict[str, int]
    needed_at: dict[str, float] = field(default_factory=dict)  # pool -> when it last needed a node
    gained_at: dict[str, float] = field(default_factory=dict)  # pool -> when a move last gave it a node
    values: dict[str, float] = field(default_factory=dict)  # pool -> value of its next node (req/s)
    reasons: dict[str, str] = field(default_factory=dict)
    throughput: dict[str, Throughput] = field(default_factory=dict)  # pool -> what its nodes serve, averaged
    replicas: dict[str, int] = field(default_factory=dict)  # pool -> nodes up or starting when planned
    rose_at: dict[str, float] = field(default_factory=dict)  # pool -> when its autoscaler last added nodes

    @property
    def free(self) -> int:
        return self.reserve - sum(self.earmarks.values())

    def bounds(self) -> dict[str, tuple[int, int]]:
        return {p: (self.floors[p], self.ceilings[p]) for p in self.floors}


def averaged(previous: Throughput | None, n: PoolNeed, now: float, s: ReserveSettings) -> Throughput | None:
    """The pool's throughput average with this scrape's reading in (`capacity_seconds`' exponential average; the
    first reading starts it; a pool with no node serving adds nothing)."""
    reading = scraped(n, now)
    if reading is None or previous is None:
        return reading or previous
    if now <= previous.at:
        return previous
    w = 1.0 - math.exp(-(now - previous.at) / s.capacity_seconds)
    return Throughput(
        previous.served_rps + w * (reading.served_rps - previous.served_rps),
        previous.load + w * (reading.load - previous.load),
        now,
    )


def scraped(n: PoolNeed, now: float) -> Throughput | None:
    """This scrape's throughput reading (None when no node serves: it says nothing about a node)."""
    return Throughput(n.served_rps, n.ready * max(n.kv_now, MIN_KV), now) if n.ready > 0 else None


def capacity(n: PoolNeed, s: ReserveSettings, average: Throughput | None = None) -> float:
    """Requests per second one node of the pool serves at the KV target: what its nodes answer per unit of KV (the
    average when given, else this scrape's), at the target (0 when it answers nothing yet: nothing to go on)."""
    t = average if average is not None else scraped(n, 0.0)
    if t is None or t.served_rps <= 0 or t.load <= 0:
        return 0.0
    return t.served_rps / t.load * s.kv_target


def nodes_needed(n: PoolNeed, s: ReserveSettings, cap: float | None = None) -> float:
    """Nodes the pool needs beyond those it has or is starting (fractional; 0 when covered, or when less than
    `min_need` of a node: a calm pool's noise asks for nothing).

    Two readings, the larger wins.  On the demand (the arrivals, or the traffic forecast's peak, plus the queue to
    drain): the nodes it asks for beyond both what the pool answers now and what its replicas (up or starting) serve
    at the target, within the autoscaler's 10% tolerance.  And, once the KV forecast's upper band reaches the
    trigger, the nodes that bring that peak back to the target (the HPA's own rule on the forecast rather than the
    present).  `cap`: what a node serves (`capacity`, averaged).

    Why both: what is answered swings with each scrape (a minute's answers, fewer while nodes preempt) while `cap`
    is a 300 s average, so "arrivals less what is answered" alone moved the need by whole nodes from one scrape to
    the next, asking for nodes the pool's replicas already cover (seed 700, never scored, `last-value` on the
    Mooncake surge: 4.21 -> 4.93 urgent req/s counting the replicas too; reactive 4.67).  "Demand over the
    replicas' capacity" alone asks whenever `cap` reads low, as it does while a fleet fills from empty (few answers
    yet, KV already held), though every request is answered: a pool serving all it is sent at a KV over the target
    is its autoscaler's work on its own metric, not the reserve's."""
    cap = capacity(n, s) if cap is None else cap
    starting = max(0, n.replicas - n.ready)
    by_demand = 0.0
    if cap > 0:
        demand = max(n.arrivals_rps, n.demand_peak_rps) + n.waiting / s.drain_seconds + max(0.0, n.waiting_growth_rps)
        unanswered = (demand - n.served_rps * (1.0 + s.tolerance)) / cap - starting
        over_replicas = demand / cap - n.replicas * (1.0 + s.tolerance)
        by_demand = min(unanswered, over_replicas)
    peak = max(n.kv_peak, n.kv_now)
    by_kv = n.replicas * peak / s.kv_target - n.replicas if n.replicas and peak >= s.kv_trigger else 0.0
    need = min(MAX_NEED, max(0.0, by_demand, by_kv))
    return need if need >= s.min_need else 0.0


def node_value(n: PoolNeed, s: ReserveSettings, k: int, need: float | None = None, cap: float | None = None) -> float:
    """What the k-th extra node (k >= 1) is worth to the pool: urgent requests per second it would serve, for each
    of the whole nodes its need rounds up to (as the HPA rounds), nothing past them.  Whole nodes, not fractions:
    a partly needed last node whose worth swung with every scrape's noise would move between pools."""
    cap = capacity(n, s) if cap is None else cap
    need = nodes_needed(n, s, cap) if need is None else need
    part = 1.0 if k <= math.ceil(need - 1e-9) else 0.0
    weight = n.urgent_share + s.other_weight * (1.0 - n.urgent_share)
    # a pool with nothing served yet but a KV trajectory asking for nodes still values them, at the least
    return part * (cap or MIN_KV) * weight


def plan_reserve(
    now: float,
    needs: Mapping[str, PoolNeed],
    reserve: int,
    previous: ReservePlan | None = None,
    settings: ReserveSettings = ReserveSettings(),
) -> ReservePlan:
    """The reserve plan at `now`: see the module docstring.  `reserve` is the reservoir's whole size (nodes started
    from it count against it too); `previous` the plan in force (None: the first)."""
    if reserve < 0:
        raise ValueError(f"reserve must be >= 0, got {reserve}")
    s = settings
    pools = sorted(needs)
    before = previous.throughput if previous is not None else {}
    throughput = {p: t for p in pools if (t := averaged(before.get(p), needs[p], now, s)) is not None}
    cap = {p: capacity(needs[p], s, throughput.get(p)) for p in pools}
    need = {p: nodes_needed(needs[p], s, cap[p]) for p in pools}
    # an earmark a pool had keeps counting as needed until the hold runs out
    needed_at = {p: (now if need[p] > 0 else (previous.needed_at.get(p, -math.inf) if previous else -math.inf))
                 for p in pools}  # fmt: skip
    kept = {p: previous.earmarks.get(p, 0) if previous and now - needed_at[p] < s.release_hold_seconds else 0
            for p in pools}  # fmt: skip
    # nodes a pool's autoscaler started are its own until its scale-down window has passed since it last started
    # one (the window the autoscaler itself holds them for), or until a move takes from it: other pools' earmarks
    # come from the rest, so the plan never drains a pool faster than its autoscaler would to start cold nodes
    # elsewhere (on the Mooncake surge the first plan took ten of the long pool's serving nodes for the short pool;
    # on the ServeGen surge it gave the long pool five of the short pool's, two minutes before the surge hit the
    # short pool).  The first plan presumes what it finds started recently.
    seen = previous.replicas if previous is not None else {}
    rose_at = {p: now if needs[p].replicas > seen.get(p, -1) else
               (previous.rose_at.get(p, -math.inf) if previous is not None else -math.inf) for p in pools}  # fmt: skip

    def own(p: str) -> int:
        return max(0, needs[p].replicas - needs[p].base) if now - rose_at[p] < s.release_hold_seconds else 0

    def value(p: str, k: int) -> float:
        """The k-th earmarked node's worth to p; a held node is worth the least positive value (kept, not fought)."""
        v = node_value(needs[p], s, k, need[p], cap[p])
        return v if v > 0 else (1e-9 if k <= kept[p] else 0.0)

    def movable(q: str) -> bool:
        """Whether q's last earmark may go to another pool.  Not while it is a node running for q (started from the
        reservoir) that q needed within the release hold and reads no need for this scrape: valued at the least
        positive value, one quiet scrape between two busy ones would give it to any pool asking that scrape, and the
        switch hold would keep it there through the surge that follows."""
        running = max(0, needs[q].replicas - needs[q].base)
        return not (need[q] <= 0 and marks[q] <= min(kept[q], running))

    # start from the earmarks still held, trimmed to the reservoir (it may have shrunk): what the last plan promised
    # changes only by a move below, with its margin and hold
    marks = dict.fromkeys(pools, 0)
    for p in pools:
        marks[p] = max(0, min(kept[p], reserve - sum(marks.values())))

    _fill(pools, marks, reserve, own, value)
    # then move a node where it is worth clearly more than where it is earmarked (one at a time, the largest gain),
    # never back from a pool that received one by a move within the switch hold: values that cross with every
    # scrape then move nodes one way until the hold runs out, not back and forth
    gained_at = dict(previous.gained_at) if previous is not None else {}
    for _ in range(reserve):
        move = _best_move(pools, marks, value, movable, gained_at, now, s)
        if move is None:
            break
        p, q = move
        marks[p] += 1
        marks[q] -= 1
        gained_at[p] = now
        rose_at[q] = -math.inf  # what it started is no longer its own: the plan has judged it worth more elsewhere
    # a move may have freed what was a pool's own: fill again, so that the plan is the one the next scrape would make
    # on the same signals (a free node is never left while a pool values it)
    _fill(pools, marks, reserve, own, value)
    free = reserve - sum(marks.values())
    floors = {p: needs[p].base + marks[p] for p in pools}
    ceilings = {p: floors[p] + free for p in pools}
    values = {p: round(value(p, marks[p] + 1), 4) for p in pools}
    reasons = {p: _reason(marks[p], reserve, need[p], cap[p]) for p in pools}
    replicas = {p: needs[p].replicas for p in pools}
    return ReservePlan(
        reserve, floors, ceilings, marks, needed_at, gained_at, values, reasons, throughput, replicas, rose_at
    )


def _fill(
    pools: list[str],
    marks: dict[str, int],
    reserve: int,
    own: Callable[[str], int],
    value: Callable[[str, int], float],
) -> None:
    """Earmark free nodes of the reservoir in `marks`, each to the pool whose next node is worth most (ties: the pool
    with fewer, then by name); a pool's `own` started nodes are free to it alone."""
    while sum(marks.values()) < reserve:
        room = reserve - sum(max(marks[p], own(p)) for p in pools)
        open_to = [p for p in pools if marks[p] < own(p) or room > 0]
        best = max(open_to, key=lambda p: (value(p, marks[p] + 1), -marks[p]), default=None)
        if best is None or value(best, marks[best] + 1) <= 0:
            break
        marks[best] += 1


def _best_move(
    pools: list[str],
    marks: Mapping[str, int],
    value: Callable[[str, int], float],
    movable: Callable[[str], bool],
    gained_at: Mapping[str, float],
    now: float,
    s: ReserveSettings,
) -> tuple[str, str] | None:
    """(to, from): the move of one earmarked node with the largest gain in value, where the receiving pool's next
    node is worth `switch_margin` more than the giving pool's last one, the giver's last one is `movable` and the
    giver did not receive one within `switch_hold_seconds`; None when no move is worth it."""
    gain = None
    for p in pools:
        vp = value(p, marks[p] + 1)
        for q in pools:
            if q == p or marks[q] == 0 or now - gained_at.get(q, -math.inf) < s.switch_hold_seconds or not movable(q):
                continue
            vq = value(q, marks[q])
            if vp > vq * (1.0 + s.switch_margin) and vp - vq > 1e-9 and (gain is None or vp - vq > gain[0]):
                gain = (vp - vq, p, q)
    return None if gain is None else (gain[1], gain[2])


def _reason(marks: int, reserve: int, need: float, cap: float) -> str:
    """Why a pool has the earmarks it has, in a plan's `reasons`."""
    if marks:
        return f"{marks} of {reserve} reserve nodes: needs {need:.1f} more node(s), one serves {cap:.1f} req/s"
    return f"nothing earmarked (needs {need:.1f} more node(s))"


def standing_plan(bases: Mapping[str, int], reserve: int) -> ReservePlan:
    """The plan before anything is known: the autoscaler's own (floors at the pools' nodes, the reservoir free)."""
    return ReservePlan(
        reserve,
        {p: int(b) for p, b in bases.items()},
        {p: int(b) + reserve for p, b in bases.items()},
        dict.fromkeys(bases, 0),
    )
