"""Kubernetes as a `FleetAdmin`: a pool is a Deployment, and `scale_pool` sets its replicas.

Kubernetes knows how many replicas a pool has and how many are ready; it knows nothing of router weights, breaker
thresholds or admission limits, so those actions are `ActionRefused` ("needs a router backend").  What it does:

- `observe()`: `GET apps/v1 .../deployments/<name>` per mapped pool (`actuator.backend.deployments`): replicas from
  `spec.replicas`, ready from `status.readyReplicas`; weights are the fleet file's, breaker thresholds unknown.
- `scale_pool`: refused when an HPA (autoscaling/v2) or a KEDA `ScaledObject` in the namespace scales the
  Deployment (listed first, every time: an autoscaler owns that count and would fight a written one; the `gateway`
  backend moves its floor instead); otherwise `GET .../deployments/<name>/scale`, then a `PATCH` of the `scale`
  subresource carrying the `resourceVersion` it read, so a change made in between (a person, a rollout) is a 409
  Conflict, retried from a fresh read, rather than silently overwritten.  The previous replica count is the undo.
- `prewarm_pool`: scale a pool that is below its fleet-file `nodes` up to them (a cold-standby Deployment kept at 0).

Setting an absolute replica count is idempotent by nature, so no idempotency key is needed; the scale API cannot
check a fencing token, so the Lease elector's check before each tick is the guard.
"""

from __future__ import annotations

from typing import Any

from infercast.actuators.actions import Action, PrewarmPool, ScalePool
from infercast.actuators.admin import ActionRefused, Observation, PoolState, Result
from infercast.actuators.backends.autoscaler import autoscalers_targeting
from infercast.actuators.kube import api_client, call
from infercast.config import FleetConfig


class KubernetesAdmin:
    name = "kubernetes"

    def __init__(
        self, api: Any, namespace: str, deployments: dict[str, str], fleet: FleetConfig, timeout_seconds: float = 5.0
    ) -> None:
        from kubernetes import client

        self.api = api
        self.apps = client.AppsV1Api(api)
        self.namespace = namespace
        self.deployments = dict(deployments)
        self.fleet = fleet
        self.timeout = timeout_seconds

    @classmethod
    def from_config(cls, cfg, fleet: FleetConfig) -> KubernetesAdmin:
        """From `infercast.config.KubernetesBackend`."""
        return cls(api_client(cfg), cfg.namespace, cfg.deployments, fleet, cfg.timeout_seconds)

    def observe(self) -> Observation:
        import time

        pools = []
        for pool, name in self.deployments.items():
            d = call(self.apps.read_namespaced_deployment, name, self.namespace, timeout=self.timeout)
            pc = self.fleet.pools[pool]
            replicas = int(d.spec.replicas or 0)
            pools.append(
                PoolState(
                    name=pool,
                    version=pc.version,
                    replicas=replicas,
                    ready=int((d.status and d.status.ready_replicas) or 0),
                    weight=pc.weight,
                    standby=pc.standby and replicas == 0,
                    min_context_tokens=pc.min_context_tokens,
                    max_context_tokens=pc.max_context_tokens,
                )
            )
        return Observation(time.time(), tuple(pools))

    def apply(self, action: Action) -> Result:
        if not isinstance(action, ScalePool | PrewarmPool):
            raise ActionRefused(
                f"the kubernetes backend only scales Deployments (scale_pool, prewarm_pool); {action.kind} needs a "
                "router backend (http, redis or file)"
            )
        name = self.deployments.get(action.pool)
        if name is None:
            raise ActionRefused(
                f"no Deployment is mapped to pool {action.pool!r} (actuator.backend.deployments has "
                f"{sorted(self.deployments)})"
            )
        owners = autoscalers_targeting(self.api, self.namespace, "Deployment", name, self.timeout)
        if owners:
            raise ActionRefused(
                f"deployment {self.namespace}/{name} is scaled by {', '.join(owners)}: its replicas are the "
                "autoscaler's, and a count written here would be fought back within its sync period; use the gateway "
                "backend (actuator.backend.kind: gateway, autoscalers:) to raise the autoscaler's floor instead"
            )
        scale = call(self.apps.read_namespaced_deployment_scale, name, self.namespace, timeout=self.timeout)
        before = int(scale.spec.replicas or 0)
        # a pre-warm starts a standby pool's fleet-file nodes (and never scales a pool down)
        want = max(before, self.fleet.pools[action.pool].nodes) if isinstance(action, PrewarmPool) else action.replicas
        where = f"deployment {self.namespace}/{name}"
        if want == before:
            return Result("applied", f"{where} already has {want} replicas", ScalePool(action.pool, before))
        body = {"metadata": {"resourceVersion": scale.metadata.resource_version}, "spec": {"replicas": want}}
        done = call(self.apps.patch_namespaced_deployment_scale, name, self.namespace, body, timeout=self.timeout)
        return Result("applied", f"{where} scaled {before} -> {done.spec.replicas}", ScalePool(action.pool, before))
