"""Backends of `infercast.actuators.admin.FleetAdmin`: where the actuator's actions land.

`build_backend(cfg)` makes the one `actuator.backend` of a fleet file selects (each backend's module is imported
only when chosen, so the Kubernetes client or redis are needed only where used):

| `actuator.backend.kind` | module | reaches |
|---|---|---|
| `http` | `router_http.HttpAdmin` | a router's admin API (docs/router-admin-api.md; the twin serves it) |
| `redis` | `redis.RedisAdmin` | router state shared in Redis (hash per pool, fleet hash, pub/sub notice) |
| `file` | `file.FileAdmin` | a YAML/JSON file a hot-reloading router reads (atomic replace) |
| `kubernetes` | `k8s.KubernetesAdmin` | Deployments' `scale` subresource (refused under an HPA or ScaledObject) |
| `gateway` | `gateway.GatewayAdmin` | an `HTTPRoute`'s backendRef weights, HPA / KEDA `ScaledObject` floors |
| `envoy-gateway` | `envoy_gateway.EnvoyGatewayAdmin` | `gateway`'s, and breakers as `BackendTrafficPolicy` objects |
| `litellm` | `litellm.LiteLLMAdmin` | a LiteLLM proxy's admin API: deployments' `weight`, breakers, router_settings |
| `haproxy` | `haproxy.HAProxyAdmin` | HAProxy's runtime API: server weights, `maxconn` (admission), drain |

`twin.TwinAdmin` (the in-process twin) is built by the simulated driver, not from a fleet file.
"""

from __future__ import annotations

from infercast.actuators.admin import FleetAdmin
from infercast.config import ConfigError, FleetConfig


def build_backend(cfg: FleetConfig) -> FleetAdmin:
    """The backend `cfg.actuator.backend` describes; ConfigError naming the key when there is none."""
    b = cfg.actuator.backend
    if b is None:
        raise ConfigError(
            "actuator.backend: required to run the actuator (kind: http, redis, file, kubernetes, gateway, "
            "envoy-gateway, litellm or haproxy)"
        )
    if b.kind == "http":
        from infercast.actuators.backends.router_http import HttpAdmin

        return HttpAdmin.from_config(b)
    if b.kind == "redis":
        from infercast.actuators.backends.redis import RedisAdmin

        return RedisAdmin.from_config(b)
    if b.kind == "file":
        from infercast.actuators.backends.file import FileAdmin

        return FileAdmin.from_config(b, cfg)
    if b.kind == "gateway":
        from infercast.actuators.backends.gateway import GatewayAdmin

        return GatewayAdmin.from_config(b, cfg)
    if b.kind == "envoy-gateway":
        from infercast.actuators.backends.envoy_gateway import EnvoyGatewayAdmin

        return EnvoyGatewayAdmin.from_config(b, cfg)
    if b.kind == "litellm":
        from infercast.actuators.backends.litellm import LiteLLMAdmin

        return LiteLLMAdmin.from_config(b, cfg)
    if b.kind == "haproxy":
        from infercast.actuators.backends.haproxy import HAProxyAdmin

        return HAProxyAdmin.from_config(b, cfg)
    from infercast.actuators.backends.k8s import KubernetesAdmin

    return KubernetesAdmin.from_config(b, cfg)
