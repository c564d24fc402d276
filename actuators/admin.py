"""The fleet as the actuator sees it: `FleetAdmin.observe()` and `FleetAdmin.apply(action)`.

A backend is anything that can report a fleet's control-plane state (pools, replicas, weights, breaker thresholds,
admission limits) and change it one action at a time: the in-process twin, a router's HTTP admin API, Redis, a
hot-reloaded file, Kubernetes.  The controller never knows which: it is handed an `Observation` and returns
actions; `apply_with_retries` carries each one out with retries, and the answer (`Result`) says what happened and
how to undo it.

Live metrics (KV usage, queues) do not come from here but from the metric store, as the rest of infercast reads
them; a backend reports only what the fleet is *set* to.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from infercast.actuators.actions import Action

if TYPE_CHECKING:
    from infercast.config import FleetConfig, PoolConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PoolState:
    name: str
    version: str
    replicas: int  # serving or starting (what a Deployment's replica count says)
    ready: int  # serving now
    weight: float
    breaker_threshold_seconds: float | None = None
    standby: bool = False  # switched off (cold standby): not routed to until pre-warmed
    min_context_tokens: int = 0
    max_context_tokens: int | None = None
    spare: int = 0  # more replicas the pool's reservoir (or cluster) can start now
    reservoir: str | None = None  # pools naming the same reservoir share its spare


def fleet_pool_state(name: str, pc: PoolConfig, **observed: Any) -> PoolState:
    """Pool `name` as the fleet file declares it (`pc`): its nodes all serving (none on standby), its weight; what a
    backend reads from the system it drives (a route's weight, a proxy's timeout) in `observed`."""
    replicas = 0 if pc.standby else pc.nodes
    state: dict[str, Any] = {
        "name": name,
        "version": pc.version,
        "replicas": replicas,
        "ready": replicas,
        "weight": pc.weight,
        "standby": pc.standby,
        "min_context_tokens": pc.min_context_tokens,
        "max_context_tokens": pc.max_context_tokens,
    }
    return PoolState(**(state | observed))


def in_fleet_order(states: Iterable[PoolState], fleet: FleetConfig) -> Observation:
    """An observation, now, of `states` in the order the fleet file lists the pools."""
    order = list(fleet.pools)
    return Observation(time.time(), tuple(sorted(states, key=lambda p: order.index(p.name))))


@dataclass(frozen=True)
class Admission:
    memory_limit: float | None = None
    max_context_tokens: int | None = None
    normal_queue_seconds: float | None = None
    low_queue_seconds: float | None = None


@dataclass(frozen=True)
class Observation:
    """The fleet's control-plane state at `at` (the backend's clock: simulated time for the twin)."""

    at: float
    pools: tuple[PoolState, ...]
    admission: Admission = Admission()
    rate_limits: dict[str, float | None] = field(default_factory=dict)  # lane -> rps (None: no bucket)

    def pool(self, name: str) -> PoolState:
        for p in self.pools:
            if p.name == name:
                return p
        raise KeyError(f"unknown pool {name!r} (have {[p.name for p in self.pools]})")


Status = Literal["applied", "failed", "refused"]


@dataclass(frozen=True)
class Result:
    """What a backend did with an action: `applied`; `refused` (the fleet said no: an unknown pool, a value out of
    its range; retrying cannot help); or `failed` (it could not be reached or broke; retried, then given up).
    `previous` is the action that puts back what was there before, for rollback."""

    status: Status
    detail: str = ""
    previous: Action | None = None
    attempts: int = 1


class BackendError(Exception):
    """A transient failure (connection refused, timeout, HTTP 5xx, Redis down): worth retrying."""


class ActionRefused(Exception):
    """The fleet refuses the action (unknown pool, value out of range): not worth retrying."""


class FleetAdmin(Protocol):
    name: str

    def observe(self) -> Observation:
        """The fleet's current settings; raises BackendError if it cannot be read."""
        ...

    def apply(self, action: Action) -> Result:
        """Carry out one action (once: retries are `apply_with_retries`'s business); raises BackendError on a
        transient failure and ActionRefused when the fleet says no."""
        ...


def apply_with_retries(
    admin: FleetAdmin,
    action: Action,
    attempts: int = 3,
    backoff_seconds: float = 0.2,
    sleep: Callable[[float], None] = time.sleep,
) -> Result:
    """Apply with retries and exponential backoff on transient failures; never raises for a backend's sake."""
    delay = backoff_seconds
    last = ""
    for attempt in range(1, attempts + 1):
        try:
            res = admin.apply(action)
            return Result(res.status, res.detail, res.previous, attempt)
        except ActionRefused as e:
            return Result("refused", str(e), None, attempt)
        except BackendError as e:
            last = str(e) or type(e).__name__
            log.warning("%s: %s failed (attempt %d/%d): %s", admin.name, action.describe(), attempt, attempts, last)
        except Exception as e:  # a backend bug: recorded as failed, never retried into a loop
            log.exception("%s: %s raised", admin.name, action.describe())
            return Result("failed", f"{type(e).__name__}: {e}", None, attempt)
        if attempt < attempts:
            sleep(delay)
            delay *= 2
    return Result("failed", f"gave up after {attempts} attempts: {last}", None, attempts)
