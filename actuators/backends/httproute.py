"""Pool weights as a Gateway API `HTTPRoute`'s backendRef weights, as a `FleetAdmin`.

Gateway implementations (Envoy Gateway, Istio, kgateway, GKE, NGINX Gateway Fabric, and the Gateway API Inference
Extension's endpoint pickers behind them) split a rule's traffic across its `backendRefs` in proportion to their
`weight`, an integer 0-1,000,000 (gateway.networking.k8s.io/v1).  A pool is one backendRef, by name: a `Service`,
or an `InferencePool` (group `inference.networking.k8s.io`) where the Gateway API Inference Extension is installed
(`actuator.backend.httproute.backend_kind`).  The HTTPRoute is the gateway's own object, so no adapter runs in the
request path.

- `set_pool_weight(pool, w)`: every rule of the route that has the pool's backendRef gets weight
  `round(w x weight_scale)` on it (scale 1,000: weight 0.5 -> 500).  `Result.previous` is the weight it had (in
  the first such rule).  Refused: a pool the route has no backendRef for (the actuator never adds or removes a
  backend: that is the route owner's), a weight over 1,000,000 once scaled, and a change that would leave a rule
  with every backend at weight 0 (the gateway would answer every request that rule matches with a 500).
- `observe()`: each mapped pool's weight (its first rule's, `/ weight_scale`; a backendRef without `weight` is 1).
  A route knows nothing of replicas: they are the fleet file's (the gateway backend takes them from the
  autoscalers when it has them).

A write is a `GET` and a JSON merge patch of `spec.rules` carrying the `resourceVersion` read: a change made in
between (a person, GitOps, another controller) is a 409 Conflict, retried from a fresh read, never overwritten.
With `server_dry_run` it goes with `dryRun=All` (validated and admitted by the API server, the CRD's CEL rules
included, and not persisted).
"""

from __future__ import annotations

import copy
import time
from typing import Any

from infercast.actuators.actions import Action, SetPoolWeight
from infercast.actuators.admin import ActionRefused, Observation, PoolState, Result, fleet_pool_state
from infercast.actuators.kube import CustomObjects, call
from infercast.config import FleetConfig

ROUTES = ("gateway.networking.k8s.io", "v1", "httproutes")
INFERENCE_GROUPS = ("inference.networking.k8s.io", "inference.networking.x-k8s.io")
MAX_WEIGHT = 1_000_000


class HTTPRouteWeights(CustomObjects):
    name = "httproute"

    def __init__(self, api: Any, section: Any, fleet: FleetConfig) -> None:
        super().__init__(api, section, fleet)
        self.route = section.httproute  # infercast.config.HTTPRouteTarget

    @property
    def where(self) -> str:
        return f"HTTPRoute {self.namespace}/{self.route.name}"

    # --- FleetAdmin ------------------------------------------------------------------------------------------
    def observe(self) -> Observation:
        return Observation(time.time(), self.states(self.weights()))

    def states(self, weights: dict[str, float]) -> tuple[PoolState, ...]:
        """The mapped pools with `weights` (read from the route), replicas from the fleet file."""
        return tuple(
            fleet_pool_state(pool, self.fleet.pools[pool], weight=weights.get(pool, self.fleet.pools[pool].weight))
            for pool in self.route.backends
        )

    def weights(self) -> dict[str, float]:
        """pool -> its weight as the route has it (first rule with its backendRef), for the pools the route has."""
        rules = self._read()["spec"].get("rules") or []
        out = {}
        for pool in self.route.backends:
            for rule in rules:
                ref = next((r for r in rule.get("backendRefs") or [] if self._is(pool, r)), None)
                if ref is not None:
                    out[pool] = int(ref.get("weight", 1)) / self.route.weight_scale
                    break
        return out

    def apply(self, action: Action) -> Result:
        if not isinstance(action, SetPoolWeight):
            raise ActionRefused(
                f"the HTTPRoute backend only sets pool weights (set_pool_weight); {action.kind} needs an autoscaler "
                "or a router backend"
            )
        if action.pool not in self.route.backends:
            raise ActionRefused(
                f"no backendRef is mapped to pool {action.pool!r} (actuator.backend.httproute.backends has "
                f"{sorted(self.route.backends)})"
            )
        want = round(action.weight * self.route.weight_scale)
        if want > MAX_WEIGHT:
            raise ActionRefused(
                f"weight {action.weight:g} x weight_scale {self.route.weight_scale} = {want} is above an HTTPRoute "
                f"backendRef's {MAX_WEIGHT:,}"
            )
        obj = self._read()
        rules = copy.deepcopy(obj["spec"].get("rules") or [])
        before: int | None = None
        changed = []
        for i, rule in enumerate(rules):
            refs = rule.get("backendRefs") or []
            mine = [r for r in refs if self._is(action.pool, r)]
            if not mine:
                continue
            if before is None:
                before = int(mine[0].get("weight", 1))
            for r in mine:
                if int(r.get("weight", 1)) != want:
                    r["weight"] = want
                    changed.append(i)
            if all(int(r.get("weight", 1)) == 0 for r in refs):
                raise ActionRefused(
                    f"{self.where}: weight 0 for {action.pool!r} leaves rule {i} with every backend at weight 0 (the "
                    "gateway would answer all its requests with 500); shift weight to another backend first"
                )
        if before is None:
            raise ActionRefused(
                f"{self.where} has no backendRef {self._ref_text(action.pool)} for pool {action.pool!r}; the actuator "
                "changes weights, never a route's backends"
            )
        undo = SetPoolWeight(action.pool, before / self.route.weight_scale)
        if not changed:
            return Result("applied", f"{self.where}: {action.pool} already has weight {want}", undo)
        body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "spec": {"rules": rules}}
        call(self.custom.patch_namespaced_custom_object, *ROUTES[:2], self.namespace, ROUTES[2], self.route.name, body,
             dry_run=self.dry_run, timeout=self.timeout)  # fmt: skip
        note = self.dry_run_note
        rules_text = ", ".join(str(i) for i in sorted(set(changed)))
        return Result(
            "applied",
            f"{self.where}: {self._ref_text(action.pool)} weight {before} -> {want} (rules {rules_text}){note}",
            undo,
        )

    # --- the route -------------------------------------------------------------------------------------------
    def _read(self) -> dict[str, Any]:
        obj = call(self.custom.get_namespaced_custom_object, *ROUTES[:2], self.namespace, ROUTES[2], self.route.name,
                   timeout=self.timeout)  # fmt: skip
        if not isinstance(obj, dict) or not isinstance(obj.get("spec"), dict):
            raise ActionRefused(f"{self.where}: the API answered something that is not an HTTPRoute")
        return obj

    def _is(self, pool: str, ref: dict[str, Any]) -> bool:
        """Whether backendRef `ref` is `pool`'s: its name, kind and group, in the route's own namespace."""
        if ref.get("name") != self.route.backends[pool]:
            return False
        if ref.get("namespace") not in (None, self.namespace):
            return False
        kind, group = ref.get("kind", "Service"), ref.get("group", "")
        if self.route.backend_kind == "Service":
            return kind == "Service" and group in ("", "core")
        return kind == "InferencePool" and group in INFERENCE_GROUPS

    def _ref_text(self, pool: str) -> str:
        return f"{self.route.backend_kind}/{self.route.backends[pool]}"
