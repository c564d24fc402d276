"""Router state in Redis as a `FleetAdmin`: a hash per pool, a fleet hash, and a pub/sub notice on every change.

Gateways that run several replicas (LiteLLM's router among them) share their routing state through Redis: each
replica reads the settings from Redis and subscribes to a channel to hear of changes at once.  The key layout
(docs/router-admin-api.md, "Redis"), with `P` the configured prefix:

    P:pools               SET   pool names
    P:pool:<pool>         HASH  version, replicas, ready, weight, breaker_threshold_seconds, standby (0/1),
                                min_context_tokens, max_context_tokens, spare
    P:lanes               SET   quota lane names
    P:lane:<lane>         HASH  rps, burst
    P:fleet               HASH  memory_limit, max_context_tokens, normal_queue_seconds, low_queue_seconds,
                                revision (+1 per change), fencing_token (the highest seen)
    P:applied             HASH  idempotency key -> {"action", "previous", "revision"} (the last 10,000)
    P:applied:order       ZSET  idempotency key by revision (to forget the oldest)
    channel P:changes     {"revision": n, "key": ..., "fencing_token": ..., "action": {...}} after each change

An absent field (or an empty string) is "not set".  Every apply is one Lua script, so it is atomic: the replayed-
key check, the unknown-pool check, the fencing check, the write, the revision and the notice happen together or
not at all.  A Redis that cannot be reached, times out, or answers an error is a `BackendError` (retried by
`apply_with_retries`); a pool or lane Redis does not list, a stale fencing token, a token from the future (more
than `MAX_FENCE_STEP` above the highest seen, the router admin API's rule: a forged 999... would otherwise lock the
rightful leader out; the first token a fresh store sees is trusted) or a reused key is `ActionRefused`.  A record
under an idempotency key that is not what the actuator wrote (edited or forged in Redis: not JSON, no action, an
action or undo no action can carry) is a `BackendError` naming the key, from `lookup` and from a replayed apply:
the daemon's read-back then says `unknown` and restart recovery leaves the decision unresolved, never a guess.  On
Redis Cluster, give a prefix with a hash tag (`{infercast}`) so every key lands in one slot.
"""

from __future__ import annotations

import json
from typing import Any, cast

import redis as redislib
from redis.backoff import NoBackoff
from redis.retry import Retry

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
from infercast.actuators.admin import ActionRefused, BackendError, Observation, Result
from infercast.actuators.backends.router_api import MAX_FENCE_STEP
from infercast.actuators.stamp import Stamp
from infercast.actuators.wire import WireError, observation_from_dict
from infercast.redact import redact, redact_url

KEEP_KEYS = 10_000
INT_FIELDS = {"replicas", "ready", "min_context_tokens", "max_context_tokens", "spare"}

# KEYS: fleet, target hash, applied, applied order, membership set
# ARGV: token, key, channel, member, action JSON, keep, max fence step, field, value, field, value, ...
_APPLY = """
local token, key, channel, member, action, keep = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6])
local step = tonumber(ARGV[7])
if key ~= '' then
  local done = redis.call('HGET', KEYS[3], key)
  if done then
    local ok, rec = pcall(cjson.decode, done)
    if not ok or type(rec) ~= 'table' or type(rec['action']) ~= 'string' then return {'unreadable', done} end
    if rec['action'] ~= action then return {'reused', ''} end
    return {'replayed', done}
  end
end
if member ~= '' and redis.call('SISMEMBER', KEYS[5], member) == 0 then return {'unknown', member} end
if token ~= '' then
  local held = redis.call('HGET', KEYS[1], 'fencing_token')
  local cur = tonumber(held or '-1')
  if cur == nil then return {'badfence', held} end
  if tonumber(token) < cur then return {'stale', tostring(cur)} end
  if cur >= 0 and tonumber(token) > cur + step then return {'future', tostring(cur)} end
  redis.call('HSET', KEYS[1], 'fencing_token', token)
end
local prev = {}
for i = 8, #ARGV, 2 do
  local f, v = ARGV[i], ARGV[i + 1]
  prev[f] = redis.call('HGET', KEYS[2], f) or ''
  if v == '' then redis.call('HDEL', KEYS[2], f) else redis.call('HSET', KEYS[2], f, v) end
end
local rev = redis.call('HINCRBY', KEYS[1], 'revision', 1)
local rec = cjson.encode({action = action, previous = prev, revision = rev})
if key ~= '' then
  redis.call('HSET', KEYS[3], key, rec)
  redis.call('ZADD', KEYS[4], rev, key)
  local n = redis.call('ZCARD', KEYS[4])
  if n > keep then
    for _, old in ipairs(redis.call('ZRANGE', KEYS[4], 0, n - keep - 1)) do redis.call('HDEL', KEYS[3], old) end
    redis.call('ZREMRANGEBYRANK', KEYS[4], 0, n - keep - 1)
  end
end
redis.call('PUBLISH', channel, '{"revision": ' .. rev .. ', "key": ' .. cjson.encode(key) ..
  ', "fencing_token": ' .. (token == '' and 'null' or token) .. ', "action": ' .. action .. '}')
return {'applied', rec}
"""


def _s(v: float | int | bool | None) -> str:
    if v is None:
        return ""
    if isinstance(v, bool):
        return "1" if v else "0"
    return repr(v) if isinstance(v, float) else str(v)


class RedisAdmin:
    name = "redis"
    takes_stamp = True

    def __init__(
        self,
        client: redislib.Redis,
        prefix: str = "infercast",
        *,
        keep_keys: int = KEEP_KEYS,
        max_fence_step: int = MAX_FENCE_STEP,
    ) -> None:
        self.r = client
        self.prefix = prefix
        self.keep_keys = keep_keys
        self.max_fence_step = max_fence_step  # the most a fencing token may exceed the highest seen
        self.channel = f"{prefix}:changes"
        self._apply = client.register_script(_APPLY)
        self._where = redact_url(_url_of(client))

    @classmethod
    def from_url(cls, url: str, prefix: str = "infercast", timeout_seconds: float = 1.0) -> RedisAdmin:
        return cls(client(url, timeout_seconds), prefix)

    @classmethod
    def from_config(cls, cfg) -> RedisAdmin:
        """From `infercast.config.RedisBackend`."""
        return cls.from_url(cfg.url, cfg.prefix, cfg.timeout_seconds)

    def k(self, *parts: str) -> str:
        return ":".join((self.prefix, *parts))

    # --- state ----------------------------------------------------------------------------------------------
    def seed(self, obs: Observation) -> None:
        """Write a whole fleet state (a router's job; tests and first set-up use it): pools, lanes, admission."""
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(self.k("pools"), self.k("lanes"))
        for p in obs.pools:
            key = self.k("pool", p.name)
            pipe.delete(key)
            fields = {f: _s(v) for f, v in vars(p).items() if f != "name" and v is not None}
            pipe.hset(key, mapping=fields)
            pipe.sadd(self.k("pools"), p.name)
        for lane, rps in obs.rate_limits.items():
            pipe.delete(self.k("lane", lane))
            if rps is not None:
                pipe.hset(self.k("lane", lane), mapping={"rps": _s(rps)})
            pipe.sadd(self.k("lanes"), lane)
        admission = {
            f: _s(getattr(obs.admission, f)) for f in ADMISSION_FIELDS if getattr(obs.admission, f) is not None
        }
        pipe.hdel(self.k("fleet"), *ADMISSION_FIELDS)
        if admission:
            pipe.hset(self.k("fleet"), mapping=admission)
        self._run(pipe.execute)

    def observe(self) -> Observation:
        pools = sorted(self._run(self.r.smembers, self.k("pools")))
        lanes = sorted(self._run(self.r.smembers, self.k("lanes")))
        pipe = self.r.pipeline(transaction=True)
        pipe.time()
        pipe.hgetall(self.k("fleet"))
        for name in pools:
            pipe.hgetall(self.k("pool", name))
        for lane in lanes:
            pipe.hgetall(self.k("lane", lane))
        now, fleet, *rest = self._run(pipe.execute)
        pool_hashes, lane_hashes = rest[: len(pools)], rest[len(pools) :]
        doc: dict[str, Any] = {
            "at": now[0] + now[1] / 1e6,
            "pools": [
                {"name": name, **{f: _typed(f, v) for f, v in h.items()}}
                for name, h in zip(pools, pool_hashes, strict=True)
            ],
            "admission": {f: _typed(f, fleet.get(f, "")) for f in ADMISSION_FIELDS},
            "rate_limits": {lane: _typed("rps", h.get("rps", "")) for lane, h in zip(lanes, lane_hashes, strict=True)},
        }
        try:
            return observation_from_dict(doc)
        except WireError as e:
            raise BackendError(f"redis {self._where} prefix {self.prefix!r}: {e}") from None

    # --- actions --------------------------------------------------------------------------------------------
    def apply(self, action: Action, stamp: Stamp | None = None) -> Result:
        target, member_set, member, fields = self._change(action)
        stamp = stamp or Stamp()
        payload = json.dumps(action.to_dict(), sort_keys=True)
        keys = [self.k("fleet"), target, self.k("applied"), self.k("applied", "order"), member_set]
        argv: list[str] = [
            "" if stamp.fencing_token is None else str(stamp.fencing_token),
            stamp.key or "",
            self.channel,
            member,
            payload,
            str(self.keep_keys),
            str(self.max_fence_step),
        ]
        for f, v in fields.items():
            argv += [f, v]
        outcome, detail = self._run(self._apply, keys=keys, args=argv)
        if outcome == "unknown":
            raise ActionRefused(f"redis lists no {'pool' if member_set.endswith(':pools') else 'lane'} {detail!r}")
        if outcome == "stale":
            raise ActionRefused(f"stale fencing token {stamp.fencing_token} (a newer leader holds {detail})")
        if outcome == "future":
            raise ActionRefused(
                f"fencing token {stamp.fencing_token} is from the future (highest seen {detail}; at most "
                f"{self.max_fence_step} more is accepted)"
            )
        if outcome == "badfence":
            raise BackendError(f"redis {self._where}: fleet fencing_token is not an integer: {detail!r}"[:200])
        if outcome == "reused":
            raise ActionRefused(f"idempotency key {stamp.key!r} was used for another action")
        if outcome == "unreadable":
            raise self._unreadable(stamp.key or "", "not a JSON object with an action")
        _, prev = self._record(detail, stamp.key or "")
        note = "replayed: applied earlier under this idempotency key" if outcome == "replayed" else ""
        return Result("applied", note, _undo(action, prev))

    def fence(self) -> int | None:
        """The highest fencing token this fleet has seen (`P:fleet` `fencing_token`); None when none yet."""
        raw = self._run(self.r.hget, self.k("fleet"), "fencing_token")
        try:
            t = int(raw) if raw is not None else -1
        except ValueError:
            raise BackendError(f"redis {self._where}: fleet fencing_token is not an integer: {raw!r}"[:200]) from None
        return t if t >= 0 else None

    def lookup(self, key: str) -> Result | None:
        """The answer for idempotency key `key` (`applied`, with its undo action); None when nothing was applied
        under it; BackendError when Redis cannot be asked or the record under the key is not what the actuator
        wrote (it cannot say whether the action was applied: the daemon records `unknown`, never a guess)."""
        raw = self._run(self.r.hget, self.k("applied"), key)
        if raw is None:
            return None
        action, prev = self._record(raw, key)
        return Result("applied", "applied earlier under this idempotency key", _undo(action, prev))

    def _record(self, raw: str, key: str) -> tuple[Action, dict[str, str]]:
        """(the action, the fields it replaced) of the record `_APPLY` wrote under `key`: a JSON object whose
        `action` is the action's JSON text and whose `previous` maps each field changed to its old value (a string;
        an empty object or array when there were none, as Lua's cjson writes an empty table).  BackendError naming
        the key otherwise."""
        try:
            record = json.loads(raw)
        except (TypeError, ValueError):
            raise self._unreadable(key, "not JSON") from None
        if not isinstance(record, dict) or not isinstance(record.get("action"), str):
            raise self._unreadable(key, "not a JSON object with an action")
        try:
            action = parse_action(json.loads(record["action"]))
        except Exception as e:  # not JSON, not a mapping, not an action: ValueError, ActionError, TypeError...
            raise self._unreadable(key, f"its action: {type(e).__name__}: {str(e)[:60]}") from None
        prev = record.get("previous")
        if prev in ({}, [], None):
            return action, {}
        if not isinstance(prev, dict) or not all(isinstance(v, str) for v in prev.values()):
            raise self._unreadable(key, "its previous values are not a mapping of field -> string")
        return action, cast(dict[str, str], prev)

    def _unreadable(self, key: str, why: str) -> BackendError:
        return BackendError(
            f"redis: the record under idempotency key {key[:80]!r} cannot be read: not what the actuator wrote "
            f"({why}); {self._where} hash {self.k('applied')!r}, left as it is"
        )

    def _change(self, a: Action) -> tuple[str, str, str, dict[str, str]]:
        """(hash to change, the set that must list the member, the member, field -> new value)."""
        pools = self.k("pools")
        if isinstance(a, SetPoolWeight):
            return self.k("pool", a.pool), pools, a.pool, {"weight": _s(float(a.weight))}
        if isinstance(a, SetBreakerThreshold):
            return self.k("pool", a.pool), pools, a.pool, {"breaker_threshold_seconds": _s(float(a.seconds))}
        if isinstance(a, ScalePool):
            return self.k("pool", a.pool), pools, a.pool, {"replicas": _s(a.replicas)}
        if isinstance(a, PrewarmPool):
            return self.k("pool", a.pool), pools, a.pool, {"standby": "0"}
        if isinstance(a, SetAdmission):
            changed = {f: _s(getattr(a, f)) for f in ADMISSION_FIELDS if getattr(a, f) is not None}
            return self.k("fleet"), pools, "", changed  # fleet-wide: no member to check
        if isinstance(a, SetRateLimit):
            return self.k("lane", a.lane), self.k("lanes"), a.lane, {"rps": _s(a.rps), "burst": _s(a.burst)}
        raise ActionRefused(f"the redis backend cannot express {a.kind!r}")

    def _run(self, fn, *args, **kw):
        try:
            return fn(*args, **kw)
        except redislib.RedisError as e:
            raise BackendError(f"redis {self._where}: {type(e).__name__}: {redact(str(e))[:200]}") from None

    def close(self) -> None:
        self.r.close()


def client(url: str, timeout_seconds: float = 1.0) -> redislib.Redis:
    """A Redis client that gives up fast: one quick retry (a connection Redis closed meanwhile), then the error;
    retries with backoff are the caller's (`apply_with_retries`, the next leader check)."""
    return redislib.Redis.from_url(
        url,
        socket_timeout=timeout_seconds,
        socket_connect_timeout=timeout_seconds,
        retry=Retry(NoBackoff(), 1),
        decode_responses=True,
    )


def _url_of(c: redislib.Redis) -> str:
    kw = c.connection_pool.connection_kwargs
    if "path" in kw:
        return f"unix://{kw['path']}"
    return f"redis://{kw.get('host', '?')}:{kw.get('port', '?')}/{kw.get('db', 0)}"


def _typed(field: str, v: str) -> Any:
    """A hash value as the JSON type the fleet document has (a string that is neither stays a string, and the
    document check names it)."""
    if v == "":
        return None
    if field == "standby":
        return {"1": True, "0": False, "true": True, "false": False}.get(v, v)
    if field in ("version",):
        return v
    try:
        return int(v) if field in INT_FIELDS else float(v)
    except ValueError:
        return v


def _undo(action: Action, prev: dict[str, str]) -> Action | None:
    """The action that puts back the fields `action` changed (None where one was unset or cannot be put back)."""

    def num(f: str) -> float | None:
        v = prev.get(f, "")
        return None if v == "" else float(v)

    try:
        if isinstance(action, SetPoolWeight) and num("weight") is not None:
            return SetPoolWeight(action.pool, num("weight"))  # type: ignore[arg-type]
        if isinstance(action, SetBreakerThreshold) and num("breaker_threshold_seconds") is not None:
            return SetBreakerThreshold(action.pool, num("breaker_threshold_seconds"))  # type: ignore[arg-type]
        if isinstance(action, ScalePool) and num("replicas") is not None:
            return ScalePool(action.pool, int(num("replicas")))  # type: ignore[arg-type]
        if isinstance(action, SetAdmission):
            back = {f: num(f) for f in prev}
            if back and all(v is not None for v in back.values()):
                if "max_context_tokens" in back:
                    back["max_context_tokens"] = int(back["max_context_tokens"])  # type: ignore[arg-type]
                return SetAdmission(**back)  # type: ignore[arg-type]
        if isinstance(action, SetRateLimit):
            return SetRateLimit(action.lane, num("rps"), num("burst"))
    except (ValueError, TypeError):
        return None  # a value someone else wrote that no action can carry: no undo, rather than a wrong one
    return None
