"""The actuator's vocabulary: one frozen, typed value per thing it can change on a fleet.  Pure.

Every action is validated when it is made (a bad value raises `ActionError` at once, never half-way through an
apply), and `parse_action` builds one from a plain mapping (`{"kind": "set_pool_weight", "pool": "v4", "weight":
0.5}`, as the HTTP, Redis and file backends and the audit trail carry them): an unknown kind or field is an error,
never a silent `setattr`.  `to_dict` is its inverse.

- `scale_pool`: set a pool's replica count; new replicas pay the cold start (HPA, Dynamo's planner).
- `prewarm_pool`: start a cold-standby pool and route to it once it is up (seed 004's 提前 5 分钟预热模型).
- `set_pool_weight`: a pool's routing weight, its share of the traffic its context range allows (Envoy, GIE).
- `set_breaker_threshold`: the latency above which a pool's breaker counts a request as bad (seed 000's dynamic
  timeout).
- `set_admission`: the memory admission threshold, the longest accepted prompt, how long normal and low-priority
  requests may wait at the gateway (seed 000's 80% and 24k, seed 004's tiers).
- `set_rate_limit`: a quota lane's token bucket (seed 004's 基础限流).
- `set_pool_bounds`: a pool's autoscaler floor and ceiling (an HPA's `minReplicas` / `maxReplicas`, a KEDA
  ScaledObject's `minReplicaCount` / `maxReplicaCount`): the controller's reserve plan (`actuators/reserve.py`),
  which the autoscaler's own scaling then keeps within.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, ClassVar


class ActionError(ValueError):
    """An action that cannot be made: the message names the field and what is wrong with it."""


def _finite(name: str, v: Any, lo: float | None = None, hi: float | None = None, *, lo_open: bool = False) -> None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise ActionError(f"{name}: expected a number, got {v!r}")
    if not math.isfinite(v):
        raise ActionError(f"{name}: must be finite, got {v!r}")
    if lo is not None and (v <= lo if lo_open else v < lo):
        raise ActionError(f"{name}: must be {'>' if lo_open else '>='} {lo}, got {v!r}")
    if hi is not None and v > hi:
        raise ActionError(f"{name}: must be <= {hi}, got {v!r}")


def _pool(v: Any) -> None:
    if not isinstance(v, str) or not v or len(v) > 128 or any(c.isspace() for c in v):
        raise ActionError(f"pool: expected a pool name, got {v!r}")


@dataclass(frozen=True)
class Action:
    """Base of every action; `kind` names it on the wire."""

    kind: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, **dataclasses.asdict(self)}

    def describe(self) -> str:
        """One line for logs and the audit table, e.g. `set_pool_weight pool=v4-long weight=0.5`."""
        fields = " ".join(f"{k}={v}" for k, v in dataclasses.asdict(self).items() if v is not None)
        return f"{self.kind} {fields}".strip()

    @property
    def target(self) -> str:
        """What the action changes, for cooldowns and budgets: the pool, or `fleet` for fleet-wide settings."""
        return getattr(self, "pool", None) or "fleet"


@dataclass(frozen=True)
class ScalePool(Action):
    kind: ClassVar[str] = "scale_pool"
    pool: str
    replicas: int

    def __post_init__(self) -> None:
        _pool(self.pool)
        if isinstance(self.replicas, bool) or not isinstance(self.replicas, int) or not 0 <= self.replicas <= 10_000:
            raise ActionError(f"replicas: expected an integer 0-10000, got {self.replicas!r}")


@dataclass(frozen=True)
class PrewarmPool(Action):
    kind: ClassVar[str] = "prewarm_pool"
    pool: str

    def __post_init__(self) -> None:
        _pool(self.pool)


@dataclass(frozen=True)
class SetPoolWeight(Action):
    kind: ClassVar[str] = "set_pool_weight"
    pool: str
    weight: float

    def __post_init__(self) -> None:
        _pool(self.pool)
        _finite("weight", self.weight, 0.0, 1_000.0)


@dataclass(frozen=True)
class SetBreakerThreshold(Action):
    kind: ClassVar[str] = "set_breaker_threshold"
    pool: str
    seconds: float

    def __post_init__(self) -> None:
        _pool(self.pool)
        _finite("seconds", self.seconds, 0.0, 600.0, lo_open=True)


@dataclass(frozen=True)
class SetAdmission(Action):
    """Fleet-wide admission limits; a field left None is not changed."""

    kind: ClassVar[str] = "set_admission"
    memory_limit: float | None = None  # a node admits a request only if it keeps GPU memory under this ratio
    max_context_tokens: int | None = None  # longer prompts are refused at the gateway (400)
    normal_queue_seconds: float | None = None  # how long normal requests may wait at the gateway
    low_queue_seconds: float | None = None  # ... and low-priority ones

    def __post_init__(self) -> None:
        if all(getattr(self, f.name) is None for f in dataclasses.fields(self)):
            raise ActionError("set_admission: give at least one of its fields")
        if self.memory_limit is not None:
            _finite("memory_limit", self.memory_limit, 0.0, 1.0, lo_open=True)
        if self.max_context_tokens is not None and (
            isinstance(self.max_context_tokens, bool)
            or not isinstance(self.max_context_tokens, int)
            or not 1 <= self.max_context_tokens <= 10_000_000
        ):
            raise ActionError(f"max_context_tokens: expected an integer >= 1, got {self.max_context_tokens!r}")
        for name in ("normal_queue_seconds", "low_queue_seconds"):
            v = getattr(self, name)
            if v is not None:
                _finite(name, v, 0.0, 3600.0)


#: the fleet-wide admission settings, `SetAdmission`'s fields in its order (a router document's `admission` keys)
ADMISSION_FIELDS = tuple(f.name for f in dataclasses.fields(SetAdmission))


@dataclass(frozen=True)
class SetRateLimit(Action):
    """A quota lane's token bucket (`lane` names a stream's lane, or `shared` for everyone's); rps None removes it."""

    kind: ClassVar[str] = "set_rate_limit"
    lane: str = "shared"
    rps: float | None = None
    burst: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.lane, str) or not self.lane:
            raise ActionError(f"lane: expected a lane name, got {self.lane!r}")
        if self.rps is not None:
            _finite("rps", self.rps, 0.0, 10_000_000.0, lo_open=True)
        if self.burst is not None:
            _finite("burst", self.burst, 0.0, 100_000_000.0, lo_open=True)

    @property
    def target(self) -> str:
        return f"lane:{self.lane}"


@dataclass(frozen=True)
class SetPoolBounds(Action):
    """A pool's autoscaler bounds: it never runs fewer than `floor` replicas nor more than `ceiling`."""

    kind: ClassVar[str] = "set_pool_bounds"
    pool: str
    floor: int
    ceiling: int

    def __post_init__(self) -> None:
        _pool(self.pool)
        for name in ("floor", "ceiling"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 10_000:
                raise ActionError(f"{name}: expected an integer 0-10000, got {v!r}")
        if self.ceiling < self.floor:
            raise ActionError(f"ceiling: must be >= floor ({self.floor}), got {self.ceiling}")


ACTIONS: dict[str, type[Action]] = {
    cls.kind: cls
    for cls in (ScalePool, PrewarmPool, SetPoolWeight, SetBreakerThreshold, SetAdmission, SetRateLimit, SetPoolBounds)
}


def parse_action(data: Any) -> Action:
    """An action from its mapping form; `ActionError` names an unknown kind, an unknown or missing field, or a bad
    value."""
    if not isinstance(data, dict):
        raise ActionError(f"an action is a mapping with a 'kind', got {type(data).__name__}")
    kind = data.get("kind")
    cls = ACTIONS.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ActionError(f"unknown action kind {kind!r}; known: {', '.join(sorted(ACTIONS))}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names - {"kind"})
    if unknown:
        raise ActionError(f"{kind}: unknown field(s) {unknown}; known: {sorted(names)}")
    missing = sorted(
        f.name
        for f in dataclasses.fields(cls)
        if f.name not in data and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    if missing:
        raise ActionError(f"{kind}: missing field(s) {missing}")
    return cls(**{k: v for k, v in data.items() if k != "kind"})
