"""Guardrails around every decision: pure judgements with `now` handed in.

- **freeze** when the inputs cannot be trusted — stale, NaN, infinite or negative figures, the forecaster down, the
  fleet unreadable: nothing is decided, and the reason is reported (`infercast_actuator_active` drops to 0 and the
  `InfercastActuatorFrozen` alert pages);
- **bounds**: a replica count within the pool's reach (its replicas plus its reservoir's spare, never below one),
  at most `max_replicas_step` replicas more or fewer per decision, weights within [0, 10 x the largest weight at
  start];
- **cooldown**: one change per action kind and target in `cooldown_seconds` (a rollback is never held back);
- **change budget**: at most `change_budget_per_hour` applied changes in any rolling hour, rollbacks included.

Both count what the loop applied (`record_applied`) and what it learnt was applied later (`note_applied`): an
action whose answer was lost and that a later tick settled as `applied`, one applied before a restart, or one the
previous leader applied before a failover (recorded in this replica's trail from the state kept beside the lease,
actuators/failover.py); the control loop reads them from the audit trail each tick.

A refused decision is not lost: it is returned with its reason, audited and counted (`outcome="refused"`).
"""

from __future__ import annotations

import bisect
import math
from collections import deque
from dataclasses import dataclass, field

from infercast.actuators.actions import Action, ScalePool, SetPoolWeight
from infercast.actuators.admin import Observation
from infercast.actuators.policy import Decision
from infercast.config import GuardrailConfig


@dataclass(frozen=True)
class Judged:
    decision: Decision
    allowed: bool
    reason: str = ""  # why it was refused


@dataclass(frozen=True)
class Freeze:
    reason: str
    code: str = "other"  # one of infercast.catalog.FREEZE_REASONS


def input_freeze(now: float, figures: dict[str, float], ages: dict[str, float], cfg: GuardrailConfig) -> Freeze | None:
    """A freeze if any figure is NaN, infinite or negative, or any input is older than its limit."""
    for name, v in sorted(figures.items()):
        if v is None or not math.isfinite(v):
            return Freeze(f"input {name} is {v!r}", "bad_value")
        if v < 0:
            return Freeze(f"input {name} is negative ({v:g})", "bad_value")
    for name, age in sorted(ages.items()):
        forecast = name.startswith("forecast")
        limit = cfg.forecast_stale_after_seconds if forecast else cfg.stale_after_seconds
        if not math.isfinite(age) or age > limit:
            code = "forecaster_down" if forecast else "stale_inputs"
            return Freeze(f"input {name} is stale ({age:.0f} s old, limit {limit:.0f} s)", code)
    return None


@dataclass
class Guardrails:
    cfg: GuardrailConfig
    last_change: dict[tuple[str, str], float] = field(default_factory=dict)  # (kind, target) -> when applied
    applied_at: deque[float] = field(default_factory=deque)  # times of applied changes, for the budget
    max_weight: float | None = None

    def budget_used(self, now: float) -> int:
        while self.applied_at and self.applied_at[0] <= now - 3600.0:
            self.applied_at.popleft()
        return len(self.applied_at)

    def judge(self, now: float, decisions: list[Decision], fleet: Observation, rollback: bool = False) -> list[Judged]:
        if self.max_weight is None:
            self.max_weight = 10.0 * max([p.weight for p in fleet.pools] + [1.0])
        out = []
        planned = 0
        taken: dict[str, int] = {}  # spare already promised this tick, per reservoir
        for d in decisions:
            why = self._refusal(now, d.action, fleet, rollback, planned, taken)
            if why is None:
                planned += 1
                a = d.action
                if isinstance(a, ScalePool):
                    p = fleet.pool(a.pool)
                    key = p.reservoir or p.name
                    taken[key] = taken.get(key, 0) + max(0, a.replicas - p.replicas)
            out.append(Judged(d, why is None, why or ""))
        return out

    def _refusal(
        self, now: float, a: Action, fleet: Observation, rollback: bool, planned: int, taken: dict[str, int]
    ) -> str | None:
        c = self.cfg
        if self.budget_used(now) + planned >= c.change_budget_per_hour:
            return f"change budget spent ({c.change_budget_per_hour} changes in the last hour)"
        if not rollback:
            last = self.last_change.get((a.kind, a.target))
            if last is not None and now - last < c.cooldown_seconds:
                return (
                    f"cooldown: {a.kind} on {a.target} changed {now - last:.0f} s ago (wait {c.cooldown_seconds:.0f} s)"
                )
        if isinstance(a, ScalePool):
            try:
                p = fleet.pool(a.pool)
            except KeyError as e:
                return str(e.args[0])
            spare = p.spare - taken.get(p.reservoir or p.name, 0)
            if a.replicas > p.replicas + spare:
                return f"{a.pool}: {a.replicas} replicas is beyond its reach ({p.replicas} + {spare} spare)"
            if a.replicas < 1:
                return f"{a.pool}: never below one replica"
            if abs(a.replicas - p.replicas) > c.max_replicas_step:
                return f"{a.pool}: {p.replicas} -> {a.replicas} is more than {c.max_replicas_step} replicas at once"
        if isinstance(a, SetPoolWeight) and a.weight > (self.max_weight or math.inf):
            return f"{a.pool}: weight {a.weight:g} above the bound {self.max_weight:g}"
        return None

    def record_applied(self, now: float, a: Action) -> None:
        self.last_change[(a.kind, a.target)] = now
        self.applied_at.append(now)

    def note_applied(self, at: float, a: Action) -> None:
        """An application learnt of after the fact, at `at` (when it was sent; possibly before changes already
        counted): it holds the cooldown from then and spends the budget in that hour."""
        key = (a.kind, a.target)
        if at > self.last_change.get(key, -math.inf):
            self.last_change[key] = at
        bisect.insort(self.applied_at, at)
