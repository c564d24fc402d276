"""The predictive policy: forecasts and the fleet's state in, decisions out.  Pure (no I/O, no clock: `now` is given).

Per pool, an `Outlook` says what is live now and what the forecast's upper band does over the horizon.  When the
upper band crosses `thresholds.kv_forecast_trigger` (0.75: seed 000's 预测值超过75%), the policy acts a lead time
ahead of the crossing, each lever as early as it needs:

- **pre-warm** (a cold start + a margin ahead): start replicas of the pool from its reservoir, as many as bring the
  forecast peak down to `policy.target_kv` per replica, at most `max_replicas_step` more per decision; a reservoir
  that cannot cover every pool's ask goes first where a node serves the most requests (`_share_spare`);
- **tighten** (`tighten_lead_seconds` ahead, one step per decision while the breach is still forecast): shorten the
  gateway waits of normal and low work (protecting the urgent quota) and — where a pool serves short and long
  prompts together — lower the accepted context a step at a time (seed 000: 24k -> 16k -> 8k), so short prompts
  are not stuck behind long ones; last, lower the memory admission threshold (it costs capacity); and once the
  pressed pools have no node left to start, lower the gateway's shared token bucket, which meters normal and low
  work only (urgent requests pass outside it), by `tightened_shared_rate_factor` (it costs the work that can wait:
  off by default, the operator's call);
- **shift weight** away from a pool forecast to breach towards a sibling pool serving the same prompts whose own
  forecast leaves headroom, never more than that headroom allows (the check seed 000's failover lacked);
- **relax** one step at a time, with hysteresis, once every forecast and live figure has stayed below the trigger
  minus `hysteresis` for `relax_hold_seconds`: admission back a step, weights back, pre-warmed replicas back one
  step; never a setting moved less than the fleet's dwell ago (`FleetConfig.dwell_seconds`, the autoscaler's
  scale-down window), so no setting goes one way, back and the first way again within it (a flap).

The policy never scales below what the fleet had when it started acting, and keeps what it has done in
`self.state` so that relaxing undoes its own actions and nothing else.  That state moves only when the loop says a
decision was applied (`note_applied`): a step the guardrails refuse, or the backend fails to apply, is proposed
again on the next tick instead of being skipped.  The guardrails (bounds, cooldowns, change
budget, freezes, verification) are not here: `guardrails.py` judges every decision this returns.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from infercast.actuators.actions import Action, ScalePool, SetAdmission, SetPoolWeight, SetRateLimit
from infercast.actuators.admin import Observation, PoolState
from infercast.actuators.steadiness import settings_of
from infercast.config import FleetConfig
from infercast.fairshare import share_by_value

LONG_CONTEXT_TOKENS = 8192  # the seeds' ">8k" class
#: `memory_limit` 1.0: a node admits until its memory is full, i.e. no memory admission limit (what None means)
NO_MEMORY_LIMIT = 1.0
SHARED_LANE = "shared"  # everyone's token bucket at the gateway (a stream's own quota lane has its name)


@dataclass(frozen=True)
class Outlook:
    """One pool: live figures now and the forecasts' upper bands over the horizon."""

    pool: str
    kv_now: float  # KV-cache usage now (the fullest instance when it is known: what breaks first)
    kv_upper_peak: float  # the highest upper band of the KV forecast over (now, now + horizon]
    kv_breach_eta_seconds: float = math.inf  # when that upper band first crosses the trigger (inf: not in horizon)
    rps_now: float = 0.0  # requests per second the pool takes now
    rps_upper_peak: float = 0.0  # the highest upper band of its traffic forecast over the horizon
    rps_surge_eta_seconds: float = math.inf  # when that upper band first reaches `traffic_surge_factor` x now
    # requests per second the pool answers now (the router's outcome ok; nan: not known, `rps_now` stands in).  What a
    # node is worth: a pool that refuses what it is sent (a prompt over its max_model_len) takes requests, serves none
    served_rps_now: float = math.nan
    # the signals that move first (`actuators/signals.py`): requests sent to the pool over the last scrape interval
    # and their level before it (nan: not read), the urgent share of them, the queue and how fast it grew, and why
    # a surge is judged to have started in that interval ("": none; the inputs then announce it at once)
    arrivals_rps: float = math.nan
    baseline_rps: float = math.nan
    urgent_share: float = 1.0
    waiting: float = 0.0
    waiting_growth_rps: float = 0.0
    onset: str = ""

    @property
    def served_rps(self) -> float:
        return self.rps_now if math.isnan(self.served_rps_now) else self.served_rps_now

    @property
    def breach_eta_seconds(self) -> float:
        """The sooner of the two warnings: KV usage crossing the trigger, or a traffic peak announced."""
        return min(self.kv_breach_eta_seconds, self.rps_surge_eta_seconds)

    @property
    def pressure_peak(self) -> float:
        """The KV usage the pool is heading for: the KV forecast's peak, or today's usage scaled by the traffic
        forecast's peak, whichever is higher."""
        surge = self.rps_upper_peak / self.rps_now if self.rps_now > 0 else 1.0
        return max(self.kv_upper_peak, self.kv_now * surge)


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str
    inputs: dict[str, Any] = field(default_factory=dict)
    # protect (pre-warm, tighten): undone only if it had no effect; shift and relax: undone if the pool got worse
    intent: str = "protect"


@dataclass
class PolicyState:
    level: int = 0  # admission tightening steps taken (0: as configured)
    levels: list[dict[str, Any]] = field(default_factory=list)  # the steps, fixed when tightening begins
    base_replicas: dict[str, int] = field(default_factory=dict)  # before the policy pre-warmed a pool
    base_weights: dict[str, float] = field(default_factory=dict)  # before the policy shifted a pool's weight
    base_admission: dict[str, Any] = field(default_factory=dict)  # before the first tightening
    base_shared_rps: float | None = None  # the shared bucket's rate before the policy lowered it (None: untouched)
    calm_since: float | None = None  # since when everything has been below the relax level


def requests_per_node(rps: float, nodes: int, kv: float) -> float:
    """What one more node of a pool would serve, in requests per second: the requests a node serves now (`rps`
    answered, not routed, over `nodes` serving) per unit of KV usage (`kv`, its fullest instance's).  A node of a
    short-context pool holds many short prompts; one of a long-context pool, a few long ones.  0 when the pool serves
    nothing yet (nothing to go on).  The policy's and the `scheduled` arm's split of a reservoir both rank pools by
    it."""
    if rps <= 0 or nodes <= 0:
        return 0.0
    return rps / nodes / max(kv, 0.05)


def _share_spare(asks: dict[str, int], pools: dict[str, PoolState], value: dict[str, float]) -> dict[str, int]:
    """Split each reservoir's spare nodes between the pools drawing on it.  When it covers every ask, each pool gets
    what it asks.  When it does not, the nodes go first to the pool where a node serves the most requests
    (`value`, from `requests_per_node`), whole asks in that order: urgent work is counted in requests served within
    their SLO, and a node given to short prompts serves several times the requests of one given to long prompts
    (the flash sale's hindsight bound puts every standby node on its short-context pool; max-min fair halves left
    most of that gain unserved, docs/control.md).  Pools of equal value (or nothing to go on) share max-min
    fairly, never in proportion to their asks: how large an unservable forecast is says nothing about where a node
    does most good."""
    grants: dict[str, int] = {}
    groups: dict[str, list[str]] = {}
    for name in sorted(asks):
        groups.setdefault(pools[name].reservoir or name, []).append(name)
    for names in groups.values():
        spare = min(pools[n].spare for n in names)
        give = share_by_value([asks[n] for n in names], spare, [round(value.get(n, 0.0), 6) for n in names])
        grants.update({n: int(g) for n, g in zip(names, give, strict=True)})
    return grants


def _shares(serving: list[PoolState], weights: dict[str, float], serves: tuple[bool, bool]) -> str:
    """The traffic the pools serving the same prompts take, as shares summing to 1 by version and, within each
    version, by pool, after `weights` (issue 38: a bare `weight=1.2935` for a fallback pool on another version said
    nothing of what it meant), e.g. "traffic shares after: v4 0.44 (v4-main 0.44), v3.5 0.56 (v3.5-fallback 0.56)"."""
    pools = [(p.name, p.version, weights.get(p.name, p.weight)) for p in serving if serves_lengths(p) == serves]
    total = sum(w for _, _, w in pools)
    if total <= 0:
        return "no traffic shares (every weight 0)"
    by_version: dict[str, list[tuple[str, float]]] = {}
    for name, version, w in pools:
        by_version.setdefault(version, []).append((name, w / total))
    parts = []
    for version, shares in sorted(by_version.items(), key=lambda kv: -sum(s for _, s in kv[1])):
        inside = ", ".join(f"{n} {s:.2f}" for n, s in shares)
        parts.append(f"{version} {sum(s for _, s in shares):.2f} ({inside})")
    return "traffic shares after: " + ", ".join(parts)


def serves_lengths(p: PoolState) -> tuple[bool, bool]:
    """(takes prompts up to 8k, takes longer ones)."""
    return p.min_context_tokens <= LONG_CONTEXT_TOKENS, (
        p.max_context_tokens is None or p.max_context_tokens > LONG_CONTEXT_TOKENS
    )


class PredictivePolicy:
    name = "predictive"

    def __init__(self, cfg: FleetConfig) -> None:
        self.cfg = cfg
        self.p = cfg.policy
        self.trigger = cfg.thresholds.kv_forecast_trigger
        self.cold_start = cfg.router.cold_start_seconds
        self.state = PolicyState()
        self.floor: dict[str, int] = {}
        self._decided_at = 0.0  # the last tick's `now`: what `note_applied` hears about was decided then
        self.held: dict[str, float] = {}  # setting (actuators/steadiness.py) -> until when a rollback holds it
        # setting -> when it last moved away from where the policy found it: by a decision of the policy's, or by a
        # rollback of one of its relaxes.  It is not relaxed before `dwell` has passed since (`_settled`)
        self.tightened_at: dict[str, float] = {}
        self.dwell = cfg.dwell_seconds

    def _settled(self, now: float, *settings: str) -> bool:
        """Every one of `settings` has stood a dwell since it was last tightened.  Relaxed sooner, a setting
        tightened again would flap (tighten, relax, tighten within the dwell): what the `scheduled` arm did to the
        memory limit on both sales, relaxed as the sale ebbed and tightened again inside 300 s, 1-5 times a run."""
        return all(now - self.tightened_at.get(s, -math.inf) >= self.dwell for s in settings)

    def _held(self, now: float, *settings: str) -> bool:
        return any(self.held.get(s, -math.inf) > now for s in settings)

    # --- the tick -------------------------------------------------------------------------------------------
    def decide(self, now: float, fleet: Observation, outlook: dict[str, Outlook]) -> list[Decision]:
        self._decided_at = now
        serving = [p for p in fleet.pools if not p.standby and p.name in outlook]
        pressed = {p.name for p in serving if outlook[p.name].breach_eta_seconds <= self._prewarm_lead()}
        out: list[Decision] = []
        out += self._prewarm(fleet, serving, outlook)
        out += self._tighten(fleet, serving, outlook)
        out += self._shift(serving, outlook, pressed)
        if not out:
            out += self._relax(now, fleet, serving, outlook)
        else:
            self.state.calm_since = None
        return out

    def floors(self) -> dict[str, int]:
        """Replica counts the policy has asked for: an autoscaler on current metrics must not scale below them
        (AIBrix's `max(reactive, predicted)`)."""
        return dict(self.floor)

    def note_applied(self, d: Decision, result_previous) -> None:
        """What was applied (the loop says so), and only that, moves the policy's state: the admission level a
        tightening or relaxing step brings it to; the replicas and weights to go back to, from before its first
        pre-warm or shift of a pool; a scale-up it asked for becomes a floor, a scale back lowers it; a relaxing
        step starts the next hold.  (Set in `decide`, a step the guardrails refused was skipped: the next tick
        proposed the step after it, and the refused one never happened.)"""
        a, st = d.action, self.state
        if d.intent == "relax":
            st.calm_since = self._decided_at  # the next step waits another hold
        else:
            self.tightened_at.update(dict.fromkeys(settings_of(a), self._decided_at))
        if isinstance(a, SetAdmission) and "level" in d.inputs:
            st.level = int(d.inputs["level"])
        elif isinstance(a, SetRateLimit) and a.lane == SHARED_LANE:
            if d.intent == "protect" and "rps" in d.inputs:
                st.base_shared_rps = float(d.inputs["rps"])
            elif d.intent == "relax":
                st.base_shared_rps = None
        elif isinstance(a, SetPoolWeight):
            if d.intent == "shift" and "weight" in d.inputs:
                st.base_weights.setdefault(a.pool, float(d.inputs["weight"]))
            elif d.intent == "relax":
                st.base_weights.pop(a.pool, None)
        elif isinstance(a, ScalePool):
            if d.intent == "protect":
                if "replicas" in d.inputs:
                    st.base_replicas.setdefault(a.pool, int(d.inputs["replicas"]))
                self.floor[a.pool] = a.replicas
            elif d.intent == "relax" and a.replicas > st.base_replicas.get(a.pool, a.replicas):
                self.floor[a.pool] = a.replicas
            else:  # back to where the policy found the pool: no longer its doing
                st.base_replicas.pop(a.pool, None)
                self.floor.pop(a.pool, None)

    def note_rolled_back(self, d: Decision, restored: Action | None = None, now: float | None = None) -> None:
        """A decision was undone after verification (`restored`: the undo applied): wait a full hold before relaxing
        again.  A shift undone back to the weight the policy found is no longer its doing: nothing to relax (a relax
        would re-apply the weight already there, a change spent on nothing)."""
        self.state.calm_since = None
        now = self._decided_at if now is None else now
        # the lever stays where the rollback left it for the relax hold, and a change rolled back is not made again
        # within the dwell of when it was first made: retried at once, a shift undone because its sibling got worse
        # went out, back and out again inside a minute (a flap)
        for setting in settings_of(d.action):
            until = now + self.p.relax_hold_seconds
            if d.intent != "relax":  # strictly after: the ledger counts a third move at exactly the dwell a flap
                until = max(until, self.tightened_at.get(setting, -math.inf) + self.dwell + 1e-6)
            self.held[setting] = max(self.held.get(setting, -math.inf), until)
        if d.intent == "relax" and restored is not None:  # the rollback tightened the setting again
            self.tightened_at.update(dict.fromkeys(settings_of(restored), now))
        if isinstance(d.action, ScalePool) and d.intent == "protect":
            self.floor.pop(d.action.pool, None)
        if d.intent == "relax" and restored is not None:
            self._relax_undone(d, restored)
        if isinstance(restored, SetRateLimit) and d.intent == "protect" and restored.rps == self.state.base_shared_rps:
            self.state.base_shared_rps = None  # back where the policy found it: nothing to relax
        if isinstance(restored, SetPoolWeight) and d.intent == "shift":
            base = self.state.base_weights.get(restored.pool)
            if base is not None and math.isclose(base, restored.weight, rel_tol=1e-9, abs_tol=1e-9):
                del self.state.base_weights[restored.pool]

    def _relax_undone(self, d: Decision, restored: Action) -> None:
        """A relaxing step rolled back puts the policy's own change back on the fleet: the policy owns it again
        (the base to go back to, the floor, the admission level), so it relaxes it once calm; without this, a
        weight relaxed to its base and then rolled back would stay shifted for good
        (`test_a_relax_rolled_back_is_relaxed_again`)."""
        a, st = d.action, self.state
        if isinstance(a, SetPoolWeight) and isinstance(restored, SetPoolWeight):
            st.base_weights.setdefault(a.pool, a.weight)  # a weight relaxes to its base in one step
        elif isinstance(a, ScalePool) and isinstance(restored, ScalePool):
            if restored.replicas > a.replicas:
                st.base_replicas.setdefault(a.pool, a.replicas)
                self.floor[a.pool] = restored.replicas
        elif isinstance(a, SetAdmission) and "level" in d.inputs:
            st.level = max(st.level, int(d.inputs["level"]) + 1)  # back at the tighter level it relaxed from
        elif isinstance(a, SetRateLimit) and isinstance(restored, SetRateLimit) and a.rps is not None:
            st.base_shared_rps = a.rps  # the bucket is lowered again: relaxed once calm

    def _prewarm_lead(self) -> float:
        return self.cold_start + self.p.prewarm_margin_seconds

    # --- levers ---------------------------------------------------------------------------------------------
    def _prewarm(self, fleet: Observation, serving: list[PoolState], outlook: dict[str, Outlook]) -> list[Decision]:
        asks: dict[str, int] = {}
        for p in serving:
            o = outlook[p.name]
            if o.breach_eta_seconds > self._prewarm_lead() or p.spare <= 0:
                continue
            if self._held(self._decided_at, f"replicas:{p.name}"):
                continue
            want = math.ceil(max(p.replicas, 1) * o.pressure_peak / self.p.target_kv - 1e-9)
            asks[p.name] = max(0, want - p.replicas)
        # shared by what a node serves, then at most a bounded step each
        value = {
            p.name: requests_per_node(outlook[p.name].served_rps, p.ready, outlook[p.name].kv_now)
            for p in serving
            if p.name in asks
        }
        grants = _share_spare(asks, {p.name: p for p in serving}, value)
        out = []
        for p in serving:
            o = outlook.get(p.name)
            target = p.replicas + min(grants.get(p.name, 0), self.p.max_replicas_step)
            if target <= p.replicas:
                continue
            out.append(
                Decision(
                    ScalePool(p.name, target),
                    f"{self._warning(o)}, within a cold start ({self.cold_start:.0f} s) and a margin: "
                    f"{p.replicas} -> {target} replicas for {self.p.target_kv:.2f} KV per replica",
                    self._inputs(o, replicas=p.replicas, spare=p.spare),
                )
            )
        return out

    def _tighten(self, fleet: Observation, serving: list[PoolState], outlook: dict[str, Outlook]) -> list[Decision]:
        close = [p for p in serving if outlook[p.name].breach_eta_seconds <= self.p.tighten_lead_seconds]
        if not close:
            return []
        kv_driven = any(outlook[p.name].kv_breach_eta_seconds <= self.p.tighten_lead_seconds for p in close)
        if self.state.level == 0:
            a = fleet.admission
            self.state.base_admission = {
                "memory_limit": a.memory_limit,
                "max_context_tokens": a.max_context_tokens,
                "normal_queue_seconds": a.normal_queue_seconds,
                "low_queue_seconds": a.low_queue_seconds,
            }
            self.state.levels = self._levels(fleet, mixed=any(all(serves_lengths(p)) for p in close), memory=kv_driven)
        elif (
            kv_driven
            and all(p.spare <= 0 for p in close)
            and not any("memory_limit" in step for step in self.state.levels)
        ):
            # the ladder was built on a traffic peak; KV usage is now forecast to cross too and no node is left to
            # start for it: the memory step (which costs capacity) joins the end.  Nodes left come first: taken
            # with nodes to spare, the limit halved goodput on the ServeGen morning jump (docs/control.md)
            self.state.levels = [*self.state.levels, *self._memory_level(fleet)]
        worst = min(close, key=lambda p: outlook[p.name].breach_eta_seconds)
        o = outlook[worst.name]
        why = f"pool {worst.name}: {self._warning(o)} (within {self.p.tighten_lead_seconds:.0f} s)"
        # like the memory step, the shared bucket costs capacity (the work that can wait is turned away): it comes
        # once the pressed pools have no node left to start, never while nodes can still take the load
        rate = self._lower_shared_rate(fleet, why, o) if all(p.spare <= 0 for p in close) else []
        if self.state.level >= len(self.state.levels):
            return rate
        step = self.state.levels[self.state.level]
        if self._held(self._decided_at, *(f"admission:{k}" for k in step)):
            return rate
        level = self.state.level + 1  # where the policy is once this step is applied (`note_applied`)
        adm = Decision(SetAdmission(**step), f"{why}: tighten admission, step {level}", self._inputs(o, level=level))
        return [adm, *rate]

    def _lower_shared_rate(self, fleet: Observation, why: str, o: Outlook) -> list[Decision]:
        """The gateway's shared token bucket lowered by `policy.tightened_shared_rate_factor`, once: it meters
        normal and low work only (urgent requests pass outside it, seed 004's tiers), so a lower rate turns away
        more of the work that can wait, at once and with a 429 its client retries, before it takes the nodes' KV
        from urgent work.  Nothing where the fleet has no shared bucket (or its backend does not say), where the
        policy already lowered it, or where a rollback holds it.  It goes back with the first step's settings.

        Nothing either where a stream has a quota lane of its own (seed 000's 专用配额通道): the shared bucket then
        holds the other tenants' work, and lowering it would turn them away for a surge that comes in its own lane.
        Off by default (factor 1): it trades the work that can wait for urgent goodput (what it did on the bench and
        on seed 004's bed: docs/control.md, "The shared bucket")."""
        rps = fleet.rate_limits.get(SHARED_LANE)
        factor = self.p.tightened_shared_rate_factor
        if not rps or factor >= 1.0 or self.state.base_shared_rps is not None:
            return []
        if set(fleet.rate_limits) - {SHARED_LANE}:
            return []
        if self._held(self._decided_at, f"rate:{SHARED_LANE}"):
            return []
        lowered = round(rps * factor, 3)
        return [
            Decision(
                SetRateLimit(SHARED_LANE, lowered),
                f"{why}: the shared bucket (normal and low work) {rps:g} -> {lowered:g} req/s",
                self._inputs(o, rps=rps),
            )
        ]

    def _levels(self, fleet: Observation, mixed: bool, memory: bool) -> list[dict[str, Any]]:
        """The tightening steps, mildest first: the gateway waits of normal and low work (and, where a pool serves
        short and long prompts together, the accepted context one step), then each further context step, then —
        only when it is KV usage that is forecast to cross, not a traffic peak — the memory admission threshold,
        which costs capacity, so it comes last."""
        p = self.p
        first: dict[str, Any] = {
            "normal_queue_seconds": p.tightened_normal_queue_seconds,
            "low_queue_seconds": p.tightened_low_queue_seconds,
        }
        current = fleet.admission.max_context_tokens or self.cfg.thresholds.context_reject_tokens
        contexts = [c for c in p.context_steps if c < current] if mixed else []
        if contexts:
            first["max_context_tokens"] = contexts[0]
        levels = [first] + [{"max_context_tokens": c} for c in contexts[1:]]
        return levels + (self._memory_level(fleet) if memory else [])

    def _memory_level(self, fleet: Observation) -> list[dict[str, Any]]:
        """The memory admission step, where it tightens what the fleet has now (none where it does not)."""
        limit = fleet.admission.memory_limit
        if limit is None or self.p.tightened_memory_limit < limit:
            return [{"memory_limit": self.p.tightened_memory_limit}]
        return []

    def _shift(self, serving: list[PoolState], outlook: dict[str, Outlook], pressed: set[str]) -> list[Decision]:
        out = []
        for name in sorted(pressed):
            p = next(x for x in serving if x.name == name)
            siblings = [
                q
                for q in serving
                if q.name not in pressed and serves_lengths(q) == serves_lengths(p) and q.weight > 0
                and outlook[q.name].pressure_peak < self.trigger - self.p.hysteresis
            ]  # fmt: skip
            siblings = [q for q in siblings if not self._held(self._decided_at, f"weight:{q.name}")]
            siblings = [q for q in siblings if not self._reverses_early(q.name, q.weight, +1)]
            if not siblings or p.weight <= 0 or self._held(self._decided_at, f"weight:{p.name}"):
                continue
            if self._reverses_early(p.name, p.weight, -1):
                continue
            q = min(siblings, key=lambda x: outlook[x.name].pressure_peak)
            oq = outlook[q.name]
            # move no more load onto q than its forecast headroom takes: weight in proportion to that headroom
            headroom = (self.trigger - oq.pressure_peak) / max(oq.pressure_peak, 0.05)
            moved = min(p.weight * self.p.max_weight_shift, q.weight * headroom)
            if moved <= 0.01 * p.weight:
                continue
            # each carries the weight before it: what relaxing goes back to, once it is applied
            lower, raise_ = round(p.weight - moved, 4), round(q.weight + moved, 4)
            why = (
                f"pool {p.name}: {self._warning(outlook[name])}; {q.name} has headroom (heading for "
                f"{oq.pressure_peak:.2f}); moving {moved:.4g} of weight, at most {self.p.max_weight_shift:.0%} of "
                f"{p.name}'s (policy.max_weight_shift) and no more than {q.name}'s forecast headroom to "
                f"{self.trigger:.2f} takes; {_shares(serving, {p.name: lower, q.name: raise_}, serves_lengths(p))}"
            )
            out.append(
                Decision(SetPoolWeight(p.name, lower), why, self._inputs(outlook[name], weight=p.weight), "shift")
            )
            out.append(Decision(SetPoolWeight(q.name, raise_), why, self._inputs(oq, weight=q.weight), "shift"))
        return out

    def _reverses_early(self, pool: str, weight: float, way: int) -> bool:
        """Moving `pool`'s weight `way` (+1 up, -1 down) would take back, within the dwell, a shift of the policy's
        own (toward the base it recorded): the pressures flipped, and a rollback of that shift would make a flap
        (up, down, up inside 300 s: what the steadiness property found on a fallback pool)."""
        base = self.state.base_weights.get(pool)
        toward_base = base is not None and way * (base - weight) > 0
        return toward_base and not self._settled(self._decided_at, f"weight:{pool}")

    def _relax(
        self, now: float, fleet: Observation, serving: list[PoolState], outlook: dict[str, Outlook]
    ) -> list[Decision]:
        st = self.state
        if not (st.level or st.base_replicas or st.base_weights or st.base_shared_rps is not None):
            return []
        level = self.trigger - self.p.hysteresis
        # calm: no forecast or live figure near the trigger, no peak announced, and no breach warned of, which a
        # firing alert about the pool is (the loop sets its breach to now): before, a firing alert with calm forecasts
        # counted as calm, and the loop relaxed and tightened the same settings in turn while it fired (issue 36)
        calm = all(
            max(outlook[p.name].pressure_peak, outlook[p.name].kv_now) < level
            and math.isinf(outlook[p.name].rps_surge_eta_seconds)
            and math.isinf(outlook[p.name].kv_breach_eta_seconds)
            for p in serving
        )
        if not calm:
            st.calm_since = None
            return []
        if st.calm_since is None:
            st.calm_since = now
        if now - st.calm_since < self.p.relax_hold_seconds:
            return []
        # the state (level, bases, the hold) moves when a step is applied (`note_applied`); a refused one is
        # proposed again next tick
        why = f"every forecast and live KV figure below {level:.2f} for {self.p.relax_hold_seconds:.0f} s"
        if st.level:
            back = self._levels_back(fleet, st.level - 1)
            if not back:  # nothing was set before tightening began: nothing to put back, no action to wait for
                st.level -= 1
                st.calm_since = now
                return []
            if not self._settled(now, *(f"admission:{k}" for k in st.levels[st.level - 1])):
                return []  # the step being undone is younger than the dwell: it waits (the hold goes on)
            out = [Decision(SetAdmission(**back), f"{why}: admission back a step", {"level": st.level - 1}, "relax")]
            # the first step's shared bucket goes back with it (it came with it); else on its own below
            return out + (self._shared_rate_back(now, why) if st.level == 1 else [])
        if st.base_shared_rps is not None:
            return self._shared_rate_back(now, why)
        if st.base_weights:
            return [
                Decision(SetPoolWeight(name, w), f"{why}: weight back", {}, "relax")
                for name, w in sorted(st.base_weights.items())
                if self._settled(now, f"weight:{name}")
            ]
        for name, base in sorted(st.base_replicas.items()):
            p = fleet.pool(name)
            if p.replicas <= base:  # already back (something else scaled it down): nothing of ours to undo
                del st.base_replicas[name]
                continue
            if not self._settled(now, f"replicas:{name}"):
                continue  # this pool's pre-warm is younger than the dwell; another pool's may go back now
            target = max(base, p.replicas - self.p.max_replicas_step)
            return [
                Decision(ScalePool(name, target), f"{why}: pre-warmed replicas back a step", {"base": base}, "relax")
            ]
        return []

    def _shared_rate_back(self, now: float, why: str) -> list[Decision]:
        base = self.state.base_shared_rps
        if base is None or not self._settled(now, f"rate:{SHARED_LANE}"):
            return []
        return [
            Decision(SetRateLimit(SHARED_LANE, base), f"{why}: the shared bucket back to {base:g} req/s", {}, "relax")
        ]

    def unset_admission(self, key: str) -> Any:
        """The value that puts back an admission setting the fleet had not set (None) before tightening began: no
        memory limit is a limit of 1.0 (admit until memory is full); no context limit, the fleet file's
        `thresholds.context_reject_tokens` (what the tightening steps start from); no gateway waits, the fleet
        file's `protections.tiers`.  A None base is put back as one of these, never dropped: a dropped one would leave a
        tightened `memory_limit: 0.75` (and, on a router document that names no admission, every tightened field)
        in place for good."""
        tiers = self.cfg.protections.tiers
        return {
            "memory_limit": NO_MEMORY_LIMIT,
            "max_context_tokens": self.cfg.thresholds.context_reject_tokens,
            "normal_queue_seconds": tiers.normal_queue_seconds,
            "low_queue_seconds": tiers.low_queue_seconds,
        }[key]

    def _levels_back(self, fleet: Observation, level: int) -> dict[str, Any]:
        """The admission at a looser `level`: that level's values, or (0) the ones before tightening (a setting that
        was not set then: `unset_admission`)."""
        base = {k: self.unset_admission(k) if v is None else v for k, v in self.state.base_admission.items()}
        if level == 0:
            return base
        merged = dict(base)
        for step in self.state.levels[:level]:
            merged.update(step)
        return merged

    def _warning(self, o: Outlook) -> str:
        if o.kv_breach_eta_seconds <= o.rps_surge_eta_seconds:
            if o.kv_now >= self.trigger:  # never "crosses 0.80 in 3 s" of a pool already over it (issue 38)
                return (
                    f"KV usage {o.kv_now:.2f} is over {self.trigger:.2f} now (forecast upper band peaks at "
                    f"{o.kv_upper_peak:.2f})"
                )
            if o.kv_breach_eta_seconds <= 0 and o.kv_upper_peak < self.trigger:  # a firing alert, not the forecast
                return (
                    f"a breach is warned of now (a firing alert about the pool; KV {o.kv_now:.2f}, forecast upper "
                    f"band {o.kv_upper_peak:.2f})"
                )
            return (
                f"KV forecast upper band {o.kv_upper_peak:.2f} crosses {self.trigger:.2f} in "
                f"{o.kv_breach_eta_seconds:.0f} s"
            )
        due = "due now" if o.rps_surge_eta_seconds <= 0 else f"due in {o.rps_surge_eta_seconds:.0f} s"
        return f"traffic forecast peaks at {o.rps_upper_peak:.1f} req/s against {o.rps_now:.1f} now (the surge {due})"

    @staticmethod
    def _inputs(o: Outlook, **extra: Any) -> dict[str, Any]:
        def eta(x: float) -> float | None:
            return None if math.isinf(x) else round(x, 1)

        return {
            "pool": o.pool,
            "kv_now": round(o.kv_now, 4),
            "kv_upper_peak": round(o.kv_upper_peak, 4),
            "kv_breach_eta_seconds": eta(o.kv_breach_eta_seconds),
            "rps_now": round(o.rps_now, 3),
            "rps_upper_peak": round(o.rps_upper_peak, 3),
            "rps_surge_eta_seconds": eta(o.rps_surge_eta_seconds),
            **extra,
        }
