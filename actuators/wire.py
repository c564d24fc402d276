"""The actuator's values as JSON, for the router admin API, Redis, the file backend and the audit trail.  Pure.

`observation_to_dict` / `observation_from_dict` and `result_to_dict` / `result_from_dict` are exact inverses;
the `_from_` side is strict (a missing or mistyped field raises `WireError` naming it), because what it reads
comes from another process: a router, a Redis written by someone else, a file an operator edited.  The shapes are
documented in docs/router-admin-api.md.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from infercast.actuators.actions import Action, ActionError, parse_action
from infercast.actuators.admin import Admission, Observation, PoolState, Result


class WireError(ValueError):
    """A document that is not what the router admin API says it is; the message names the field."""


def pool_to_dict(p: PoolState) -> dict[str, Any]:
    return dataclasses.asdict(p)


def observation_to_dict(o: Observation) -> dict[str, Any]:
    return {
        "at": o.at,
        "pools": [pool_to_dict(p) for p in o.pools],
        "admission": dataclasses.asdict(o.admission),
        "rate_limits": dict(o.rate_limits),
    }


def _num(v: Any, where: str, *, optional: bool = False, integer: bool = False, minimum: float = 0.0) -> Any:
    if v is None and optional:
        return None
    ok = isinstance(v, int) if integer else isinstance(v, int | float)
    if isinstance(v, bool) or not ok:
        raise WireError(f"{where}: expected {'an integer' if integer else 'a number'}, got {v!r}"[:200])
    if not math.isfinite(v) or v < minimum:
        raise WireError(f"{where}: expected a finite number >= {minimum:g}, got {v!r}"[:200])
    return v


def _fields(d: Any, where: str, cls: type) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise WireError(f"{where}: expected an object, got {type(d).__name__}")
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - names)
    if unknown:
        raise WireError(f"{where}: unknown field(s) {unknown}")
    return d


def pool_from_dict(d: Any, where: str = "pool") -> PoolState:
    d = _fields(d, where, PoolState)
    for key in ("name", "version"):
        if not isinstance(d.get(key), str) or not d[key]:
            raise WireError(f"{where}.{key}: expected a non-empty string, got {d.get(key)!r}"[:200])
    if not isinstance(d.get("standby", False), bool):
        raise WireError(f"{where}.standby: expected true or false, got {d['standby']!r}"[:200])
    return PoolState(
        name=d["name"],
        version=d["version"],
        replicas=_num(d.get("replicas"), f"{where}.replicas", integer=True),
        ready=_num(d.get("ready"), f"{where}.ready", integer=True),
        weight=float(_num(d.get("weight"), f"{where}.weight")),
        breaker_threshold_seconds=_num(
            d.get("breaker_threshold_seconds"), f"{where}.breaker_threshold_seconds", optional=True
        ),
        standby=d.get("standby", False),
        min_context_tokens=_num(d.get("min_context_tokens", 0), f"{where}.min_context_tokens", integer=True),
        max_context_tokens=_num(
            d.get("max_context_tokens"), f"{where}.max_context_tokens", optional=True, integer=True
        ),
        spare=_num(d.get("spare", 0), f"{where}.spare", integer=True),
    )


def observation_from_dict(d: Any) -> Observation:
    """An `Observation` from its JSON form; `WireError` names the first bad field."""
    d = _fields(d, "fleet", Observation)
    pools = d.get("pools")
    if not isinstance(pools, list) or not pools:
        raise WireError("fleet.pools: expected a non-empty list of pools")
    parsed = tuple(pool_from_dict(p, f"fleet.pools[{i}]") for i, p in enumerate(pools))
    names = [p.name for p in parsed]
    if len(set(names)) != len(names):
        raise WireError(f"fleet.pools: pool names repeat: {sorted({n for n in names if names.count(n) > 1})}")
    a = _fields(d.get("admission") or {}, "fleet.admission", Admission)
    admission = Admission(
        memory_limit=_num(a.get("memory_limit"), "fleet.admission.memory_limit", optional=True),
        max_context_tokens=_num(
            a.get("max_context_tokens"), "fleet.admission.max_context_tokens", optional=True, integer=True
        ),
        normal_queue_seconds=_num(a.get("normal_queue_seconds"), "fleet.admission.normal_queue_seconds", optional=True),
        low_queue_seconds=_num(a.get("low_queue_seconds"), "fleet.admission.low_queue_seconds", optional=True),
    )
    lanes = d.get("rate_limits") or {}
    if not isinstance(lanes, dict):
        raise WireError("fleet.rate_limits: expected an object of lane -> requests per second (or null)")
    rate_limits = {str(k): _num(v, f"fleet.rate_limits.{k}", optional=True) for k, v in lanes.items()}
    return Observation(float(_num(d.get("at"), "fleet.at")), parsed, admission, rate_limits)


def result_to_dict(r: Result) -> dict[str, Any]:
    return {
        "status": r.status,
        "detail": r.detail,
        "previous": r.previous.to_dict() if r.previous is not None else None,
        "attempts": r.attempts,
    }


def action_from_dict(d: Any, where: str = "action") -> Action:
    try:
        return parse_action(d)
    except ActionError as e:
        raise WireError(f"{where}: {e}") from None


def result_from_dict(d: Any, where: str = "result") -> Result:
    """A `Result` from its JSON form (extra fields are ignored: an API answer may carry more)."""
    if not isinstance(d, dict):
        raise WireError(f"{where}: expected an object, got {type(d).__name__}")
    status = d.get("status")
    if status not in ("applied", "failed", "refused"):
        raise WireError(f"{where}.status: expected applied, failed or refused, got {status!r}"[:200])
    detail = d.get("detail", "")
    if not isinstance(detail, str):
        raise WireError(f"{where}.detail: expected a string")
    prev = d.get("previous")
    previous = action_from_dict(prev, f"{where}.previous") if prev is not None else None
    attempts = d.get("attempts", 1)
    return Result(status, detail, previous, _num(attempts, f"{where}.attempts", integer=True, minimum=1))
