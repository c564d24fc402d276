"""Every lever a plan can hold, moved one step at a time: the descent that ends hindsight's and causal's searches,
and the single-lever check published with each plan (issue 42 item 3).

A plan (`plans.Plan`) holds, from its change point: replica floors per autoscaled pool, admission (the memory
limit as a continuous value, the gateway waits of normal and low work), and `settings`: each autoscaled pool's
routing weight and breaker threshold, the autoscaler's ceiling per pool (held at its floor or not), each quota
lane's rate (the gateway's shared bucket included), a cold-standby (fallback) pool pre-warmed; and when
it lets them go.  `neighbours` moves each of those one step either way (`STEPS`); `descend` runs them all, moves
to the best that beats the plan by more than the tie margin (`plans.beats`), and repeats until none does: that
last pass is the check (`Check`).  When the passes run out first, the plan is the best found, not a bound.

- `causal`: the best plan whose change point is at or after the surge's onset (the first tick after it, when a
  controller can have seen it, `onset_tick`), each split of the reservoir tried as floors and as exact counts
  (floors and ceilings: once the surge is on, the HPA asks for every pool and splits the reservoir in proportion):
  what a controller that sees the surge the moment it starts, and decides perfectly, gets.  The gap reads
  reactive -> causal (decision quality) and causal -> hindsight (foresight).
- `guarded`: the same searches with the fleet's protections never loosened past the fleet file (`guard_limits`):
  the memory admission limit at most the memory breaker, each quota lane's rate at most its own, each pool's
  breaker threshold at most the configured one.  The control loop only ever tightens those (and puts them back);
  a plan that loosens them wins by overriding the operator's guard against OOM and overload, a call an autonomous
  actuator does not make.  So the guarded plans bound what the controller can reach, and the gap from them to the
  unguarded ones is what loosening the guards would add (the operator's decision, not the loop's).
- `quick`: the search `bench/control.py --quick` runs: the whole reservoir's splits from the future's first change
  point with the policy's tightened admission, the best of them from the onset tick too; no check (a best found).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from infercast.config import FleetConfig
from infercast.simulator.control.plans import (
    Plan,
    _base_nodes,
    _challenge,
    _change_times,
    _floors,
    _prunes,
    admission_levels,
    beats,
    better,
    search_hindsight,
    splits,
    with_admission,
    with_release,
)
from infercast.simulator.twin.layout import protected_layout
from infercast.simulator.twin.run import RunResult

#: one step of each lever, either way
CHANGE_POINT_STEP_SECONDS = 15.0  # the arm's tick
RELEASE_STEP_SECONDS = 30.0
MEMORY_LIMIT_STEP = 0.05
MEMORY_LIMIT_RANGE = (0.5, 0.95)
#: gateway waits (seconds) on a ladder: one step is the next rung
NORMAL_QUEUE_LADDER = (0.0, 0.5, 1.0, 2.5, 5.0, 10.0)
LOW_QUEUE_LADDER = (0.0, 1.0, 5.0, 15.0, 30.0, 60.0)
WEIGHT_LADDER = (0.25, 0.5, 0.75, 1.0, 1.5, 2.0)
BREAKER_FACTOR = 2.0  # a breaker threshold halved or doubled
LANE_FACTOR = 1.25  # a quota lane's rate divided or multiplied by this


@dataclass(frozen=True)
class Check:
    """The single-lever check of one plan: every neighbour run; those that beat it by more than the tie margin."""

    passed: bool
    neighbours: int
    beaten_by: tuple[str, ...] = ()
    passes: int = 0

    def to_dict(self) -> dict:
        return {
            "passed": self.passed,
            "neighbours": self.neighbours,
            "beaten_by": list(self.beaten_by),
            "passes": self.passes,
        }

    @property
    def label(self) -> str:
        """What the plan may be called: a bound only when no single-lever move beats it."""
        return "bound" if self.passed else "best found"


def _rung(ladder: tuple[float, ...], value: float, step: int) -> float | None:
    """The ladder's rung `step` away from `value` (the nearest rung when `value` is off the ladder)."""
    i = min(range(len(ladder)), key=lambda k: abs(ladder[k] - value))
    if abs(ladder[i] - value) > 1e-9:  # off the ladder: one step is to the rung on that side
        below = [x for x in ladder if x < value]
        above = [x for x in ladder if x > value]
        side = above if step > 0 else below
        return (side[0] if step > 0 else side[-1]) if side else None
    j = i + step
    return ladder[j] if 0 <= j < len(ladder) else None


def defaults(cfg: FleetConfig) -> dict[tuple[str, str], float]:
    """What each lever is before a plan moves it, on the protected layout every plan arm runs."""
    laid = protected_layout(cfg)
    th, pr = cfg.thresholds, cfg.protections
    out: dict[tuple[str, str], float] = {
        ("admission", "memory_limit"): th.memory_breaker,
        ("admission", "normal_queue_seconds"): pr.tiers.normal_queue_seconds,
        ("admission", "low_queue_seconds"): pr.tiers.low_queue_seconds,
    }
    a = pr.autoscaler
    spare = laid.pools[a.reservoir].nodes if a is not None and a.reservoir in laid.pools else 0
    for pool in a.pools if a is not None else ():
        out[("ceiling", pool)] = float(laid.pools[pool].nodes + spare)  # the HPA's own maximum
        out[("weight", pool)] = float(laid.pools[pool].weight)
        out[("breaker", pool)] = th.timeout_base_seconds
    if pr.rate_limit is not None:  # everyone's token bucket at the gateway is lane `shared`
        out[("lane", "shared")] = float(pr.rate_limit.rps)
    for lane, b in pr.quota_lanes.items():
        out[("lane", lane)] = float(b.rps)
    for pool in pr.cold_standby:
        if pool in laid.pools:
            out[("prewarm", pool)] = 0.0
    return out


def _with_setting(plan: Plan, lever: str, target: str, value: float | None) -> Plan:
    rest = tuple(x for x in plan.settings if (x[0], x[1]) != (lever, target))
    new = rest if value is None else tuple(sorted((*rest, (lever, target, float(value)))))
    return _hold(replace(plan, settings=new))


def _with_admission(plan: Plan, key: str, value: float | None) -> Plan:
    rest = tuple(x for x in plan.admission if x[0] != key)
    new = rest if value is None else tuple(sorted((*rest, (key, float(value)))))
    return _hold(replace(plan, admission=new))


def _release(plan: Plan) -> float | None:
    """When the plan lets its floors go (a last step with no floors), if it does."""
    if len(plan.steps) >= 2 and not plan.steps[-1][1]:
        return plan.steps[-1][0]
    return None


def _hold(plan: Plan) -> Plan:
    """Admission and settings are held until the plan's release, when it has one."""
    held = plan.admission or plan.settings
    end = _release(plan)
    if held and end is not None and plan.admission_until is None:
        return replace(plan, admission_until=end)
    if not held:
        return replace(plan, admission_until=None)
    return plan


def guard_limits(cfg: FleetConfig) -> dict[tuple[str, str], float]:
    """The most each guard may be set to by a guarded plan: the fleet file's own value (`defaults`) for the memory
    admission limit, every quota lane's rate and every pool's breaker threshold; weights, ceilings, floors, the
    gateway waits and pre-warming are not guards."""
    return _guards(defaults(cfg))


def _guards(now: dict[tuple[str, str], float]) -> dict[tuple[str, str], float]:
    return {k: v for k, v in now.items() if k == ("admission", "memory_limit") or k[0] in ("lane", "breaker")}


def neighbours(
    cfg: FleetConfig, plan: Plan, duration: float, earliest: float = 0.0, guarded: bool = False
) -> list[tuple[str, Plan]]:
    """(label, plan) for every lever of `plan` moved one step either way (`STEPS` above); the change point never
    before `earliest` (causal's onset tick) nor before 0; with `guarded`, no guard above its `guard_limits`."""
    out: list[tuple[str, Plan]] = []
    base, spare = _base_nodes(cfg)
    now = defaults(cfg)
    limits = _guards(now) if guarded else {}
    # the change point and the floors
    if plan.steps:
        at, floors = plan.steps[0]
        for d in (-CHANGE_POINT_STEP_SECONDS, CHANGE_POINT_STEP_SECONDS):
            t = at + d
            end = _release(plan)
            if t < max(0.0, earliest) - 1e-9 or (end is not None and t >= end) or t >= duration:
                continue
            steps = ((t, floors), *plan.steps[1:])
            out.append((f"change point {d:+.0f} s", replace(plan, steps=steps)))
    if plan.steps and base:
        at, floors = plan.steps[0]
        have = dict(floors)
        for pool in sorted(base):
            for d in (-1, 1):
                n = have.get(pool, base[pool]) + d
                extra = sum(max(0, have.get(p, base[p]) - base[p]) for p in base) + d
                if n < base[pool] or extra > spare or extra < 0:
                    continue
                new = tuple(sorted({**have, pool: n}.items()))
                out.append((f"{pool} floor {d:+d}", replace(plan, steps=((at, new), *plan.steps[1:]))))
    # admission: the memory limit (continuous, in steps), the gateway waits (ladders)
    adm = dict(plan.admission)
    mem = adm.get("memory_limit", now[("admission", "memory_limit")])
    top = min(MEMORY_LIMIT_RANGE[1], limits.get(("admission", "memory_limit"), math.inf))
    for d in (-MEMORY_LIMIT_STEP, MEMORY_LIMIT_STEP):
        v = round(mem + d, 4)
        if MEMORY_LIMIT_RANGE[0] - 1e-9 <= v <= top + 1e-9:
            out.append((f"memory_limit {v:g}", _with_admission(plan, "memory_limit", v)))
    for key, ladder in (("normal_queue_seconds", NORMAL_QUEUE_LADDER), ("low_queue_seconds", LOW_QUEUE_LADDER)):
        cur = adm.get(key, now[("admission", key)])
        for d in (-1, 1):
            v = _rung(ladder, cur, d)
            if v is not None:
                out.append((f"{key} {v:g}", _with_admission(plan, key, v)))
    # the other levers
    held = {(lever, target): value for lever, target, value in plan.settings}
    for (lever, target), default in sorted(now.items()):
        if lever == "admission":
            continue
        cur = held.get((lever, target), default)
        if lever == "prewarm":
            out.append((f"{target} pre-warmed" if not cur else f"{target} not pre-warmed",
                        _with_setting(plan, lever, target, None if cur else 1.0)))  # fmt: skip
            continue
        if lever == "ceiling":  # on: the pool held at its floor (the HPA gives it no more); off: the HPA's own max
            if (lever, target) in held:
                out.append((f"no ceiling on {target}", _with_setting(plan, lever, target, None)))
            elif plan.steps:
                floor = dict(plan.steps[0][1]).get(target, base.get(target, 0))
                if floor < default:
                    out.append((f"ceiling {target} {floor}", _with_setting(plan, lever, target, floor)))
            continue
        if lever == "weight":
            moves = [_rung(WEIGHT_LADDER, cur, -1), _rung(WEIGHT_LADDER, cur, 1)]
        elif lever == "breaker":
            moves = [cur / BREAKER_FACTOR, cur * BREAKER_FACTOR]
        else:  # a quota lane's rate
            moves = [round(cur / LANE_FACTOR, 3), round(cur * LANE_FACTOR, 3)]
        for v in moves:
            if v is None or not math.isfinite(v) or v <= 0 or v > limits.get((lever, target), math.inf) + 1e-9:
                continue
            value = None if abs(v - default) < 1e-9 else v  # back at its default: not held at all
            out.append((f"{lever} {target} {v:g}", _with_setting(plan, lever, target, value)))
    # the release
    end = _release(plan)
    if end is not None:
        for d in (-RELEASE_STEP_SECONDS, RELEASE_STEP_SECONDS):
            t = end + d
            if t <= plan.steps[0][0] or t >= duration:
                continue
            steps = (*plan.steps[:-1], (t, ()))
            moved = replace(
                plan,
                steps=steps,
                admission_until=t if plan.admission_until is not None else None,
                scale_down_at=t if plan.scale_down_at is not None else None,
            )
            out.append((f"release {d:+.0f} s", moved))
    seen: set[Plan] = {plan}
    unique = []
    for label, p in out:
        if p not in seen:
            seen.add(p)
            unique.append((label, p))
    return unique


def descend(
    cfg: FleetConfig,
    run: Callable[..., RunResult | None],
    plan: Plan,
    res: RunResult,
    tried: list[dict],
    duration: float,
    *,
    earliest: float = 0.0,
    max_passes: int = 3,
    guarded: bool = False,
) -> tuple[Plan, RunResult, list[dict], Check]:
    """Every single-lever neighbour of the plan run; the best that beats it (`plans.beats`) taken, and again, up to
    `max_passes` passes.  The last pass, when nothing beat the plan, is its check (passed); when the passes run
    out while a neighbour still beat it, the plan is the best found (the check did not pass).  `guarded`: only the
    moves that keep every guard within the fleet file's (`guard_limits`)."""
    beaten: tuple[str, ...] = ()
    n = 0
    if earliest > 0 and not plan.steps:  # no plan yet: whatever it holds starts at the onset, never before
        plan = Plan(((earliest, ()),))
    for k in range(1, max_passes + 1):
        cands = neighbours(cfg, plan, duration, earliest, guarded)
        n = len(cands)
        if not cands:
            return plan, res, tried, Check(True, 0, (), k)
        labels = {c.describe(): label for label, c in cands}
        prunes = _prunes(run)
        plan2, res2, tried2 = search_hindsight(
            run, [c for _, c in cands], res.summary if prunes else None, checked=res.summary if prunes else None
        )
        for t in tried2:
            t["neighbour"] = labels.get(t["plan"], "")
        tried = tried + tried2
        winners = [
            (c, t) for (_, c), t in zip(cands, tried2, strict=True) if not t.get("pruned") and beats(t, res.summary)
        ]
        beaten = tuple(t["neighbour"] for _, t in winners)
        if not beaten:
            return plan, res, tried, Check(True, n, (), k)
        if res2 is not None and plan2 in {c for c, _ in winners}:
            plan, res = plan2, res2
        else:  # the best neighbour overall does not beat the plan (ties are not transitive): the best that does
            top = winners[0]
            for c, t in winners[1:]:
                if better(t, top[1]):
                    top = (c, t)
            again = run(top[0])  # a run already made (`forks.Forks` keeps it)
            assert again is not None
            plan, res = top[0], again
    return plan, res, tried, Check(False, n, beaten, max_passes)


def onset(traffic, trace=None) -> float | None:
    """When the surge starts: the scenario's (its first climbing phase), or the first surge laid on a trace; None
    without one."""
    if trace is not None:
        surges = getattr(trace, "surges", ())
        return min((x.start_s for x in surges), default=None)
    start = getattr(traffic, "surge_start", None)
    return start() if callable(start) else None


def onset_tick(at: float, tick_seconds: float = CHANGE_POINT_STEP_SECONDS) -> float:
    """The first tick of the arms after `at`, the first at which a controller can have seen the surge: a surge at
    600 s is first acted on at 615 s (at 600 s none of it has arrived), one at 601 s at 615 s too."""
    return (math.floor(at / tick_seconds + 1e-9) + 1) * tick_seconds


def causal_search(
    cfg: FleetConfig, run: Callable[..., RunResult | None], traffic, duration: float, at: float, reactive: RunResult
) -> tuple[Plan, RunResult, list[dict]]:
    """The best plan whose change point is at or after `at` (the onset tick): every split of the whole reservoir
    from `at`, then with the policy's tightened admission, then let go when the surge is over (`plans.with_release`),
    from `reactive` (the empty plan, already run)."""
    base, spare = _base_nodes(cfg)
    plan, res, tried = Plan(), reactive, [_row(Plan(), reactive)]
    if base and spare > 0:
        # each split as floors (the HPA may still split the reservoir in proportion to every pool's ask, as it does
        # once the surge is on) and as exact counts (floors and ceilings: the controller owns the reserve)
        cands = []
        for s in splits(sorted(base), spare, whole=True):
            floors = _floors(base, s)
            cands.append(Plan(((at, floors),)))
            cands.append(Plan(((at, floors),), settings=tuple(("ceiling", p, float(n)) for p, n in floors)))
        plan, res, tried = _challenge(run, plan, res, tried, cands)
    if not plan.steps:  # no floors won: admission alone, from the onset
        cands = [Plan(((at, ()),), level) for level in admission_levels(cfg)]
        plan, res, tried = _challenge(run, plan, res, tried, cands)
        return plan, res, tried
    plan, res, tried = with_admission(cfg, run, plan, res, tried)
    return with_release(run, plan, res, tried, traffic, duration)


def quick_search(
    cfg: FleetConfig, run: Callable[..., RunResult | None], traffic, duration: float, at: float | None
) -> tuple[Plan, RunResult, list[dict]]:
    """`--quick`'s search: no plan; every split of the whole reservoir from the future's first change point (the
    onset tick when the future gives none), with the policy's tightened admission; then the best split from the
    onset tick too.  About seven runs, most of them forked late; a best found, never checked."""
    base, spare = _base_nodes(cfg)
    marks = sorted(_change_times(cfg, duration, traffic))
    first = marks[0] if marks else at
    plan, res, tried = search_hindsight(run, [Plan()])
    if not base or spare <= 0 or first is None:
        assert plan is not None and res is not None
        return plan, res, tried
    level = admission_levels(cfg)[-1]
    cands = [Plan(((first, _floors(base, s)),), level) for s in splits(sorted(base), spare, True)]
    plan, res, tried = _challenge(run, plan, res, tried, cands)
    if at is not None and plan.steps and at != first:
        plan, res, tried = _challenge_at(run, plan, res, tried, at)
    assert plan is not None and res is not None
    return plan, res, tried


def _challenge_at(run, plan: Plan, res: RunResult, tried: list[dict], at: float):
    moved = replace(plan, steps=((at, plan.steps[0][1]), *plan.steps[1:]))
    return _challenge(run, plan, res, tried, [moved])


def _row(plan: Plan, res: RunResult) -> dict:
    s = res.summary
    return {"plan": plan.describe(), **{k: s.get(k) for k in ("urgent_goodput_rps", "goodput_rps", "gpu_seconds")}}


__all__ = [
    "Check",
    "causal_search",
    "defaults",
    "descend",
    "guard_limits",
    "neighbours",
    "onset",
    "onset_tick",
    "quick_search",
]
