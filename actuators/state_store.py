"""The guardrail state kept beside the leader lease, so that a failover neither repeats nor forgets an action.

What is kept (one `Entry` per acted decision, keyed by its idempotency key):
- **in flight**: decided, about to go out, no answer recorded yet (`begin`, before the apply);
- **applied**: the backend took it (`settle`), kept for the guardrails' horizon (`max(1 h, cooldown)`), at most
  `MAX_APPLIED`: the latest per (kind, target) is its cooldown, those of the last hour the change budget spent.

A new leader `load()`s it when it takes the lease, before its first tick (`actuators/failover.py`).  Three stores:
- `RedisStateStore`: hashes under the Redis lease's key (`<lease>:state:in_flight`, `<lease>:state:applied`, a
  sorted set `<lease>:state:applied:at` to forget the oldest), each write one Lua script that first checks the
  lease still holds `<identity>|<fencing token>`: a deposed leader cannot write it;
- `KubernetesStateStore`: one annotation (`infercast.io/actuator-state`, a JSON document) on the Lease object
  itself, written by a replace carrying the resourceVersion read after checking holder and `leaseTransitions`:
  a takeover in between is a 409, then a re-read that finds another holder;
- `FileStateStore`: the same document in a file beside the audit trail (`leader: single`, one node).

Bounded (`MAX_APPLIED`, `MAX_IN_FLIGHT`); state that is not what this module writes (not JSON, unknown fields, a
newer version, more entries than the bounds, a Redis key of another type) is a `StateError` naming where it is
and how to clear it, never read as empty.
"""

from __future__ import annotations

import fcntl
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from infercast.actuators.actions import Action, parse_action
from infercast.actuators.durable import replace_durably
from infercast.actuators.leader import Leadership
from infercast.actuators.stamp import KEY_PATTERN

STATE_VERSION = 1
#: applied entries kept (the newest); a change budget above this is counted only this far after a failover
MAX_APPLIED = 1000
#: decisions in flight at once (a tick's few; more means their answers could not be written back)
MAX_IN_FLIGHT = 100
#: the Lease annotation that holds the state
ANNOTATION = "infercast.io/actuator-state"
#: Kubernetes allows 256 KiB of annotations per object; the state keeps below this
MAX_ANNOTATION_BYTES = 200_000


class StateError(RuntimeError):
    """The stored state cannot be read or written; the message says where, why and how to clear it."""


class Deposed(StateError):
    """This replica no longer holds the lease (or holds it under another fencing token): the write is refused."""


@dataclass(frozen=True)
class Entry:
    key: str  # the decision's idempotency key
    action: Action
    at: float  # when it was decided, on the deciding replica's clock
    token: int | None  # the fencing token it was decided under
    holder: str  # the replica that decided it
    decision: int | None = None  # its id in that replica's audit trail

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.action.to_dict(), "at": self.at, "token": self.token, "holder": self.holder,
                "decision": self.decision}  # fmt: skip

    @classmethod
    def from_dict(cls, key: Any, d: Any, where: str) -> Entry:
        """StateError naming `where` when `d` is not an entry this module wrote."""
        what = f"{where}: entry {str(key)[:80]!r}"
        if not isinstance(key, str) or not KEY_PATTERN.fullmatch(key):
            raise StateError(f"{what}: not an idempotency key")
        if not isinstance(d, dict) or set(d) != {"action", "at", "token", "holder", "decision"}:
            keys = sorted(d)[:8] if isinstance(d, dict) else type(d).__name__
            raise StateError(f"{what}: expected the fields action, at, token, holder, decision; got {keys}")
        try:
            action = parse_action(d["action"])
        except Exception as e:  # not a mapping, an unknown kind, a bad field: ActionError, TypeError, ValueError
            raise StateError(f"{what}: its action: {type(e).__name__}: {str(e)[:120]}") from None
        at, token, holder, decision = d["at"], d["token"], d["holder"], d["decision"]
        if isinstance(at, bool) or not isinstance(at, int | float) or not math.isfinite(at) or at < 0:
            raise StateError(f"{what}: at is not a time: {at!r}"[:200])
        for name, v in (("token", token), ("decision", decision)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
                raise StateError(f"{what}: {name} is not a non-negative integer: {v!r}"[:200])
        if not isinstance(holder, str) or len(holder) > 300:
            raise StateError(f"{what}: holder is not a replica's name")
        return cls(key, action, float(at), token, holder, decision)


@dataclass(frozen=True)
class StoredState:
    applied: tuple[Entry, ...] = ()  # oldest first
    in_flight: tuple[Entry, ...] = ()  # oldest first

    def cooldowns(self) -> dict[tuple[str, str], float]:
        """(kind, target) -> when it was last applied."""
        out: dict[tuple[str, str], float] = {}
        for e in self.applied:
            k = (e.action.kind, e.action.target)
            out[k] = max(out.get(k, -math.inf), e.at)
        return out

    def applied_in_hour(self, now: float) -> int:
        """Applied changes of the last hour: the change budget spent."""
        return sum(1 for e in self.applied if now - 3600.0 < e.at <= now)


class StateStore(Protocol):
    where: str  # for messages: the Redis keys, the Lease, the file

    def load(self) -> StoredState:
        """The state as stored (empty when none was ever written); StateError when it cannot be read or is not
        what this module writes."""
        ...

    def begin(self, lead: Leadership, entry: Entry) -> None:
        """Record `entry` in flight, only while `lead` still holds the lease (Deposed otherwise)."""
        ...

    def settle(self, lead: Leadership, key: str, applied: Entry | None, keep_since: float) -> None:
        """`key` is no longer in flight; `applied`: the backend took it (kept until `keep_since` passes it)."""
        ...


# --- the document (Kubernetes annotation, file) ------------------------------------------------------------------
def empty_doc() -> dict[str, Any]:
    return {"version": STATE_VERSION, "in_flight": {}, "applied": {}}


def parse_doc(raw: str | None, where: str, clear: str) -> tuple[dict[str, Any], StoredState]:
    """(the document, its state); an absent document is the empty state.  StateError otherwise, naming `where`
    and how to `clear` it."""
    if raw is None:
        return empty_doc(), StoredState()
    try:
        doc = json.loads(raw)
    except ValueError as e:
        raise StateError(f"{where}: not JSON ({e}); {clear}") from None
    if not isinstance(doc, dict) or set(doc) != {"version", "in_flight", "applied"}:
        keys = sorted(doc)[:8] if isinstance(doc, dict) else type(doc).__name__
        raise StateError(f"{where}: not the actuator's state (expected version, in_flight, applied; got {keys}); "
                         f"{clear}")  # fmt: skip
    v = doc["version"]
    if v != STATE_VERSION:
        newer = isinstance(v, int) and not isinstance(v, bool) and v > STATE_VERSION
        why = f"written by a newer infercast (version {v})" if newer else f"version {v!r} is not {STATE_VERSION}"
        raise StateError(f"{where}: {why}; {clear}")
    parts = []
    for name, cap in (("applied", MAX_APPLIED), ("in_flight", MAX_IN_FLIGHT)):
        entries = doc[name]
        if not isinstance(entries, dict):
            raise StateError(f"{where}: {name} is not a mapping; {clear}")
        if len(entries) > cap:
            raise StateError(f"{where}: {name} holds {len(entries)} entries, more than the {cap} the actuator keeps; "
                             f"{clear}")  # fmt: skip
        try:
            parts.append(tuple(sorted((Entry.from_dict(k, e, where) for k, e in entries.items()), key=_order)))
        except StateError as e:
            raise StateError(f"{e}; {clear}") from None
    return doc, StoredState(applied=parts[0], in_flight=parts[1])


def doc_begin(doc: dict[str, Any], entry: Entry, where: str) -> None:
    flying = doc["in_flight"]
    if entry.key not in flying and len(flying) >= MAX_IN_FLIGHT:
        raise StateError(f"{where}: {len(flying)} decisions already in flight (at most {MAX_IN_FLIGHT}): their "
                         "answers were not written back")  # fmt: skip
    flying[entry.key] = entry.to_dict()


def doc_settle(doc: dict[str, Any], key: str, applied: Entry | None, keep_since: float) -> None:
    doc["in_flight"].pop(key, None)
    kept = doc["applied"]
    if applied is not None:
        kept[key] = applied.to_dict()
    newest = sorted(((e["at"], k) for k, e in kept.items() if e["at"] >= keep_since), reverse=True)[:MAX_APPLIED]
    doc["applied"] = {k: kept[k] for _, k in sorted(newest)}


def _order(e: Entry) -> tuple[float, str]:
    return (e.at, e.key)


# --- Redis -------------------------------------------------------------------------------------------------------
# KEYS: lease, in_flight, version.  ARGV: the lease's value we hold, key, entry JSON, cap, version
_BEGIN = """
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then return {'deposed', cur or ''} end
local v = redis.call('GET', KEYS[3])
if v and v ~= ARGV[5] then return {'version', v} end
if redis.call('HEXISTS', KEYS[2], ARGV[2]) == 0 then
  local n = redis.call('HLEN', KEYS[2])
  if n >= tonumber(ARGV[4]) then return {'full', tostring(n)} end
end
redis.call('SET', KEYS[3], ARGV[5])
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
return {'ok', ''}
"""
# KEYS: lease, in_flight, applied, applied_at, version
# ARGV: the lease's value we hold, key, applied entry JSON ('' = not applied), at, keep since, cap, version
_SETTLE = """
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then return {'deposed', cur or ''} end
local v = redis.call('GET', KEYS[5])
if v and v ~= ARGV[7] then return {'version', v} end
redis.call('HDEL', KEYS[2], ARGV[2])
if ARGV[3] ~= '' then
  redis.call('HSET', KEYS[3], ARGV[2], ARGV[3])
  redis.call('ZADD', KEYS[4], ARGV[4], ARGV[2])
end
for _, old in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[5])) do
  redis.call('HDEL', KEYS[3], old)
end
redis.call('ZREMRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[5])
local n = redis.call('ZCARD', KEYS[4])
local cap = tonumber(ARGV[6])
if n > cap then
  for _, old in ipairs(redis.call('ZRANGE', KEYS[4], 0, n - cap - 1)) do redis.call('HDEL', KEYS[3], old) end
  redis.call('ZREMRANGEBYRANK', KEYS[4], 0, n - cap - 1)
end
redis.call('SET', KEYS[5], ARGV[7])
return {'ok', ''}
"""


class RedisStateStore:
    """Under the Redis lease's key `L`: `L:state:in_flight`, `L:state:applied` (hashes: idempotency key -> entry
    JSON), `L:state:applied:at` (sorted set: key by decision time), `L:state:version`.  On Redis Cluster give the
    lease key a hash tag so these land in its slot."""

    def __init__(self, client: Any, lease_key: str) -> None:
        import redis

        self._errors = redis.RedisError
        self.r = client
        self.lease_key = lease_key
        base = f"{lease_key}:state"
        self.in_flight, self.applied, self.applied_at, self.version = (
            f"{base}:in_flight", f"{base}:applied", f"{base}:applied:at", f"{base}:version",
        )  # fmt: skip
        self.where = f"redis {_where(client)} keys {base}:*"
        self.clear = f"inspect them, then delete them to start from an empty state (redis-cli DEL {self.in_flight} " \
            f"{self.applied} {self.applied_at} {self.version})"  # fmt: skip
        self._begin = client.register_script(_BEGIN)
        self._settle = client.register_script(_SETTLE)

    def load(self) -> StoredState:
        keys = (self.in_flight, self.applied, self.applied_at, self.version)
        try:
            pipe = self.r.pipeline(transaction=True)
            for k in keys:
                pipe.type(k)
            types = dict(zip(keys, pipe.execute(), strict=True))
            want = {self.in_flight: "hash", self.applied: "hash", self.applied_at: "zset", self.version: "string"}
            for k, t in types.items():
                if t not in ("none", want[k]):
                    raise StateError(f"{self.where}: {k} is a {t}, not a {want[k]}: not the actuator's state; "
                                     f"{self.clear}")  # fmt: skip
            pipe = self.r.pipeline(transaction=True)
            pipe.get(self.version)
            pipe.hlen(self.in_flight)
            pipe.hlen(self.applied)
            version, n_flying, n_applied = pipe.execute()
            if version is not None and version != str(STATE_VERSION):
                raise StateError(f"{self.where}: version {version[:20]!r} is not {STATE_VERSION} (written by another "
                                 f"infercast?); {self.clear}")  # fmt: skip
            for name, n, cap in (("in_flight", n_flying, MAX_IN_FLIGHT), ("applied", n_applied, MAX_APPLIED)):
                if n > cap:
                    raise StateError(f"{self.where}: {name} holds {n} entries, more than the {cap} the actuator "
                                     f"keeps; {self.clear}")  # fmt: skip
            pipe = self.r.pipeline(transaction=True)
            pipe.hgetall(self.applied)
            pipe.hgetall(self.in_flight)
            applied, flying = pipe.execute()
        except self._errors as e:
            raise StateError(f"{self.where}: cannot be read: {type(e).__name__}: {str(e)[:200]}") from None
        parts = []
        for name, h in (("applied", applied), ("in_flight", flying)):
            out = []
            for k, raw in h.items():
                try:
                    d = json.loads(raw)
                except ValueError:
                    raise StateError(f"{self.where}: {name} entry {k[:80]!r} is not JSON; {self.clear}") from None
                try:
                    out.append(Entry.from_dict(k, d, f"{self.where} ({name})"))
                except StateError as e:
                    raise StateError(f"{e}; {self.clear}") from None
            parts.append(tuple(sorted(out, key=_order)))
        return StoredState(applied=parts[0], in_flight=parts[1])

    def begin(self, lead: Leadership, entry: Entry) -> None:
        args = [_lease_value(lead), entry.key, json.dumps(entry.to_dict()), MAX_IN_FLIGHT, STATE_VERSION]
        self._run(self._begin, [self.lease_key, self.in_flight, self.version], args, lead)

    def settle(self, lead: Leadership, key: str, applied: Entry | None, keep_since: float) -> None:
        keys = [self.lease_key, self.in_flight, self.applied, self.applied_at, self.version]
        at = repr(float(applied.at)) if applied is not None else "0"
        body = json.dumps(applied.to_dict()) if applied is not None else ""
        args = [_lease_value(lead), key, body, at, repr(float(keep_since)), MAX_APPLIED, STATE_VERSION]
        self._run(self._settle, keys, args, lead)

    def _run(self, script: Any, keys: list[str], args: list[Any], lead: Leadership) -> None:
        try:
            outcome, detail = script(keys=keys, args=args)
        except self._errors as e:  # unreachable, or a key of another type (WRONGTYPE)
            raise StateError(f"{self.where}: cannot be written: {type(e).__name__}: {str(e)[:200]}") from None
        if outcome == "deposed":
            held = detail.rpartition("|")[0] or "nobody"
            raise Deposed(f"{self.where}: not written: {self.lease_key} is held by {held}, not by {lead.holder} "
                          f"under fencing token {lead.fencing_token}")  # fmt: skip
        if outcome == "version":
            raise StateError(f"{self.where}: version {detail[:20]!r} is not {STATE_VERSION}; {self.clear}")
        if outcome == "full":
            raise StateError(f"{self.where}: {detail} decisions already in flight (at most {MAX_IN_FLIGHT}): their "
                             "answers were not written back")  # fmt: skip


def _lease_value(lead: Leadership) -> str:
    """The value the Redis lease holds for `lead` (infercast.actuators.leader: `<identity>|<token>`)."""
    return f"{lead.holder}|{lead.fencing_token}"


def _where(client: Any) -> str:
    kw = client.connection_pool.connection_kwargs
    return f"unix://{kw['path']}" if "path" in kw else f"{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"


# --- Kubernetes --------------------------------------------------------------------------------------------------
class KubernetesStateStore:
    """The annotation `infercast.io/actuator-state` on the leader's Lease object
    (`infercast.actuators.leader.KubernetesLease`): the state travels with the lease, and a write is fenced by the Lease
    itself -- holder and leaseTransitions checked on the object read, the replace carrying its resourceVersion."""

    ATTEMPTS = 3  # a 409 (the renew job or a takeover wrote the Lease in between): read again

    def __init__(self, lease: Any) -> None:
        self.lease = lease
        self.where = f"lease {lease.namespace}/{lease.name} annotation {ANNOTATION}"
        self.clear = f"inspect it, then remove it to start from an empty state (kubectl -n {lease.namespace} " \
            f"annotate lease {lease.name} {ANNOTATION}-)"  # fmt: skip

    def load(self) -> StoredState:
        obj = self._read()
        return parse_doc(_annotation(obj), self.where, self.clear)[1]

    def begin(self, lead: Leadership, entry: Entry) -> None:
        self._update(lead, lambda doc: doc_begin(doc, entry, self.where))

    def settle(self, lead: Leadership, key: str, applied: Entry | None, keep_since: float) -> None:
        self._update(lead, lambda doc: doc_settle(doc, key, applied, keep_since))

    def _read(self) -> Any:
        status, obj = self.lease._api(self.lease.coord.read_namespaced_lease, self.lease.name, self.lease.namespace)
        if status != 200:
            raise StateError(f"{self.where}: cannot be read: {'HTTP ' + str(status) + ': ' if status else ''}{obj}")
        return obj

    def _update(self, lead: Leadership, change) -> None:
        with self.lease.lock:  # the renew job replaces the same object: one writer at a time in this process
            for _ in range(self.ATTEMPTS):
                obj = self._read()
                spec = obj.spec
                holder, token = spec.holder_identity, int(spec.lease_transitions or 0)
                if holder != lead.holder or token != lead.fencing_token or holder != self.lease.identity:
                    raise Deposed(f"{self.where}: not written: the lease is held by {holder or 'nobody'} (fencing "
                                  f"token {token}), not by {lead.holder} under {lead.fencing_token}")  # fmt: skip
                doc, _ = parse_doc(_annotation(obj), self.where, self.clear)
                change(doc)
                text = json.dumps(doc, separators=(",", ":"), sort_keys=True)
                if len(text) > MAX_ANNOTATION_BYTES:
                    raise StateError(f"{self.where}: {len(text)} bytes, more than the {MAX_ANNOTATION_BYTES} an "
                                     "annotation may hold here")  # fmt: skip
                annotations = {**(obj.metadata.annotations or {}), ANNOTATION: text}
                acquired = spec.acquire_time.timestamp() if spec.acquire_time else 0.0
                renewed = spec.renew_time.timestamp() if spec.renew_time else acquired
                body = self.lease._body(acquired, renewed, token, obj.metadata.resource_version, annotations)
                body["spec"]["leaseDurationSeconds"] = int(spec.lease_duration_seconds or self.lease.lease_seconds)
                status, why = self.lease._api(
                    self.lease.coord.replace_namespaced_lease, self.lease.name, self.lease.namespace, body
                )
                if status == 200:
                    return
                if status != 409:
                    raise StateError(f"{self.where}: cannot be written: "
                                     f"{'HTTP ' + str(status) + ': ' if status else ''}{why}")  # fmt: skip
            raise StateError(f"{self.where}: cannot be written: {self.ATTEMPTS} conflicts (409) in a row")


def _annotation(obj: Any) -> str | None:
    return (obj.metadata.annotations or {}).get(ANNOTATION)


# --- a file (one node) -------------------------------------------------------------------------------------------
class FileStateStore:
    """The document in a JSON file (`leader: single`: one replica on one node, no lease to fence by): replaced
    atomically (a temporary file, fsync, rename) under an exclusive lock on `<path>.lock`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.where = f"file {self.path}"
        self.clear = f"inspect it, then delete it to start from an empty state (rm {self.path})"

    def load(self) -> StoredState:
        return parse_doc(self._text(), self.where, self.clear)[1]

    def begin(self, lead: Leadership, entry: Entry) -> None:
        self._update(lambda doc: doc_begin(doc, entry, self.where))

    def settle(self, lead: Leadership, key: str, applied: Entry | None, keep_since: float) -> None:
        self._update(lambda doc: doc_settle(doc, key, applied, keep_since))

    def _text(self) -> str | None:
        try:
            return self.path.read_text()
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as e:
            raise StateError(f"{self.where}: cannot be read: {e}") from None

    def _update(self, change) -> None:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(f"{self.path}.lock", "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                doc, _ = parse_doc(self._text(), self.where, self.clear)
                change(doc)
                replace_durably(self.path, json.dumps(doc, sort_keys=True))
        except OSError as e:
            raise StateError(f"{self.where}: cannot be written: {e}") from None


def store_for(elector: Any, audit_path: str | Path) -> StateStore | None:
    """The store beside `elector`'s lease: Redis for a Redis lease (`leader: redis`, or `leader: single` checked in
    a Redis backend), the Lease object for `leader: kubernetes`, a file beside the audit trail for one replica."""
    from infercast.actuators.leader import KubernetesLease, RedisLease, SingleOnRedis, SingleReplica

    if isinstance(elector, SingleOnRedis):
        elector = elector.lease
    if isinstance(elector, RedisLease):
        return RedisStateStore(elector.r, elector.key)
    if isinstance(elector, KubernetesLease):
        return KubernetesStateStore(elector)
    if isinstance(elector, SingleReplica):
        return FileStateStore(f"{audit_path}.state.json")
    return None
