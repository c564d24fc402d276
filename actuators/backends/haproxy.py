"""HAProxy as a `FleetAdmin`, through its runtime API (a UNIX socket at `level admin`).

Each pool is a set of HAProxy servers in one backend (`pools`: pool -> server names).  Nothing is reloaded and no
configuration file is written: the runtime API changes the running proxy, and every write is read back (`show
stat`) before the action is reported applied.

- `set_pool_weight(pool, w)`: each of the pool's servers gets weight `round(w x weight_scale)` (HAProxy's 0-256;
  `weight_scale` 100 makes 1.0 the configured 100).  A weight that would put every server of the backend at 0 is
  refused (HAProxy would answer 503 to everything).
- `set_admission(memory_limit=m)`: the admission lever is each server's concurrency limit: `maxconn` =
  `max(1, floor(m x full_concurrency))`, where `full_concurrency` is the number of requests at which an engine's
  KV cache is full (its blocks x block size / the tokens a request holds).  Requests beyond the limit wait in
  HAProxy's queue instead of being admitted to an engine that would preempt them.  `memory_limit` 1.0 removes the
  limit (`maxconn 0`).  Its other fields are refused (the proxy does not read prompts or priorities).
- `scale_pool(pool, n)`: the proxy cannot start engines; it can drain them.  The pool keeps its first `n` servers
  `ready` and puts the others in `drain` (no new requests, running ones finish); `n` above the pool's servers is
  refused.  `prewarm_pool`, `set_breaker_threshold`, `set_rate_limit`: refused (another backend's levers).
- `observe()`: per pool, the servers not draining (replicas), the mean weight / weight_scale, and the admission
  (the tightest `maxconn` / full_concurrency; None when unlimited).

Idempotent, fenced and keyed like the Redis and file backends, with the state kept in the proxy itself (two stick
tables the configuration declares, see `infercast.simulator.lab.proxy`): an action carrying an idempotency key already
applied is answered "replayed" without touching the proxy (and refused if the key was used for another action);
a fencing token below the highest seen is refused ("stale fencing token"), one more than `max_fence_step` above
it too.  Unlike Redis' Lua script, the read-check-write of the fence is not atomic: it assumes one actuator
process at a time per proxy, which the leader election gives (a second, stale one is what the fence refuses).

Errors: the socket unreachable or an answer that is not HAProxy's -> `BackendError` (retried); HAProxy refusing a
command, an unknown pool or server -> `ActionRefused`.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import re
import socket
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from infercast.actuators.actions import Action, ScalePool, SetAdmission, SetPoolWeight
from infercast.actuators.admin import ActionRefused, Admission, BackendError, Observation, PoolState, Result
from infercast.actuators.stamp import Stamp, fence_refusal
from infercast.config import FleetConfig

BACKEND = "engines"
KEYS_TABLE = "ic_action_keys"
FENCE_TABLE = "ic_fence"
FENCE_KEY = "token"
#: `set weight` takes 0-256
MAX_WEIGHT = 256
MAX_FENCE_STEP = 1000


class ProxyError(OSError):
    """The runtime API could not be reached, or answered something that is not what was asked for."""


@dataclass(frozen=True)
class ServerState:
    """One server of the backend as `show stat` reports it."""

    name: str
    weight: int  # 0-256
    maxconn: int | None  # None: no limit
    status: str  # UP, DRAIN, MAINT, "no check" (up, not checked)
    current: int  # connections now
    queued: int  # requests waiting in HAProxy for this server

    @property
    def draining(self) -> bool:
        return self.status.upper().startswith(("DRAIN", "MAINT"))


class RuntimeAPI:
    """HAProxy's runtime API over its UNIX socket: one command per connection."""

    def __init__(self, socket_path: str | Path, timeout: float = 5.0) -> None:
        self.path = str(socket_path)
        self.timeout = timeout

    def command(self, line: str) -> str:
        if "\n" in line or ";" in line:
            raise ValueError(f"one runtime command at a time, got {line!r}")
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(self.timeout)
                s.connect(self.path)
                s.sendall(line.encode() + b"\n")
                chunks = []
                while chunk := s.recv(65536):
                    chunks.append(chunk)
        except OSError as e:
            raise ProxyError(f"HAProxy runtime API {self.path}: {type(e).__name__}: {e}") from None
        return b"".join(chunks).decode(errors="replace")

    def write(self, line: str) -> None:
        """A command that answers nothing on success; anything it answers is HAProxy's refusal."""
        answer = self.command(line).strip()
        if answer:
            raise ProxyError(f"HAProxy refused `{line}`: {answer[:200]}")

    def servers(self, backend: str = BACKEND) -> dict[str, ServerState]:
        """The backend's servers, read back from `show stat` (CSV, typed by its header)."""
        text = self.command("show stat").lstrip("# ")
        rows = list(csv.DictReader(io.StringIO(text)))
        if not rows or "svname" not in rows[0]:
            raise ProxyError(f"HAProxy: `show stat` answered {text.strip()[:200]!r}")
        out = {}
        for r in rows:
            if r.get("pxname") != backend or r.get("svname") in ("FRONTEND", "BACKEND"):
                continue
            out[r["svname"]] = ServerState(
                name=r["svname"],
                weight=int(r.get("weight") or 0),
                maxconn=int(r["slim"]) if r.get("slim") else None,
                status=r.get("status") or "",
                current=int(r.get("scur") or 0),
                queued=int(r.get("qcur") or 0),
            )
        if not out:
            raise ProxyError(f"HAProxy has no backend {backend!r} with servers")
        return out

    def table_get(self, table: str, key: str) -> int | None:
        """The `gpt0` stored under `key` in a stick table, None when the key is absent."""
        text = self.command(f"show table {table} key {key}")
        if text.startswith("Unknown") or "No such table" in text:
            raise ProxyError(f"HAProxy: no stick table {table!r}: {text.strip()[:200]}")
        m = re.search(r"\bgpt0=(\d+)", text)
        return int(m.group(1)) if m else None

    def table_set(self, table: str, key: str, value: int) -> None:
        self.write(f"set table {table} key {key} data.gpt0 {int(value)}")


def action_digest(action: Action) -> int:
    """31 bits of the action's hash: what the keys table stores to tell a replay from a key reused."""
    text = json.dumps(action.to_dict(), sort_keys=True)
    return int(hashlib.sha256(text.encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


class HAProxyAdmin:
    name = "haproxy"
    takes_stamp = True

    def __init__(
        self,
        api: RuntimeAPI,
        pools: dict[str, list[str]],
        versions: dict[str, str],
        *,
        full_concurrency: int,
        weight_scale: float = 100.0,
        backend: str = BACKEND,
        max_fence_step: int = MAX_FENCE_STEP,
    ) -> None:
        if full_concurrency < 1:
            raise ValueError(f"full_concurrency must be >= 1, got {full_concurrency}")
        self.api = api
        self.pools = pools
        self.versions = versions
        self.full_concurrency = full_concurrency
        self.weight_scale = weight_scale
        self.backend = backend
        self.max_fence_step = max_fence_step

    @classmethod
    def from_config(cls, cfg: Any, fleet: FleetConfig) -> HAProxyAdmin:
        """The backend a fleet file's `actuator.backend` (kind: haproxy) describes; pools' versions from the file."""
        return cls(
            RuntimeAPI(cfg.socket, timeout=cfg.timeout_seconds),
            {pool: list(names) for pool, names in cfg.servers.items()},
            {pool: fleet.pools[pool].version for pool in cfg.servers},
            full_concurrency=cfg.full_concurrency,
            weight_scale=cfg.weight_scale,
            backend=cfg.backend,
        )

    # --- FleetAdmin ------------------------------------------------------------------------------------------
    def observe(self) -> Observation:
        found = self._servers()
        states, limits = [], []
        for pool, names in self.pools.items():
            mine = [found[n] for n in names if n in found]
            ready = [s for s in mine if not s.draining]
            weight = sum(s.weight for s in mine) / len(mine) / self.weight_scale if mine else 0.0
            limits += [s.maxconn for s in mine if s.maxconn is not None]
            states.append(
                PoolState(name=pool, version=self.versions.get(pool, pool), replicas=len(ready), ready=len(ready),
                          weight=weight)
            )  # fmt: skip
        limit = min(1.0, min(limits) / self.full_concurrency) if limits else None
        return Observation(time.time(), tuple(states), Admission(memory_limit=limit))

    def apply(self, action: Action, stamp: Stamp | None = None) -> Result:
        stamp = stamp or Stamp()
        self._check(action)
        if stamp.key is not None:
            done = self._table_get(KEYS_TABLE, stamp.key)
            if done is not None:
                if done != action_digest(action):
                    raise ActionRefused(f"idempotency key {stamp.key!r} was used for another action")
                return Result("applied", "replayed: applied earlier under this idempotency key")
        if stamp.fencing_token is not None:
            held = self._table_get(FENCE_TABLE, FENCE_KEY)
            refused = fence_refusal(stamp.fencing_token, held, self.max_fence_step)
            if refused:
                raise ActionRefused(refused)
            self._do(lambda: self.api.table_set(FENCE_TABLE, FENCE_KEY, stamp.fencing_token))
        if isinstance(action, SetPoolWeight):
            result = self._weight(action)
        elif isinstance(action, SetAdmission):
            result = self._admission(action)
        else:
            assert isinstance(action, ScalePool)
            result = self._drain(action)
        if stamp.key is not None:
            self._do(lambda: self.api.table_set(KEYS_TABLE, stamp.key, action_digest(action)))
        return result

    def fence(self) -> int | None:
        """The highest fencing token the proxy has seen; None when none yet."""
        return self._table_get(FENCE_TABLE, FENCE_KEY)

    def lookup(self, key: str) -> Result | None:
        """`applied` when an action was applied under `key` (its undo is not kept), None when none was."""
        if self._table_get(KEYS_TABLE, key) is None:
            return None
        return Result("applied", "applied earlier under this idempotency key (read from the proxy's keys table)")

    # --- the three levers ------------------------------------------------------------------------------------
    def _check(self, action: Action) -> None:
        if not isinstance(action, SetPoolWeight | SetAdmission | ScalePool):
            raise ActionRefused(
                f"the haproxy backend sets server weights, concurrency limits (set_admission memory_limit) and "
                f"drains servers (scale_pool); {action.kind} needs another backend"
            )
        if isinstance(action, SetAdmission):
            other = [f for f in ("max_context_tokens", "normal_queue_seconds", "low_queue_seconds")
                     if getattr(action, f) is not None]  # fmt: skip
            if other or action.memory_limit is None:
                what = ", ".join(other) if other else "no memory_limit"
                raise ActionRefused(
                    f"the haproxy backend sets admission as concurrency limits from memory_limit only ({what}): "
                    "HAProxy does not read prompts or priorities"
                )
        pool = getattr(action, "pool", None)
        if pool is not None and pool not in self.pools:
            raise ActionRefused(f"no HAProxy servers are mapped to pool {pool!r} (pools: {sorted(self.pools)})")

    def _weight(self, action: SetPoolWeight) -> Result:
        want = round(action.weight * self.weight_scale)
        if want > MAX_WEIGHT:
            raise ActionRefused(f"weight {action.weight:g} is {want} in HAProxy's scale; its maximum is {MAX_WEIGHT}")
        found = self._servers()
        names = self._names(action.pool, found)
        before = [found[n].weight for n in names]
        if want == 0 and all(s.weight == 0 for n, s in found.items() if n not in names):
            raise ActionRefused(
                f"weight 0 for {action.pool!r} leaves every server of backend {self.backend!r} at weight 0 (HAProxy "
                "would answer 503 to everything); shift weight to another pool first"
            )
        undo = SetPoolWeight(action.pool, sum(before) / len(before) / self.weight_scale)
        if all(w == want for w in before):
            return Result("applied", f"pool {action.pool}: servers already at weight {want}", undo)
        for n in names:
            self._do(lambda n=n: self.api.write(f"set weight {self.backend}/{n} {want}"))
        self._read_back(names, lambda s: s.weight == want, f"weight {want}")
        return Result("applied", f"pool {action.pool}: weight {before} -> {want} on {names}", undo)

    def _admission(self, action: SetAdmission) -> Result:
        m = action.memory_limit
        assert m is not None
        want = None if m >= 1.0 else max(1, math.floor(m * self.full_concurrency))
        found = self._servers()
        names = [n for pool in self.pools.values() for n in pool if n in found]
        before = [found[n].maxconn for n in names]
        limits = [b for b in before if b is not None]
        undo = SetAdmission(memory_limit=min(1.0, min(limits) / self.full_concurrency) if limits else 1.0)
        shown = "no limit" if want is None else f"maxconn {want}"
        if all(b == want for b in before):
            return Result("applied", f"servers already at {shown}", undo)
        for n in names:
            self._do(lambda n=n: self.api.write(f"set maxconn server {self.backend}/{n} {want or 0}"))
        self._read_back(names, lambda s: s.maxconn == want, shown)
        return Result("applied", f"concurrency limit {before} -> {shown} on {names}", undo)

    def _drain(self, action: ScalePool) -> Result:
        found = self._servers()
        names = self._names(action.pool, found)
        if action.replicas > len(names):
            raise ActionRefused(
                f"pool {action.pool!r} has {len(names)} servers in HAProxy; the proxy cannot start engines, only "
                f"drain them (asked for {action.replicas})"
            )
        keep, drain = names[: action.replicas], names[action.replicas :]
        undo = ScalePool(action.pool, sum(not found[n].draining for n in names))
        changed = []
        for n in keep:
            if found[n].draining:
                self._do(lambda n=n: self.api.write(f"set server {self.backend}/{n} state ready"))
                changed.append(f"{n} ready")
        for n in drain:
            if not found[n].draining:
                self._do(lambda n=n: self.api.write(f"set server {self.backend}/{n} state drain"))
                changed.append(f"{n} drain")
        self._read_back(keep, lambda s: not s.draining, "ready")
        self._read_back(drain, lambda s: s.draining, "drain")
        what = ", ".join(changed) if changed else "already so"
        return Result("applied", f"pool {action.pool}: {len(keep)} of {len(names)} servers ready ({what})", undo)

    # --- the proxy -------------------------------------------------------------------------------------------
    def _names(self, pool: str, found: dict[str, ServerState]) -> list[str]:
        missing = [n for n in self.pools[pool] if n not in found]
        if missing:
            raise ActionRefused(f"pool {pool!r}: HAProxy backend {self.backend!r} has no server {missing}")
        return list(self.pools[pool])

    def _servers(self) -> dict[str, ServerState]:
        return self._do(lambda: self.api.servers(self.backend))

    def _table_get(self, table: str, key: str) -> int | None:
        return self._do(lambda: self.api.table_get(table, key))

    def _read_back(self, names: list[str], ok, what: str) -> None:
        found = self._servers()
        wrong = [n for n in names if not ok(found[n])]
        if wrong:
            raise BackendError(f"HAProxy: read back after the write, {wrong} are not at {what}")

    @staticmethod
    def _do(fn):
        """Run one runtime-API exchange: unreachable -> BackendError (retried), refused -> ActionRefused."""
        try:
            return fn()
        except ProxyError as e:
            if "refused `" in str(e):
                raise ActionRefused(str(e)) from None
            raise BackendError(str(e)) from None
