"""A file a hot-reloading router reads, as a `FleetAdmin`: each change is an atomic replace of the whole document.

For a router that reloads a YAML or JSON file of this schema when it changes: an in-house gateway, or a small
adapter in front of one.  It is infercast's own schema: Envoy's file-based xDS and the vLLM production-stack
router read theirs, not this (Envoy Gateway has its own backend, `envoy_gateway.py`; production-stack's dynamic
config holds no weights or breakers, docs/actuator.md).  The document (docs/router-admin-api.md, "File"):

    pools:                      # only the pools of the fleet file; other keys of a pool are kept as they are
      v4-main: {weight: 0.5, breaker_threshold_seconds: 0.4, replicas: 12, standby: false}
    admission: {memory_limit: 0.8, max_context_tokens: 16000, normal_queue_seconds: 5, low_queue_seconds: 30}
    rate_limits:
      shared: {rps: 220.0, burst: 55.0}
    infercast: {revision: 3, fencing_token: 2, updated_at: 1700000000.0, applied: {KEY: '{"action": ...}'}}

A setting the document leaves out is the fleet file's (`pools.<p>.weight`, `router.breaker_latency_seconds`,
`pools.<p>.nodes`, `router.rate_limit_rps`); other top-level keys (the router's own configuration) are kept.
Comments are not (the file is rewritten by a YAML dumper).

How a change is written, and why:
- under an exclusive `flock` on `<file>.lock`, so two writers (two actuators, a person with the same tool) never
  interleave their read-modify-write;
- to a temporary file in the same directory, flushed and `fsync`ed, given the old file's mode, then `os.replace`d
  over the document and the directory `fsync`ed: a router sees the old document or the new one, never half of
  one, and a crash (or power loss) leaves one of the two;
- never over a document it cannot read: an existing file that is not YAML/JSON, or whose `pools`, `admission`,
  `rate_limits` or `infercast` sections are not what this says (`infercast.revision` and `fencing_token`
  non-negative integers among them), raises `BackendError` naming the file and the field, and the file is left
  exactly as it was (retried: a router's own writer may be mid-way through a non-atomic write);
- a record under an idempotency key (`infercast.applied.KEY`) that is not what the actuator wrote (edited or
  forged: not JSON, no action, an undo that is no action) is a `BackendError` naming the key, from `lookup` and from
  a replayed apply: the daemon's read-back then says `unknown`, never a guess;
- a fencing token below the highest seen is refused ("stale"), and so is one more than `MAX_FENCE_STEP` above it
  ("from the future", the router admin API's rule: a forged 999... would otherwise lock the rightful leader out);
  the first token a document sees is trusted.
A missing file is the fleet file's defaults; the first apply creates it.  `observe()` reports the settings; a file
cannot tell what is running, so `ready` is the `replicas` setting.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from infercast.actuators.actions import (
    ADMISSION_FIELDS,
    Action,
    PrewarmPool,
    ScalePool,
    SetAdmission,
    SetBreakerThreshold,
    SetPoolWeight,
    SetRateLimit,
    parse_action,
)
from infercast.actuators.admin import ActionRefused, Admission, BackendError, Observation, PoolState, Result
from infercast.actuators.backends.router_api import MAX_FENCE_STEP
from infercast.actuators.durable import replace_durably
from infercast.actuators.stamp import Stamp, fence_refusal
from infercast.config import FleetConfig

#: idempotency keys remembered in the document: enough for retries and a restart's in-flight decisions, few enough
#: that a router re-reading the file on every change does not parse a log (each is one JSON string, cheap in YAML)
KEEP_KEYS = 64
# libyaml's parser and emitter where PyYAML has them (10x the pure-Python ones; the same documents)
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_DUMPER = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
POOL_FIELDS = {"weight": float, "breaker_threshold_seconds": float, "replicas": int, "standby": bool}


class FileAdmin:
    name = "file"
    takes_stamp = True

    def __init__(
        self,
        path: str | Path,
        fleet: FleetConfig,
        fmt: str | None = None,
        *,
        keep_keys: int = KEEP_KEYS,
        max_fence_step: int = MAX_FENCE_STEP,
    ) -> None:
        self.path = Path(path)
        self.fleet = fleet
        self.fmt = fmt or ("json" if self.path.suffix == ".json" else "yaml")
        self.keep_keys = keep_keys
        self.max_fence_step = max_fence_step  # the most a fencing token may exceed the highest seen
        self.lock_path = self.path.with_name(self.path.name + ".lock")

    @classmethod
    def from_config(cls, cfg, fleet: FleetConfig) -> FileAdmin:
        """From `infercast.config.FileBackend` and the fleet file it belongs to."""
        return cls(cfg.path, fleet, cfg.format)

    # --- FleetAdmin ------------------------------------------------------------------------------------------
    def observe(self) -> Observation:
        doc = self._read()
        pools = doc.get("pools") or {}
        states = []
        for name, pc in self.fleet.pools.items():
            p = {**self._defaults(name), **{k: v for k, v in (pools.get(name) or {}).items() if k in POOL_FIELDS}}
            states.append(
                PoolState(
                    name=name,
                    version=pc.version,
                    replicas=p["replicas"],
                    ready=p["replicas"],
                    weight=float(p["weight"]),
                    breaker_threshold_seconds=float(p["breaker_threshold_seconds"]),
                    standby=p["standby"],
                    min_context_tokens=pc.min_context_tokens,
                    max_context_tokens=pc.max_context_tokens,
                )
            )
        adm = doc.get("admission") or {}
        lanes = {lane: None for lane in self._lanes()}
        lanes["shared"] = self.fleet.router.rate_limit_rps
        for lane, v in (doc.get("rate_limits") or {}).items():
            lanes[lane] = v.get("rps")
        return Observation(time.time(), tuple(states), Admission(**{f: adm.get(f) for f in ADMISSION_FIELDS}), lanes)

    def apply(self, action: Action, stamp: Stamp | None = None) -> Result:
        stamp = stamp or Stamp()
        with self._locked():
            doc = self._read()
            meta = doc.setdefault("infercast", {})
            applied = meta.setdefault("applied", {})
            if stamp.key is not None and stamp.key in applied:
                done, prev = self._entry(applied[stamp.key], stamp.key)
                if done != action:
                    raise ActionRefused(f"idempotency key {stamp.key!r} was used for another action")
                return Result("applied", "replayed: applied earlier under this idempotency key", prev)
            if stamp.fencing_token is not None:
                refused = fence_refusal(stamp.fencing_token, meta.get("fencing_token"), self.max_fence_step)
                if refused:
                    raise ActionRefused(refused)
                meta["fencing_token"] = stamp.fencing_token
            previous = self._change(doc, action)
            meta["revision"] = meta.get("revision", 0) + 1  # an integer: `_check` refused any other on read
            meta["updated_at"] = round(time.time(), 3)
            if stamp.key is not None:
                applied[stamp.key] = json.dumps(
                    {
                        "action": action.to_dict(),
                        "previous": previous.to_dict() if previous else None,
                        "revision": meta["revision"],
                    },
                    sort_keys=True,
                )
                for old in list(applied)[: max(0, len(applied) - self.keep_keys)]:
                    del applied[old]
            self._write(doc)
        return Result("applied", previous=previous)

    def fence(self) -> int | None:
        """The highest fencing token the document has seen (`infercast.fencing_token`); None when none yet."""
        t = (self._read().get("infercast") or {}).get("fencing_token")
        return t if isinstance(t, int) and not isinstance(t, bool) and t >= 0 else None

    def lookup(self, key: str) -> Result | None:
        """The answer for idempotency key `key` (`applied`, with its undo action); None when nothing was applied
        under it; BackendError when the document cannot be read or the record under the key is not what the
        actuator wrote (it cannot say whether the action was applied: the daemon records `unknown`, never a guess)."""
        raw = ((self._read().get("infercast") or {}).get("applied") or {}).get(key)
        if raw is None:
            return None
        _, prev = self._entry(raw, key)
        return Result("applied", "applied earlier under this idempotency key", prev)

    # --- the document --------------------------------------------------------------------------------------
    def _entry(self, raw: str, key: str) -> tuple[Action, Action | None]:
        """(the action, its undo) of the record `apply` wrote under `key`: a JSON object with the action's mapping
        and the undo's (or null).  BackendError naming the file and the key otherwise."""
        try:
            done = json.loads(raw)
        except (TypeError, ValueError):
            raise self._unreadable(key, "not JSON") from None
        if not isinstance(done, dict) or not isinstance(done.get("action"), dict):
            raise self._unreadable(key, "not a JSON object with an action")
        try:
            action = parse_action(done["action"])
            prev = done.get("previous")
            return action, (parse_action(prev) if prev else None)
        except Exception as e:  # ActionError, TypeError...: an action or undo no action can carry
            raise self._unreadable(key, f"{type(e).__name__}: {str(e)[:60]}") from None

    def _unreadable(self, key: str, why: str) -> BackendError:
        return BackendError(
            f"the record under idempotency key {key[:80]!r} cannot be read: not what the actuator wrote ({why}); "
            f"{self.path} infercast.applied, left as it is"
        )

    def _defaults(self, pool: str) -> dict[str, Any]:
        pc = self.fleet.pools[pool]
        return {
            "weight": pc.weight,
            "breaker_threshold_seconds": self.fleet.router.breaker_latency_seconds,
            "replicas": 0 if pc.standby else pc.nodes,
            "standby": pc.standby,
        }

    def _lanes(self) -> list[str]:
        return ["shared", *self.fleet.protections.quota_lanes]

    def _change(self, doc: dict[str, Any], a: Action) -> Action | None:
        """Change `doc` for `a`; returns the action that puts it back."""
        if isinstance(a, SetAdmission):
            adm = doc.setdefault("admission", {})
            back = {f: adm.get(f) for f in ADMISSION_FIELDS if getattr(a, f) is not None}
            adm.update({f: getattr(a, f) for f in back})
            return SetAdmission(**back) if all(v is not None for v in back.values()) else None
        if isinstance(a, SetRateLimit):
            if a.lane not in self._lanes():
                raise ActionRefused(f"the fleet file has no quota lane {a.lane!r} (have {self._lanes()})")
            lanes = doc.setdefault("rate_limits", {})
            old = lanes.get(a.lane) or {"rps": self.fleet.router.rate_limit_rps if a.lane == "shared" else None}
            lanes[a.lane] = {"rps": a.rps, "burst": a.burst}
            return SetRateLimit(a.lane, old.get("rps"), old.get("burst"))
        pool = getattr(a, "pool", None)
        if pool not in self.fleet.pools:
            raise ActionRefused(f"the fleet file has no pool {pool!r} (have {sorted(self.fleet.pools)})")
        entry = doc.setdefault("pools", {}).setdefault(pool, {})
        now = {**self._defaults(pool), **{k: v for k, v in entry.items() if k in POOL_FIELDS}}
        if isinstance(a, SetPoolWeight):
            entry["weight"] = a.weight
            return SetPoolWeight(pool, float(now["weight"]))
        if isinstance(a, SetBreakerThreshold):
            entry["breaker_threshold_seconds"] = a.seconds
            return SetBreakerThreshold(pool, float(now["breaker_threshold_seconds"]))
        if isinstance(a, ScalePool):
            entry["replicas"] = a.replicas
            return ScalePool(pool, now["replicas"])
        if isinstance(a, PrewarmPool):
            entry["standby"] = False
            return None
        raise ActionRefused(f"the file backend cannot express {a.kind!r}")

    def _read(self) -> dict[str, Any]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as e:
            raise BackendError(f"{self.path}: cannot read: {e}") from None
        try:
            doc = json.loads(text) if self.fmt == "json" else yaml.load(text, Loader=_LOADER)  # a safe loader
        except (json.JSONDecodeError, yaml.YAMLError) as e:
            raise BackendError(f"{self.path}: not valid {self.fmt.upper()} ({_first_line(e)}); left as it is") from None
        if doc is None:
            return {}
        problem = _check(doc)
        if problem:
            raise BackendError(f"{self.path}: not a router document the actuator can change: {problem}; left as it is")
        return doc

    def _write(self, doc: dict[str, Any]) -> None:
        text = (
            json.dumps(doc, indent=2, sort_keys=False) + "\n"
            if self.fmt == "json"
            else "# Written by infercast actuator (actuators/backends/file.py); see docs/router-admin-api.md\n"
            + yaml.dump(doc, Dumper=_DUMPER, sort_keys=False, default_flow_style=False)
        )
        try:
            mode = self.path.stat().st_mode & 0o777
        except FileNotFoundError:
            mode = 0o644
        try:
            replace_durably(self.path, text, mode=mode, suffix=".tmp")
        except OSError as e:
            raise BackendError(f"{self.path}: cannot write: {e}") from None

    @contextmanager
    def _locked(self) -> Iterator[None]:
        try:
            fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as e:
            raise BackendError(f"{self.lock_path}: cannot open the lock file: {e}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock


def _first_line(e: Exception) -> str:
    return " ".join(str(e).split())[:200]


def _is_num(v: Any, *, integer: bool = False) -> bool:
    if isinstance(v, bool):
        return False
    if integer:
        return isinstance(v, int) and v >= 0
    return isinstance(v, int | float) and math.isfinite(v) and v >= 0


def _check(doc: Any) -> str | None:
    """What is wrong with a document this backend would change, or None."""
    if not isinstance(doc, dict):
        return f"expected a mapping at the top level, got {type(doc).__name__}"
    pools = doc.get("pools", {})
    if not isinstance(pools, dict):
        return "pools: expected a mapping of pool name -> settings"
    for name, p in pools.items():
        if not isinstance(p, dict):
            return f"pools.{name}: expected a mapping"
        for field, kind in POOL_FIELDS.items():
            if field not in p:
                continue
            v = p[field]
            ok = isinstance(v, bool) if kind is bool else _is_num(v, integer=kind is int)
            if not ok:
                return f"pools.{name}.{field}: expected {kind.__name__}, got {v!r}"[:200]
    adm = doc.get("admission", {})
    if not isinstance(adm, dict):
        return "admission: expected a mapping"
    for field in ADMISSION_FIELDS:
        v = adm.get(field)
        if v is not None and not _is_num(v, integer=field == "max_context_tokens"):
            return f"admission.{field}: expected a number, got {v!r}"[:200]
    lanes = doc.get("rate_limits", {})
    if not isinstance(lanes, dict) or not all(isinstance(v, dict) for v in lanes.values()):
        return "rate_limits: expected a mapping of lane -> {rps, burst}"
    for lane, v in lanes.items():
        for field in ("rps", "burst"):
            if v.get(field) is not None and not _is_num(v[field]):
                return f"rate_limits.{lane}.{field}: expected a number, got {v[field]!r}"[:200]
    meta = doc.get("infercast", {})
    if not isinstance(meta, dict) or not isinstance(meta.get("applied", {}), dict):
        return "infercast: expected a mapping with an `applied` mapping"
    if not all(isinstance(v, str) for v in meta.get("applied", {}).values()):
        return "infercast.applied: expected idempotency key -> a JSON string"
    for field in ("fencing_token", "revision"):
        if field in meta and not _is_num(meta[field], integer=True):
            return f"infercast.{field}: expected an integer, 0 or more, got {meta[field]!r}"[:200]
    return None
