"""Breaker thresholds as Envoy Gateway `BackendTrafficPolicy` objects, and the `envoy-gateway` backend that adds them
to the gateway backend's HTTPRoute weights and autoscaler floors (`actuator.backend.kind: envoy-gateway`).

What a breaker threshold is, in infercast's twin: a request that waits longer than it counts as a failure of its
pool, and a pool whose failures cross the breaker's ratio over its window is taken out of routing for a while.
Envoy has no latency-triggered breaker: its ejection (outlier detection, Envoy Gateway's passive health check)
counts errors, so the latency has to become an error first.  The mapping (`set_breaker_threshold(pool, s)`):

- `spec.retry.perRetry.timeout = s`, with `spec.retry.numRetries = 0`: a try that has not started answering within
  `s` is cut with a 504.  Envoy's per-try timeout stops once the response starts streaming back (its RetryPolicy
  documentation), so a long generation is never cut mid-stream; for a streamed request it bounds the wait for the
  response to start (an engine that sends its headers before the first token starts it early).  No retries are
  added: clients and the router already retry, and gateway retries multiply load in a surge.
- `spec.healthCheck.passive`: a host with `consecutive_gateway_errors` 502/503/504s in a row (the per-try timeouts
  among them: `splitExternalLocalOriginErrors: false` counts Envoy's own timeouts with the upstream's errors) is
  ejected for `ejection_seconds`, judged every `interval_seconds`, at most `max_ejection_percent` of the pool's
  hosts at once.  Envoy ejects hosts, not the whole pool as the twin's breaker does: with every host of a pool
  ejected the pool is out.

One policy per pool, named `infercast-breaker-<pool>` (or `policy`), attached with `targetRefs` to the pool's
HTTPRoute and, with `rule`, to that route rule (`sectionName`): Envoy Gateway applies a policy to every backendRef
of what it targets, so a pool needs a rule (or route) of its own for a threshold of its own.  The policy carries
the label `app.kubernetes.io/managed-by: infercast`; one of that name without it is someone else's and is never
touched (refused).  A write is a `GET` then a `POST` (no policy yet) or a JSON merge patch of the three fields with
the `resourceVersion` read (a concurrent change is a 409, retried from a fresh read); fields infercast does not
set (an active health check, circuit-breaker counts) are left as they are.  `server_dry_run` sends writes with
`dryRun=All`.  `Result.previous` is the threshold before (none when infercast created the policy: there was no
per-try timeout to put back; delete the policy to return to none).
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from infercast.actuators.actions import Action, SetBreakerThreshold
from infercast.actuators.admin import ActionRefused, Observation, PoolState, Result, fleet_pool_state, in_fleet_order
from infercast.actuators.backends.gateway import GatewayAdmin
from infercast.actuators.kube import CustomObjects, api_client, call, call_or_none
from infercast.config import FleetConfig

POLICIES = ("gateway.envoyproxy.io", "v1alpha1", "backendtrafficpolicies")
GATEWAY_GROUP = "gateway.networking.k8s.io"
MANAGED_BY = ("app.kubernetes.io/managed-by", "infercast")
_UNIT = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_DURATION = re.compile(r"^(?:[0-9]{1,5}(?:h|ms|m|s)){1,4}$")


def duration(seconds: float) -> str:
    """`seconds` as a Gateway API Duration (`^([0-9]{1,5}(h|m|s|ms)){1,4}$`), to the millisecond, at least 1ms."""
    ms = max(1, round(seconds * 1000))
    whole, rest = divmod(ms, 1000)
    if not whole:
        return f"{rest}ms"
    return f"{whole}s" + (f"{rest}ms" if rest else "")


def seconds_of(text: str) -> float:
    """A Gateway API Duration in seconds; ValueError when it is not one."""
    if not isinstance(text, str) or not _DURATION.match(text):
        raise ValueError(f"not a Gateway API duration: {text!r}")
    return sum(int(n) * _UNIT[u] for n, u in re.findall(r"([0-9]+)(h|ms|m|s)", text))


def policy_name(pool: str) -> str:
    """The default policy name for `pool` (a Kubernetes object name: lower case, no underscores)."""
    return "infercast-breaker-" + re.sub(r"[^a-z0-9.-]+", "-", pool.lower()).strip("-.")


class BreakerPolicies(CustomObjects):
    """`set_breaker_threshold` as one BackendTrafficPolicy per pool (module doc)."""

    name = "envoy-gateway-breakers"

    def __init__(self, api: Any, section: Any, fleet: FleetConfig) -> None:
        super().__init__(api, section, fleet)
        self.breakers = section.breakers  # infercast.config.EnvoyGatewayBreakers

    def policy(self, pool: str) -> str:
        return self.breakers.pools[pool].policy or policy_name(pool)

    def where(self, pool: str) -> str:
        return f"BackendTrafficPolicy {self.namespace}/{self.policy(pool)}"

    def spec(self, pool: str, seconds: float) -> dict[str, Any]:
        """The fields of the policy infercast owns, for a threshold of `seconds`."""
        target = self.breakers.pools[pool]
        ref = {"group": GATEWAY_GROUP, "kind": "HTTPRoute", "name": target.route}
        if target.rule is not None:
            ref["sectionName"] = target.rule
        b = self.breakers
        return {
            "targetRefs": [ref],
            "retry": {"numRetries": 0, "perRetry": {"timeout": duration(seconds)}},
            "healthCheck": {
                "passive": {
                    "consecutiveGatewayErrors": b.consecutive_gateway_errors,
                    "interval": duration(b.interval_seconds),
                    "baseEjectionTime": duration(b.ejection_seconds),
                    "maxEjectionPercent": b.max_ejection_percent,
                    "splitExternalLocalOriginErrors": False,
                }
            },
        }

    def manifest(self, pool: str, seconds: float) -> dict[str, Any]:
        """The whole policy as infercast creates it (what `POST` sends)."""
        return {
            "apiVersion": f"{POLICIES[0]}/{POLICIES[1]}",
            "kind": "BackendTrafficPolicy",
            "metadata": {"name": self.policy(pool), "namespace": self.namespace, "labels": dict([MANAGED_BY])},
            "spec": self.spec(pool, seconds),
        }

    # --- reading ---------------------------------------------------------------------------------------------
    def read(self, pool: str) -> dict[str, Any] | None:
        """The pool's policy, or None when there is none (or the CRD is not installed: its API answers 404)."""
        obj = call_or_none(self.custom.get_namespaced_custom_object, *POLICIES[:2], self.namespace, POLICIES[2],
                           self.policy(pool), timeout=self.timeout)  # fmt: skip
        if obj is not None and (not isinstance(obj, dict) or not isinstance(obj.get("spec"), dict)):
            raise ActionRefused(f"{self.where(pool)}: the API answered something that is not a BackendTrafficPolicy")
        return obj

    def threshold(self, obj: dict[str, Any] | None) -> float | None:
        """The per-try timeout a policy sets, in seconds; None: no policy, or none set."""
        text = ((((obj or {}).get("spec") or {}).get("retry") or {}).get("perRetry") or {}).get("timeout")
        if text is None:
            return None
        try:
            return seconds_of(text)
        except ValueError:
            return None  # not infercast's to interpret; observe() reports no threshold

    def thresholds(self) -> dict[str, float | None]:
        return {pool: self.threshold(self.read(pool)) for pool in self.breakers.pools}

    # --- writing ---------------------------------------------------------------------------------------------
    def apply(self, action: Action) -> Result:
        if not isinstance(action, SetBreakerThreshold):
            raise ActionRefused(f"the breaker policies only set breaker thresholds; {action.kind} goes elsewhere")
        if action.pool not in self.breakers.pools:
            raise ActionRefused(
                f"no BackendTrafficPolicy is mapped to pool {action.pool!r} (actuator.backend.breakers.pools has "
                f"{sorted(self.breakers.pools)})"
            )
        pool, where = action.pool, self.where(action.pool)
        want = self.spec(pool, action.seconds)
        shown = want["retry"]["perRetry"]["timeout"]
        note = self.dry_run_note
        obj = self.read(pool)
        if obj is None:
            call(self.custom.create_namespaced_custom_object, *POLICIES[:2], self.namespace, POLICIES[2],
                 self.manifest(pool, action.seconds), dry_run=self.dry_run, timeout=self.timeout)  # fmt: skip
            return Result("applied", f"{where}: created, per-try timeout {shown}{note}", None)
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if labels.get(MANAGED_BY[0]) != MANAGED_BY[1]:
            raise ActionRefused(
                f"{where} exists and is not infercast's (no label {MANAGED_BY[0]}={MANAGED_BY[1]}): name another "
                "policy in actuator.backend.breakers.pools, or label that one to hand it over"
            )
        before = self.threshold(obj)
        undo = SetBreakerThreshold(pool, before) if before is not None and 0 < before <= 600 else None
        spec = obj["spec"]
        have = {
            "targetRefs": spec.get("targetRefs"),
            "retry": spec.get("retry"),
            "healthCheck": {"passive": (spec.get("healthCheck") or {}).get("passive")},
        }
        if have == want:
            return Result("applied", f"{where}: already has per-try timeout {shown}", undo)
        body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "spec": want}
        call(self.custom.patch_namespaced_custom_object, *POLICIES[:2], self.namespace, POLICIES[2], self.policy(pool),
             body, dry_run=self.dry_run, timeout=self.timeout)  # fmt: skip
        was = ((spec.get("retry") or {}).get("perRetry") or {}).get("timeout") or "none"
        return Result("applied", f"{where}: per-try timeout {was} -> {shown}{note}", undo)


class EnvoyGatewayAdmin:
    """The gateway backend (HTTPRoute weights, autoscaler floors) with breaker thresholds as BackendTrafficPolicies."""

    name = "envoy-gateway"

    def __init__(self, gateway: GatewayAdmin | None, breakers: BreakerPolicies | None, fleet: FleetConfig) -> None:
        self.gateway = gateway
        self.breakers = breakers
        self.fleet = fleet

    @classmethod
    def from_config(cls, cfg: Any, fleet: FleetConfig) -> EnvoyGatewayAdmin:
        """From `infercast.config.EnvoyGatewayBackend`: one API client for every part."""
        api = api_client(cfg)
        gateway = GatewayAdmin.through(api, cfg, fleet) if cfg.httproute is not None or cfg.autoscalers else None
        breakers = None
        if cfg.breakers is not None:
            breakers = BreakerPolicies(api, cfg, fleet)
        return cls(gateway, breakers, fleet)

    def observe(self) -> Observation:
        states: dict[str, PoolState] = {}
        if self.gateway is not None:
            states = {p.name: p for p in self.gateway.observe().pools}
        if self.breakers is not None:
            for pool, seconds in self.breakers.thresholds().items():
                p = states.get(pool) or self._from_fleet(pool)
                states[pool] = dataclasses.replace(p, breaker_threshold_seconds=seconds)
        return in_fleet_order(states.values(), self.fleet)

    def apply(self, action: Action) -> Result:
        if isinstance(action, SetBreakerThreshold):
            if self.breakers is None:
                raise ActionRefused("set_breaker_threshold needs actuator.backend.breakers (none is configured)")
            return self.breakers.apply(action)
        if self.gateway is None:
            raise ActionRefused(
                f"{action.kind} needs actuator.backend.httproute or autoscalers (only breakers are configured)"
            )
        return self.gateway.apply(action)

    def _from_fleet(self, pool: str) -> PoolState:
        return fleet_pool_state(pool, self.fleet.pools[pool])
