"""The objects a Kubernetes cluster with a gateway and an autoscaler already runs, as one `FleetAdmin`
(`actuator.backend.kind: gateway`):

| action | goes to (config key) | module |
|---|---|---|
| `set_pool_weight` | an `HTTPRoute`'s backendRef weights (`httproute`) | `httproute.HTTPRouteWeights` |
| `scale_pool`, `prewarm_pool` | a pool's HPA or `ScaledObject` floor (`autoscalers`) | `autoscaler.AutoscalerFloors` |
| breakers, admission, rate limits | refused: the gateway's own policy objects or a router hold them | |

`observe()` reports the pools either part maps: replicas, ready and spare from the autoscaler (the fleet file's
when a pool has none), the weight from the route (the fleet file's when the route has no backendRef for it).  The
guardrails, advisory mode and the audit trail are the controller's and the daemon's, as for every backend
(docs/actuator.md); `server_dry_run` sends each write with `dryRun=All` on top.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from infercast.actuators.actions import Action, PrewarmPool, ScalePool, SetPoolBounds, SetPoolWeight
from infercast.actuators.admin import ActionRefused, Observation, PoolState, Result, in_fleet_order
from infercast.actuators.backends.autoscaler import AutoscalerFloors
from infercast.actuators.backends.httproute import HTTPRouteWeights
from infercast.actuators.kube import api_client
from infercast.config import FleetConfig


class GatewayAdmin:
    name = "gateway"

    def __init__(self, route: HTTPRouteWeights | None, floors: AutoscalerFloors | None, fleet: FleetConfig) -> None:
        self.route = route
        self.floors = floors
        self.fleet = fleet

    @classmethod
    def from_config(cls, cfg: Any, fleet: FleetConfig) -> GatewayAdmin:
        """From `infercast.config.GatewayBackend`: one API client for both parts."""
        return cls.through(api_client(cfg), cfg, fleet)

    @classmethod
    def through(cls, api: Any, cfg: Any, fleet: FleetConfig) -> GatewayAdmin:
        """The parts `cfg` maps (its `httproute`, its `autoscalers`), each talking to the cluster through `api`."""
        route = HTTPRouteWeights(api, cfg, fleet) if cfg.httproute is not None else None
        floors = AutoscalerFloors(api, cfg, fleet) if cfg.autoscalers else None
        return cls(route, floors, fleet)

    def observe(self) -> Observation:
        states: dict[str, PoolState] = {}
        if self.floors is not None:
            states = {p.name: p for p in self.floors.observe().pools}
        if self.route is not None:
            weights = self.route.weights()
            for p in self.route.states(weights):
                states.setdefault(p.name, p)
            states = {n: dataclasses.replace(p, weight=weights[n]) if n in weights else p for n, p in states.items()}
        return in_fleet_order(states.values(), self.fleet)

    def apply(self, action: Action) -> Result:
        if isinstance(action, SetPoolWeight):
            if self.route is None:
                raise ActionRefused("set_pool_weight needs actuator.backend.httproute (none is configured)")
            return self.route.apply(action)
        if isinstance(action, ScalePool | PrewarmPool | SetPoolBounds):
            if self.floors is None:
                raise ActionRefused(f"{action.kind} needs actuator.backend.autoscalers (none is configured)")
            return self.floors.apply(action)
        raise ActionRefused(
            f"the gateway backend sets HTTPRoute weights and autoscaler floors; {action.kind} needs a router backend "
            "(http, redis or file)"
        )
