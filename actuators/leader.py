"""Leader election: of several actuator replicas exactly one acts; the others stay advisory.

`LeaderElector.try_acquire_or_renew(now) -> Leadership` is asked before every tick (and between ticks, to keep a
lease alive); `release()` hands the leadership over at shutdown.  Three electors:

- `SingleReplica`: one replica, always the leader (no fencing token).
- `RedisLease`: a Redis key set with `SET NX PX` (only if absent, with a time to live), renewed by a Lua
  compare-and-renew (only by its holder) and released by a Lua compare-and-delete.  Each new holder gets a fencing
  token from `INCR` on a second key, so tokens only grow.  Redis unreachable means *nobody* leads: the replica
  that led cannot renew, and says so in `detail` ("redis unreachable ...") instead of acting on a lease it cannot
  vouch for.
- `KubernetesLease`: a `coordination.k8s.io/v1` Lease, as client-go's leader election does it: read it; create it
  if absent; renew it if ours (a replace carrying the `resourceVersion` read, so a concurrent writer makes it a
  409 and we follow); take it over once its holder has not renewed it for `leaseDurationSeconds` *as measured on
  our own clock since we saw it change* (no trust in the other replica's clock).  `leaseTransitions` is the
  fencing token.

The fencing token travels with each apply (`infercast.actuators.stamp.Stamp`); backends that can check it (HTTP, Redis,
file) refuse a lower one than they have seen, so a replica that lost its lease while paused cannot act when it wakes.

When the lease store loses or restores state (a Redis flushed or restored from a backup, a Lease recreated), its
token counter can fall behind what the backend has seen, and every action of the rightful leader would be refused
for ever.  `advance_past(seen, now)` (Redis and Kubernetes) moves this holder's token above `seen` -- only while the
store still says we hold the lease, in one atomic step -- and the daemon asks for it whenever its backend reports a
token ahead of its own (actuators/daemon.py); when it cannot, the daemon reports itself fenced.

The guardrail state that survives a failover is kept beside the lease (actuators/state_store.py): under the Redis
lease's key, or in an annotation of the Lease object -- which is why every replace of the Lease here carries the
annotations it read, and why the Lease's writers in one process share `KubernetesLease.lock`.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import threading
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from infercast.redact import redact


@dataclass(frozen=True)
class Leadership:
    is_leader: bool
    fencing_token: int | None
    holder: str | None  # who holds the leadership (None: nobody, or unknown)
    detail: str  # one line for logs: acquired, renewed, held by X, unreachable ...


class LeaderElector(Protocol):
    identity: str

    def try_acquire_or_renew(self, now: float) -> Leadership:
        """Acquire the leadership if it is free, renew it if held; never raises for the store's sake."""
        ...

    def release(self) -> None:
        """Give the leadership up if held (at shutdown), so another replica takes over at once."""
        ...


def default_identity() -> str:
    """host:pid:random -- unique per process, so a restarted replica never mistakes the old lease for its own."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


class SingleReplica:
    def __init__(self, identity: str | None = None) -> None:
        self.identity = identity or default_identity()

    def try_acquire_or_renew(self, now: float) -> Leadership:
        return Leadership(True, None, self.identity, "single replica: always leads")

    def release(self) -> None:
        pass


# --- Redis ---------------------------------------------------------------------------------------------------------
# KEYS: lease, token counter.  ARGV: identity, lease ms.  The lease's value is "<identity>|<token>".
_ACQUIRE = """
local cur = redis.call('GET', KEYS[1])
if not cur then
  local t = redis.call('INCR', KEYS[2])
  redis.call('SET', KEYS[1], ARGV[1] .. '|' .. t, 'NX', 'PX', ARGV[2])
  return {1, t, ARGV[1], 'acquired'}
end
local holder, t = string.match(cur, '^(.*)|(%d+)$')
if holder == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return {1, tonumber(t), holder, 'renewed'}
end
return {0, tonumber(t), holder, tostring(redis.call('PTTL', KEYS[1]))}
"""
# KEYS: lease, token counter.  ARGV: identity, lease ms, the token to move past.
_ADVANCE = """
local cur = redis.call('GET', KEYS[1])
if not cur then return {0, 0} end
local holder = string.match(cur, '^(.*)|%d+$')
if holder ~= ARGV[1] then return {0, 0} end
local t = redis.call('INCR', KEYS[2])
local want = tonumber(ARGV[3]) + 1
if t < want then redis.call('SET', KEYS[2], want); t = want end
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. t, 'PX', ARGV[2])
return {1, t}
"""
# KEYS: lease.  ARGV: identity.
_RELEASE = """
local cur = redis.call('GET', KEYS[1])
if cur and string.match(cur, '^(.*)|%d+$') == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


class RedisLease:
    def __init__(
        self,
        client: Any,  # a redis.Redis (the `redis` extra; imported only where a Redis lease is configured)
        key: str = "infercast:actuator:leader",
        identity: str | None = None,
        lease_seconds: float = 15.0,
    ) -> None:
        import redis

        self._errors = redis.RedisError
        self.r = client
        self.key = key
        self.token_key = f"{key}:fencing"
        self.identity = identity or default_identity()
        if "|" in self.identity:
            raise ValueError(f"a leader identity cannot contain '|': {self.identity!r}")
        self.lease_ms = int(lease_seconds * 1000)
        self._acquire = client.register_script(_ACQUIRE)
        self._release = client.register_script(_RELEASE)
        self._advance = client.register_script(_ADVANCE)

    @classmethod
    def from_config(cls, cfg) -> RedisLease:
        """From `infercast.config.RedisLeader`."""
        from infercast.actuators.backends.redis import client

        return cls(client(cfg.url, cfg.timeout_seconds), cfg.key, cfg.identity, cfg.lease_seconds)

    def try_acquire_or_renew(self, now: float) -> Leadership:
        try:
            ok, token, holder, note = self._acquire(
                keys=[self.key, self.token_key], args=[self.identity, self.lease_ms]
            )
        except self._errors as e:
            why = redact(f"{type(e).__name__}: {e}")[:200]
            return Leadership(False, None, None, f"redis unreachable ({why}): nobody can be sure to lead, so none acts")
        if ok:
            return Leadership(True, int(token), holder, f"{note} the redis lease {self.key} (fencing token {token})")
        return Leadership(False, int(token), holder, f"{holder} holds the redis lease for another {note} ms")

    def advance_past(self, seen: int, now: float) -> Leadership | None:
        """Move this holder's fencing token above `seen` (the counter was lost or restored); None when we no longer
        hold the lease or Redis cannot be reached."""
        try:
            ok, token = self._advance(keys=[self.key, self.token_key], args=[self.identity, self.lease_ms, int(seen)])
        except self._errors:
            return None
        if not ok:
            return None
        return Leadership(True, int(token), self.identity, f"re-acquired the redis lease {self.key} above token "
                          f"{seen} (fencing token {token})")  # fmt: skip

    def release(self) -> None:
        with contextlib.suppress(self._errors):  # unreachable: the lease expires by itself
            self._release(keys=[self.key], args=[self.identity])


# --- Kubernetes ----------------------------------------------------------------------------------------------------
def micro_time(t: float) -> str:
    """A Kubernetes MicroTime (RFC 3339 with six fractional digits, UTC)."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class KubernetesLease:
    def __init__(
        self,
        api: Any,
        namespace: str,
        name: str = "infercast-actuator",
        identity: str | None = None,
        lease_seconds: int = 15,
        timeout_seconds: float = 5.0,
    ) -> None:
        from kubernetes import client

        self.coord = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_seconds = int(lease_seconds)
        self.timeout = timeout_seconds
        self._seen_version: str | None = None  # the lease's resourceVersion when we last saw it change
        self._seen_at = 0.0  # ... and our `now` then
        # one writer of the Lease at a time in this process: the renew job, a tick's leader check and the guardrail
        # state kept in its annotation (actuators/state_store.py) each read it and replace it with that version
        self.lock = threading.RLock()

    @classmethod
    def from_config(cls, cfg) -> KubernetesLease:
        """From `infercast.config.KubernetesLeader`."""
        from infercast.actuators.kube import api_client

        return cls(
            api_client(cfg, "actuator.leader"), cfg.namespace, cfg.name, cfg.identity, cfg.lease_seconds,
            cfg.timeout_seconds,
        )  # fmt: skip

    def try_acquire_or_renew(self, now: float) -> Leadership:
        with self.lock:
            return self._acquire_or_renew(now)

    def _acquire_or_renew(self, now: float) -> Leadership:
        where = f"lease {self.namespace}/{self.name}"
        status, lease = self._api(self.coord.read_namespaced_lease, self.name, self.namespace)
        if status == 404:
            status, lease = self._api(self.coord.create_namespaced_lease, self.namespace, self._body(now, now, 0, None))
            if status in (200, 201):
                self._seen(lease, now)
                return Leadership(True, 0, self.identity, f"created {where} (fencing token 0)")
            if status == 409:
                return Leadership(False, None, None, f"another replica created {where} first; following")
        if status != 200:
            return self._unreachable(where, status, lease)
        spec = lease.spec
        holder = spec.holder_identity or None
        transitions = int(spec.lease_transitions or 0)
        duration = int(spec.lease_duration_seconds or self.lease_seconds)
        version = lease.metadata.resource_version
        self._seen(lease, now)
        if holder == self.identity:
            acquired = spec.acquire_time.timestamp() if spec.acquire_time else now
            status, done = self._api(
                self.coord.replace_namespaced_lease,
                self.name,
                self.namespace,
                self._body(acquired, now, transitions, version, lease.metadata.annotations),
            )
            if status == 200:
                self._seen(done, now)
                return Leadership(True, transitions, self.identity, f"renewed {where} (fencing token {transitions})")
        elif holder is not None and now < self._seen_at + duration:
            left = self._seen_at + duration - now
            return Leadership(
                False, transitions, holder, f"{holder} holds {where} (unrenewed for {duration - left:.0f}s)"
            )
        else:
            status, done = self._api(
                self.coord.replace_namespaced_lease,
                self.name,
                self.namespace,
                self._body(now, now, transitions + 1, version, lease.metadata.annotations),
            )
            if status == 200:
                self._seen(done, now)
                token = transitions + 1
                return Leadership(
                    True, token, self.identity, f"took over {where} from {holder} (fencing token {token})"
                )
        if status == 409:
            return Leadership(False, None, holder, f"lost a race for {where} (409 Conflict); following")
        return self._unreachable(where, status, done)

    def advance_past(self, seen: int, now: float) -> Leadership | None:
        """Set `leaseTransitions` above `seen` while we hold the Lease (a replace carrying the resourceVersion read,
        so a concurrent writer wins); None when we do not hold it or the API refuses."""
        with self.lock:
            return self._advance_past(seen, now)

    def _advance_past(self, seen: int, now: float) -> Leadership | None:
        status, lease = self._api(self.coord.read_namespaced_lease, self.name, self.namespace)
        if status != 200 or lease.spec.holder_identity != self.identity:
            return None
        acquired = lease.spec.acquire_time.timestamp() if lease.spec.acquire_time else now
        token = int(seen) + 1
        body = self._body(acquired, now, token, lease.metadata.resource_version, lease.metadata.annotations)
        status, done = self._api(self.coord.replace_namespaced_lease, self.name, self.namespace, body)
        if status != 200:
            return None
        self._seen(done, now)
        where = f"lease {self.namespace}/{self.name}"
        return Leadership(True, token, self.identity, f"moved {where} above token {seen} (fencing token {token})")

    def release(self) -> None:
        """Clear the holder (client-go's ReleaseOnCancel) so a follower takes over without waiting a lease out (the
        annotations, the guardrail state among them, stay for the next holder)."""
        with self.lock:
            self._release()

    def _release(self) -> None:
        status, lease = self._api(self.coord.read_namespaced_lease, self.name, self.namespace)
        if status != 200 or lease.spec.holder_identity != self.identity:
            return
        transitions = int(lease.spec.lease_transitions or 0)
        body = self._body(0.0, 0.0, transitions, lease.metadata.resource_version, lease.metadata.annotations)
        body["spec"].update(holderIdentity=None, acquireTime=None, renewTime=None, leaseDurationSeconds=1)
        self._api(self.coord.replace_namespaced_lease, self.name, self.namespace, body)

    # --- helpers ---------------------------------------------------------------------------------------------
    def _body(
        self, acquired: float, renewed: float, transitions: int, version: str | None,
        annotations: dict[str, str] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        """A whole Lease (a replace sends all of it: `annotations`, the guardrail state's among them, are carried
        over from the object read, or a renew would erase them)."""
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if version is not None:
            meta["resourceVersion"] = version
        if annotations:
            meta["annotations"] = dict(annotations)
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": self.lease_seconds,
                "acquireTime": micro_time(acquired),
                "renewTime": micro_time(renewed),
                "leaseTransitions": transitions,
            },
        }

    def _seen(self, lease: Any, now: float) -> None:
        version = lease.metadata.resource_version
        if version != self._seen_version:
            self._seen_version, self._seen_at = version, now

    def _api(self, fn, *args: Any) -> tuple[int, Any]:
        """(HTTP status, the object or the error's message); status 0 when the API could not be reached."""
        import urllib3
        from kubernetes.client.exceptions import ApiException

        from infercast.actuators.kube import status_message

        ok = 201 if fn.__name__.startswith("create") else 200
        try:
            return ok, fn(*args, _request_timeout=(min(self.timeout, 2.0), self.timeout))
        except ApiException as e:
            return int(e.status or 0), status_message(e)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            return 0, f"{type(e).__name__}: {e}"[:200]

    def _unreachable(self, where: str, status: int, why: Any) -> Leadership:
        what = f"HTTP {status}: {why}" if status else str(why)
        return Leadership(False, None, None, f"kubernetes API unusable for {where} ({redact(what)}): none acts")


class SingleOnRedis:
    """`leader: single` with a Redis backend: "single" is checked, not assumed.  The replica holds a lease in the
    backend's own Redis (`<prefix>:actuator:single`); a second daemon started on the same fleet finds it held, stays
    advisory and says why in every tick's log line, instead of both acting silently."""

    def __init__(self, lease: RedisLease) -> None:
        self.lease = lease
        self.identity = lease.identity

    def try_acquire_or_renew(self, now: float) -> Leadership:
        lead = self.lease.try_acquire_or_renew(now)
        if lead.is_leader or lead.holder is None:
            return lead
        return Leadership(
            False, lead.fencing_token, lead.holder,
            f"leader: single, but another daemon ({lead.holder}) holds {self.lease.key}: this one does not act",
        )  # fmt: skip

    def advance_past(self, seen: int, now: float) -> Leadership | None:
        return self.lease.advance_past(seen, now)

    def release(self) -> None:
        self.lease.release()


#: how often `leader: single` on a Redis backend renews its lease (a third of SINGLE_LEASE_SECONDS)
SINGLE_LEASE_SECONDS = 15.0


def build_elector(cfg, backend=None) -> LeaderElector:
    """The elector `actuator.leader` (an `infercast.config` Leader) describes; `leader: single` with a Redis
    `backend` checks that it is single (`SingleOnRedis`)."""
    if cfg.kind == "redis":
        return RedisLease.from_config(cfg)
    if cfg.kind == "kubernetes":
        return KubernetesLease.from_config(cfg)
    if backend is not None and backend.kind == "redis":
        from infercast.actuators.backends.redis import client

        r = client(backend.url, backend.timeout_seconds)
        return SingleOnRedis(RedisLease(r, f"{backend.prefix}:actuator:single", lease_seconds=SINGLE_LEASE_SECONDS))
    return SingleReplica()
