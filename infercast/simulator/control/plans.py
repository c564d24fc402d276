"""The arm that follows a plan fixed before the run, not a forecast: `hindsight` (the best plan found knowing the
run's true future), on top of `reactive`.  (The `scheduled` arm, which once lived here as a plan built from the
calendar, is now the control loop told the calendar: `actuators/futures.py`.)

A `Plan` is a list of floors over time: from each change point on, the autoscaled pools keep at least so many
replicas (the HPA scales up to a floor at once and never below it: AIBrix's `max(reactive, predicted)`, the same
seam the predictive policy's floors use).  An empty plan is `reactive` itself, so every plan arm is `reactive`
plus what it knows ahead.

- `hindsight` (the best plan found knowing the run's true future; called a bound only where its single-lever check
  passed): every candidate plan is run on the same arrivals and
  the best is kept, by urgent goodput, then goodput, then the fewest GPU-seconds (`better`).  A `full` search
  (`candidate_plans`) tries every static plan (each split of the reservoir between the pools, held from the start;
  the empty split is `reactive`) and every plan with one change point (the whole reservoir split between the pools,
  from each time of a grid: every `grid_seconds`, plus, read from the run's true future traffic, a cold start and
  a margin before each time the offered rate first reaches 1.2x, 1.5x, 2x and 4x its base level), then the
  winner's change point moved as below.  A `fast` search
  (`staged_search`) tries the splits of the whole reservoir held from the start, then the best of them from each
  change point the future points to, and the winner's change point 30 s and 15 s earlier and 15 s later
  (`refine_change_point`): about a tenth of the runs.  Both end (`finish_search`) with the winner again with
  admission tightened from its change point at each level the predictive policy tightens to (`with_admission`),
  its change point moved again, then with its floors and admission let go when the true surge is over, the pools
  left to the HPA or scaled down at once, to what the HPA wants or to their base size (`with_release`).  Then
  (`levers.descend`, run by `driver.run_hindsight`) every lever the controller has is moved one step either way —
  the change point, each pool's floor, the memory limit (0.05 steps), the gateway waits, each quota lane's rate,
  each pool's weight and breaker threshold, the fallback pool pre-warmed, the release — the best move that beats
  the plan by more than the tie margin (`beats`) taken, until none does: that last pass is the plan's single-lever
  check.  A plan whose check did not pass (the passes ran out) is the best found, not a bound.  Before the check
  existed the published plans were only ever the best found: the seed 0 plan of the unannounced sale is beaten by
  the same plan with the memory limit at 0.70 (issue 42).  `causal` (`levers.causal_search`) is the best plan
  whose change point is at or after the surge's onset.  Candidates are forked from snapshots of one plan-less run
  (`forks.Forks`), not replayed from the start.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from infercast.actuators.actions import (
    Action,
    PrewarmPool,
    ScalePool,
    SetAdmission,
    SetBreakerThreshold,
    SetPoolWeight,
    SetRateLimit,
)
from infercast.actuators.admin import apply_with_retries
from infercast.config import FleetConfig
from infercast.simulator.control.arms import ReactiveArm
from infercast.simulator.twin.fleet import Fleet
from infercast.simulator.twin.layout import protected_layout
from infercast.simulator.twin.run import RunResult

Floors = tuple[tuple[str, int], ...]  # (pool, at least so many replicas), sorted by pool


@dataclass(frozen=True)
class Plan:
    """Floors of the autoscaled pools from each change point on (sorted by time; none before the first)."""

    steps: tuple[tuple[float, Floors], ...] = ()
    # admission tightened from the first change point (from the start when there is none): (setting, value), the
    # settings of `SetAdmission`, as the predictive policy tightens them (`admission_levels`)
    admission: tuple[tuple[str, float], ...] = ()
    # ... and put back as it was from this time on (None: held to the end)
    admission_until: float | None = None
    # at this time the autoscaled pools are scaled down at once (None: left to the HPA's stabilisation window, which
    # holds the surge's replicas for minutes after a floor is let go) ...
    scale_down_at: float | None = None
    # ... to what the HPA wants now ("hpa"), or to their own size before the surge ("base": the autoscaler's minimum;
    # the HPA scales back up from there where the queues still need it, as after the predictive policy's own
    # scale-back)
    scale_down_to: Literal["hpa", "base"] = "hpa"
    # the other levers, from the first change point (held as admission is, and put back with it at
    # `admission_until`): (lever, target, value) with lever one of `SETTING_LEVERS`: a pool's routing weight, a
    # pool's breaker threshold (seconds), a quota lane's rate (req/s), or a cold-standby pool pre-warmed (value 1)
    settings: tuple[tuple[str, str, float], ...] = ()

    @property
    def start(self) -> float:
        return self.steps[0][0] if self.steps else 0.0

    def floors_at(self, t: float) -> dict[str, int]:
        out: dict[str, int] = {}
        for at, floors in self.steps:
            if at <= t + 1e-9:
                out = dict(floors)
        return out

    def describe(self) -> str:
        parts = [
            f"from {at:.0f} s: " + (", ".join(f"{p} >= {n}" for p, n in floors) if floors else "no floors")
            for at, floors in self.steps
        ]
        if self.admission:
            until = f" until {self.admission_until:.0f} s" if self.admission_until is not None else ""
            parts.append(
                f"from {self.start:.0f} s{until} admission " + ", ".join(f"{k}={v:g}" for k, v in self.admission)
            )
        if self.settings:
            until = f" until {self.admission_until:.0f} s" if self.admission_until is not None else ""
            parts.append(
                f"from {self.start:.0f} s{until} "
                + ", ".join(
                    f"{SETTING_LEVERS[lever]} {target}" + ("" if lever == "prewarm" else f"={value:g}")
                    for lever, target, value in self.settings
                )
            )
        if self.scale_down_at is not None:
            to = "their base size" if self.scale_down_to == "base" else "what the HPA wants"
            parts.append(f"at {self.scale_down_at:.0f} s scaled down to {to}")
        return "; ".join(parts) or "no plan (reactive)"

    @classmethod
    def from_dict(cls, items: list[dict]) -> Plan:
        """The plan `to_dict` wrote (a bench's JSON, docs/results/control.json)."""
        steps = tuple(
            (float(x["from_seconds"]), tuple(sorted((str(p), int(n)) for p, n in x["floors"].items())))
            for x in items
            if "floors" in x
        )
        item = next((x for x in items if "admission" in x), {})
        until = item.get("until_seconds")
        down = next((x for x in items if "scale_down_seconds" in x), {})
        held = next((x for x in items if "settings" in x), {})
        if until is None:
            until = held.get("until_seconds")
        return cls(
            steps,
            tuple((str(k), float(v)) for k, v in item.get("admission", {}).items()),
            float(until) if until is not None else None,
            float(down["scale_down_seconds"]) if down else None,
            "base" if down.get("scale_down_to") == "base" else "hpa",
            tuple((str(x[0]), str(x[1]), float(x[2])) for x in held.get("settings", ())),
        )

    def to_dict(self) -> list[dict]:
        out: list[dict] = [{"from_seconds": at, "floors": dict(floors)} for at, floors in self.steps]
        if self.admission:
            item: dict = {"from_seconds": self.start, "admission": dict(self.admission)}
            if self.admission_until is not None:
                item["until_seconds"] = self.admission_until
            out.append(item)
        if self.settings:
            held: dict = {"from_seconds": self.start, "settings": [list(x) for x in self.settings]}
            if self.admission_until is not None:
                held["until_seconds"] = self.admission_until
            out.append(held)
        if self.scale_down_at is not None:
            out.append({"scale_down_seconds": self.scale_down_at, "scale_down_to": self.scale_down_to})
        return out


#: the levers a plan holds besides floors and admission (`Plan.settings`), as `describe` names them
SETTING_LEVERS = {
    # the most replicas the autoscaler may give a pool (a per-pool HPA/KEDA maxReplicas): with the floors, how a plan
    # keeps the reserve for the pool it chose when the HPA would split it in proportion to every pool's ask
    "ceiling": "ceiling of",
    "weight": "weight of",
    "breaker": "breaker threshold of",
    "lane": "quota lane",
    "prewarm": "pre-warmed",
}


def setting_actions(settings: Sequence[tuple[str, str, float]]) -> list[Action]:
    """The actions that set a plan's `settings`."""
    out: list[Action] = []
    for lever, target, value in settings:
        if lever == "ceiling":  # the autoscaler's own bound, not an action on the fleet (`PlanArm.tick`)
            continue
        if lever == "weight":
            out.append(SetPoolWeight(target, float(value)))
        elif lever == "breaker":
            out.append(SetBreakerThreshold(target, float(value)))
        elif lever == "lane":
            out.append(SetRateLimit(target, float(value)))
        elif lever == "prewarm":
            out.append(PrewarmPool(target))
        else:
            raise ValueError(f"unknown plan lever {lever!r}; known: {', '.join(SETTING_LEVERS)}")
    return out


class PlanArm(ReactiveArm):
    """`reactive` whose autoscaler keeps the plan's floors, and whose admission is the plan's from its start (until
    `admission_until`, when the settings it changed go back to what they were)."""

    def __init__(self, cfg: FleetConfig, name: str, plan: Plan | None = None) -> None:
        super().__init__(cfg)
        self.name = name
        self.plan = plan or Plan()
        self._admitted = False
        self._before: dict | None = None  # the admission settings the plan changed, as they were
        self._undo: list = []  # the actions that put the plan's other settings back
        self._ceilings: dict[str, int] = {}  # the autoscaler's ceilings the plan lowered, as they were
        self._scaled_down = False

    def floors(self) -> dict[str, int]:
        return self.plan.floors_at(self.admin.fleet.now) if self.admin is not None else {}

    def tick(self, fleet: Fleet) -> None:
        held = self.plan.admission or self.plan.settings
        if held and not self._admitted and fleet.now >= self.plan.start - 1e-9:
            if self.plan.admission:
                now = fleet.router.admission()
                self._before = {k: now[k] for k, _ in self.plan.admission if now.get(k) is not None}
                apply_with_retries(self.admin, SetAdmission(**dict(self.plan.admission)))
            for action in setting_actions(self.plan.settings):
                done = apply_with_retries(self.admin, action)
                if done.previous is not None:  # what puts it back (a pre-warm has none: the pool stays warm)
                    self._undo.append(done.previous)
            for lever, pool, value in self.plan.settings:
                if lever == "ceiling" and self.hpa is not None and pool in self.hpa.max_nodes:
                    self._ceilings.setdefault(pool, self.hpa.max_nodes[pool])
                    self.hpa.max_nodes[pool] = max(self.hpa.min_nodes[pool], int(value))
            self._admitted = True
        until = self.plan.admission_until
        if until is not None and fleet.now >= until - 1e-9:
            if self._before:
                apply_with_retries(self.admin, SetAdmission(**self._before))
                self._before = None
            while self._undo:
                apply_with_retries(self.admin, self._undo.pop())
            for pool, was in self._ceilings.items():
                self.hpa.max_nodes[pool] = was
            self._ceilings = {}
        down = self.plan.scale_down_at
        if down is not None and not self._scaled_down and fleet.now >= down - 1e-9 and self.hpa is not None:
            self._scaled_down = True
            live = fleet.live()
            for pool in self.hpa.a.pools:
                wants = self.hpa.desired(live[pool]) if self.plan.scale_down_to == "hpa" else 0
                target = max(self.hpa.min_nodes[pool], wants, self.plan.floors_at(fleet.now).get(pool, 0))
                if target < live[pool].replicas:
                    apply_with_retries(self.admin, ScalePool(pool, target))
        super().tick(fleet)


def _base_nodes(cfg: FleetConfig) -> tuple[dict[str, int], int]:
    """(the autoscaled pools' own nodes on the protected layout, the reservoir's spare nodes)."""
    laid = protected_layout(cfg)
    a = cfg.protections.autoscaler
    if a is None:
        return {}, 0
    return {p: laid.pools[p].nodes for p in a.pools}, laid.pools[a.reservoir].nodes


# --- hindsight ------------------------------------------------------------------------------------------------------
def splits(pools: Sequence[str], spare: int, whole: bool) -> Iterable[dict[str, int]]:
    """Every way of giving the pools some of `spare` nodes (`whole`: all of them)."""
    for counts in itertools.product(range(spare + 1), repeat=len(pools)):
        if (sum(counts) == spare) if whole else (sum(counts) <= spare):
            yield dict(zip(pools, counts, strict=True))


def _true_rate(traffic, duration: float) -> tuple[np.ndarray, np.ndarray, float] | None:
    """(times in 30 s steps, the true offered rate at each, its base level: the 20th percentile); None when the
    traffic gives no finite rate."""
    t = np.arange(0.0, duration, 30.0)
    rate = np.array([traffic.rate_at(float(x)) for x in t])
    if not len(rate) or not np.isfinite(rate).any():
        return None
    return t, rate, max(float(np.nanpercentile(rate, 20)), 1e-9)


def future_change_points(traffic, duration: float, lead: float) -> list[float]:
    """Times a cold start and a margin (`lead`) before the true offered rate first reaches 1.2x, 1.5x, 2x and 4x its
    base level (the 20th percentile of the run's rate, in 30 s steps: the median would sit inside a surge that lasts
    half the run): where a plan with foresight would bring capacity up."""
    sampled = _true_rate(traffic, duration)
    if sampled is None:
        return []
    t, rate, base = sampled
    out = set()
    for factor in (1.2, 1.5, 2.0, 4.0):
        over = np.flatnonzero(rate >= factor * base)
        if len(over):
            out.add(max(0.0, round(float(t[over[0]]) - lead, 1)))
    return sorted(out)


def future_end_points(traffic, duration: float) -> list[float]:
    """When the true offered rate is last at or over 1.2x its base level (`future_change_points`' base), a 30 s
    step later: where a plan with foresight would let the surge's capacity and admission go (none when the rate is
    up to the end, or never up)."""
    sampled = _true_rate(traffic, duration)
    if sampled is None:
        return []
    t, rate, base = sampled
    over = np.flatnonzero(rate >= 1.2 * base)
    if not len(over) or over[-1] >= len(t) - 1:
        return []
    return [float(t[over[-1] + 1])]


def candidate_plans(cfg: FleetConfig, duration: float, traffic=None, *, grid_seconds: float = 120.0) -> list[Plan]:
    """The plans `hindsight` tries in a `full` search (module docstring): every static split, and every split of the
    whole reservoir from one change point on a grid and at the times the true future traffic points to."""
    base, spare = _base_nodes(cfg)
    if not base or spare <= 0:
        return [Plan()]
    plans = [Plan()]
    plans += [Plan(((0.0, _floors(base, s)),)) for s in splits(sorted(base), spare, whole=False) if any(s.values())]
    times = _change_times(cfg, duration, traffic) | {float(x) for x in np.arange(grid_seconds, duration, grid_seconds)}
    for at in sorted(x for x in times if x > 0):
        plans += [Plan(((at, _floors(base, s)),)) for s in splits(sorted(base), spare, whole=True)]
    return plans


def _floors(base: dict[str, int], split: dict[str, int]) -> Floors:
    return tuple((p, base[p] + split[p]) for p in sorted(base))


def _change_times(cfg: FleetConfig, duration: float, traffic) -> set[float]:
    lead = cfg.router.cold_start_seconds + cfg.policy.prewarm_margin_seconds
    return set(future_change_points(traffic, duration, lead)) if traffic is not None else set()


def staged_search(cfg: FleetConfig, duration: float, traffic, run: Callable[[Plan], RunResult]):
    """The `fast` search, in two stages: every split of the whole reservoir held from the start (and no plan), then
    the best of those splits from each change point the true future points to.  About a tenth of the runs of
    `full`; it can miss a plan `full` finds (a partial split, a change point off the future's marks)."""
    base, spare = _base_nodes(cfg)
    if not base or spare <= 0:
        return search_hindsight(run, [Plan()])
    static = [Plan()] + [Plan(((0.0, _floors(base, s)),)) for s in splits(sorted(base), spare, whole=True)]
    plan, res, tried = search_hindsight(run, static)
    if not plan.steps:
        return plan, res, tried
    floors = plan.steps[0][1]
    later = [Plan(((at, floors),)) for at in sorted(_change_times(cfg, duration, traffic)) if at > 0]
    if not later:
        return plan, res, tried
    # stage one's winner is not run again: its result is known
    plan2, res2, tried2 = search_hindsight(run, later, res.summary if _prunes(run) else None)
    tried = tried + tried2
    if res2 is not None and better(res2.summary, res.summary):
        plan, res = plan2, res2
    return finish_search(cfg, run, plan, res, tried, traffic, duration)


def finish_search(
    cfg: FleetConfig,
    run: Callable[[Plan], RunResult],
    plan: Plan,
    res: RunResult,
    tried: list[dict],
    traffic,
    duration: float,
):
    """The stages both searches end with, on their winner: its change point moved (`refine_change_point`), admission
    tightened (`with_admission`), the change point moved again when admission was taken (the best moment to bring
    nodes up changes once admission holds the queues: on the flash sale's seed 1, 15 s earlier), then the release
    (`with_release`)."""
    plan, res, tried = refine_change_point(run, plan, res, tried)
    plan, res, tried = with_admission(cfg, run, plan, res, tried)
    if plan.admission:
        plan, res, tried = refine_change_point(run, plan, res, tried)
    return with_release(run, plan, res, tried, traffic, duration)


#: where a plan with a change point wins, the same floors this many seconds earlier and later are tried too: the
#: future's marks sit on a 30 s grid, and a forecast arm that asked 15 s before one had tied the bound there
REFINE_SECONDS = (-30.0, -15.0, 15.0)


def _challenge(run: Callable[[Plan], RunResult], plan: Plan, res: RunResult, tried: list[dict], cands: list[Plan]):
    """Run the candidates and keep the best of them if it beats the incumbent (`plan`, its run `res`, already
    run: not run again); every candidate's figures appended to `tried`."""
    plan2, res2, tried2 = search_hindsight(run, cands, res.summary if _prunes(run) else None)
    if res2 is not None and better(res2.summary, res.summary):
        return plan2, res2, tried + tried2
    return plan, res, tried + tried2


def _prunes(run) -> bool:
    """Whether `run` takes the incumbent to prune against (`forks.Forks.run`)."""
    return bool(getattr(run, "prunes", False))


def refine_change_point(run: Callable[[Plan], RunResult], plan: Plan, res: RunResult, tried: list[dict]):
    """The winner of one change point, moved by each of `REFINE_SECONDS` (never before the start); the better kept."""
    if len(plan.steps) != 1 or plan.steps[0][0] <= 0:  # no plan, a static one, or more than one change point
        return plan, res, tried
    ((at, floors),) = plan.steps
    near = [Plan(((max(0.0, at + d), floors),), plan.admission) for d in REFINE_SECONDS if at + d > 0]
    if not near:
        return plan, res, tried
    return _challenge(run, plan, res, tried, near)


def admission_levels(cfg: FleetConfig) -> list[tuple[tuple[str, float], ...]]:
    """The admission the predictive policy tightens to, step by step (`policy.PredictivePolicy._levels` on the
    protected layout, whose pools are split by context, so no context step): the gateway waits of normal and low
    work, then the memory admission threshold too."""
    p = cfg.policy
    waits = (
        ("low_queue_seconds", p.tightened_low_queue_seconds),
        ("normal_queue_seconds", p.tightened_normal_queue_seconds),
    )
    return [waits, (("memory_limit", p.tightened_memory_limit), *waits)]


def with_admission(cfg: FleetConfig, run: Callable[[Plan], RunResult], plan: Plan, res: RunResult, tried: list[dict]):
    """The last stage of either search: the winning plan again with admission tightened from its change point at
    each of the policy's levels (`admission_levels`), the better kept.  The predictive policy tightens admission as
    well as pre-warming; a bound that could not would not bound it."""
    cands = [Plan(plan.steps, level) for level in admission_levels(cfg)]
    return _challenge(run, plan, res, tried, cands)


#: after the surge's end mark (`future_end_points`), the floors and the tightened admission are let go this many
#: seconds later: at once, or after one or two minutes' margin (the last requests of the surge still in the queues)
RELEASE_AFTER_SECONDS = (0.0, 60.0, 120.0)


def with_release(run: Callable[[Plan], RunResult], plan: Plan, res: RunResult, tried: list[dict], traffic, duration):
    """After admission: the winning plan with its floors and admission let go when the true surge is over, with
    the pools left to the HPA's stabilisation window, or scaled down at once (`scale_down_at`) to what the HPA wants
    or to their base size, the better kept.  Holding them costs GPU-seconds and the low tier's queueing after the
    surge: the `perfect-forecast` arm, which lets go and scales back to the base itself when its forecast falls,
    had beaten plans that held (flash sale, seed 1), then plans that only let go, then plans that scaled down to
    what the HPA wants (by GPU-seconds at tied goodput: at the surge's end the HPA still wants most of its nodes
    for the backlog)."""
    if not plan.steps or traffic is None:
        return plan, res, tried
    ends = [e + d for e in future_end_points(traffic, duration) for d in RELEASE_AFTER_SECONDS]
    downs: tuple[Literal["hpa", "base"] | None, ...] = (None, "hpa", "base")
    cands = [
        Plan(
            (*plan.steps, (end, ())),
            plan.admission,
            end if plan.admission else None,
            end if down else None,
            down or "hpa",
        )
        for end in ends
        for down in downs
        if plan.steps[-1][0] < end < duration
    ]
    if not cands:
        return plan, res, tried
    return _challenge(run, plan, res, tried, cands)


#: Goodput differences within this share (or one 0.01 req/s step of the summaries' rounding) are ties for
#: hindsight: noise of the arrivals' draw, not a better plan, so the plan that holds fewer GPU-seconds wins them.
TIE_SHARE = 0.002
TIE_RPS = 0.01


def _differ(a: float, b: float) -> bool:
    return abs(a - b) > max(TIE_RPS + 1e-9, TIE_SHARE * max(abs(a), abs(b)))


def better(a: dict, b: dict) -> bool:
    """Whether run summary `a` beats `b` for hindsight: more urgent goodput, then more goodput, then fewer
    GPU-seconds (goodputs within `TIE_SHARE` of each other tie)."""
    for key in ("urgent_goodput_rps", "goodput_rps"):
        x, y = float(a.get(key) or 0.0), float(b.get(key) or 0.0)
        if _differ(x, y):
            return x > y
    return float(a.get("gpu_seconds") or 0.0) < float(b.get("gpu_seconds") or 0.0)


def beats(a: dict, b: dict) -> bool:
    """Whether run summary `a` beats `b` by more than the tie margin: more urgent goodput, or as much and more
    goodput, or both tied and fewer GPU-seconds by more than `TIE_SHARE` (the single-lever check's test,
    `levers.descend`)."""
    for key in ("urgent_goodput_rps", "goodput_rps"):
        x, y = float(a.get(key) or 0.0), float(b.get(key) or 0.0)
        if _differ(x, y):
            return x > y
    x, y = float(a.get("gpu_seconds") or 0.0), float(b.get("gpu_seconds") or 0.0)
    return y - x > TIE_SHARE * max(abs(x), abs(y))


def could_win(urgent_bound: float, incumbent: dict) -> bool:
    """Whether a run whose urgent goodput can reach at most `urgent_bound` could still beat or tie `incumbent`
    (`better`'s first key): False lets a search stop it (`forks.Forks.run`)."""
    inc = float(incumbent.get("urgent_goodput_rps") or 0.0)
    return not (urgent_bound < inc and _differ(urgent_bound, inc))


def _figures(plan: Plan, s: dict) -> dict:
    return {"plan": plan.describe(), **{k: s.get(k) for k in ("urgent_goodput_rps", "goodput_rps", "gpu_seconds")}}


def search_hindsight(
    run: Callable[..., RunResult | None],
    plans: Sequence[Plan],
    incumbent: dict | None = None,
    *,
    checked: dict | None = None,
) -> tuple[Plan | None, RunResult | None, list[dict]]:
    """Run every plan (`run(plan)`: the twin on the same arrivals) and keep the best (`better`); (plan, its run,
    every candidate's figures).  A `run` that prunes (`forks.Forks`) is called `run(plan, to_beat)` with the best
    so far (or `incumbent`, a summary to beat, before the first) and may stop a candidate that cannot beat it and
    return None; such a candidate is listed as pruned, and (None, None, tried) comes back when every one was.
    `checked`: the summary of a plan whose single-lever check this is (`levers.descend`): a candidate is then
    stopped only when it can beat neither the best so far nor that plan (`better` has a tie margin, so a candidate
    that cannot beat the best neighbour so far may still beat the plan under check, and must be seen to)."""
    best: tuple[Plan, RunResult] | None = None
    tried = []
    for plan in plans:
        to_beat = best[1].summary if best is not None else incumbent
        if checked is not None and to_beat is not None and to_beat is not checked:
            to_beat = [to_beat, checked]
        res = run(plan, to_beat) if _prunes(run) else run(plan)
        if res is None:
            tried.append({"plan": plan.describe(), "pruned": True})
            continue
        s = res.summary
        tried.append(_figures(plan, s))
        if best is None or better(s, best[1].summary):
            best = (plan, res)
    if best is None:
        if incumbent is not None:
            return None, None, tried
        raise ValueError("hindsight: no plan to search")
    return best[0], best[1], tried


__all__ = [
    "SETTING_LEVERS",
    "Plan",
    "PlanArm",
    "admission_levels",
    "beats",
    "better",
    "candidate_plans",
    "could_win",
    "finish_search",
    "future_change_points",
    "future_end_points",
    "refine_change_point",
    "search_hindsight",
    "setting_actions",
    "splits",
    "staged_search",
    "with_admission",
    "with_release",
]
