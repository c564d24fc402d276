"""`actuator.backend` and `actuator.leader`: where the actuator's actions go (a router's admin API, Redis, a
file, Kubernetes Deployments, a gateway's HTTPRoute and autoscalers, Envoy Gateway, LiteLLM, HAProxy) and how one
replica leads (none, a Redis lease, a Kubernetes Lease)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from .base import MAX_ACTUATOR_SECONDS, PosFloat, PosInt, Strict, _check_url

EnvName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]


class HttpBackend(Strict):
    """A router's admin API as documented in docs/router-admin-api.md (the twin serves it too)."""

    kind: Literal["http"]
    url: str = Field(description="base URL of the router admin API, e.g. http://127.0.0.1:9410")
    token_env: EnvName | None = Field(
        "INFERCAST_ROUTER_TOKEN", description="environment variable holding the bearer token (unset: none sent)"
    )
    connect_timeout_seconds: PosFloat = 1.0
    timeout_seconds: PosFloat = Field(2.0, description="time to wait for an answer")

    _url = field_validator("url")(lambda v: _check_url(v, ("http://", "https://")))


class RedisBackend(Strict):
    """Router state in Redis: a hash per pool, a fleet hash and a pub/sub notice (docs/router-admin-api.md)."""

    kind: Literal["redis"]
    url: str = "redis://127.0.0.1:6379/0"
    prefix: str = Field("infercast", min_length=1, description="key prefix ({infercast}: one slot on a cluster)")
    timeout_seconds: PosFloat = 1.0

    _url = field_validator("url")(lambda v: _check_url(v, ("redis://", "rediss://", "unix://")))


class FileBackend(Strict):
    """A YAML or JSON document a hot-reloading router reads, replaced atomically on every change."""

    kind: Literal["file"]
    path: str = Field(min_length=1)
    format: Literal["yaml", "json"] | None = Field(None, description="default: from the file's suffix (.json or YAML)")


class KubernetesAccess(Strict):
    """How to reach the Kubernetes API: in-cluster service account, a kubeconfig, or an explicit URL + token."""

    namespace: str = Field("default", min_length=1)
    in_cluster: bool = Field(False, description="use the pod's service account")
    kubeconfig: str | None = Field(None, description="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    context: str | None = None
    api_url: str | None = Field(None, description="API server URL; overrides the kubeconfig (with token_env)")
    token_env: EnvName | None = Field(None, description="environment variable holding a bearer token for api_url")
    timeout_seconds: PosFloat = 5.0

    _url = field_validator("api_url")(lambda v: _check_url(v, ("http://", "https://")))


class KubernetesBackend(KubernetesAccess):
    """`scale_pool` scales a Deployment per pool (its `scale` subresource); other actions are refused."""

    kind: Literal["kubernetes"]
    deployments: dict[str, str] = Field(min_length=1, description="pool -> Deployment name in `namespace`")


#: a Kubernetes object name (RFC 1123 subdomain: what Deployments, HPAs, ScaledObjects and HTTPRoutes are named)
KubeName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]


class HTTPRouteTarget(Strict):
    """The Gateway API `HTTPRoute` whose `backendRefs` weights are the pools' routing weights."""

    name: KubeName = Field(description="the HTTPRoute's name, in the backend's namespace")
    backends: dict[str, KubeName] = Field(
        min_length=1, description="pool -> the name its backendRef carries (a Service, or an InferencePool)"
    )
    backend_kind: Literal["Service", "InferencePool"] = Field(
        "Service",
        description="what the backendRefs name: Service (core) or InferencePool (group inference.networking.k8s.io, "
        "the Gateway API Inference Extension)",
    )
    weight_scale: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        1000,
        description="backendRef weight = action weight x this, rounded (HTTPRoute weights are integers 0-1,000,000; "
        "an action weight is 0-1,000, so 1,000 keeps three decimals and never overflows)",
    )


class AutoscalerTarget(Strict):
    """The autoscaler that owns a pool's replica count: the actuator moves only its floor."""

    kind: Literal["HorizontalPodAutoscaler", "ScaledObject"] = Field(
        description="an autoscaling/v2 HorizontalPodAutoscaler (minReplicas) or a KEDA ScaledObject (minReplicaCount)"
    )
    name: KubeName = Field(description="its name, in the backend's namespace")


class GatewayBackend(KubernetesAccess):
    """The objects a cluster with a gateway and an autoscaler already has: pool weights as an HTTPRoute's backendRef
    weights, scale-ups and pre-warms as a raised autoscaler floor (never a replica count an autoscaler owns)."""

    kind: Literal["gateway"]
    httproute: HTTPRouteTarget | None = Field(None, description="where set_pool_weight goes (none: refused)")
    autoscalers: dict[str, AutoscalerTarget] = Field(
        default_factory=dict, description="pool -> its HPA or ScaledObject; scale_pool and prewarm_pool move its floor"
    )
    server_dry_run: bool = Field(
        False,
        description="send every write with dryRun=All: the API server validates and admits it, nothing is persisted "
        "(a rehearsal of active mode against the real cluster)",
    )

    @model_validator(mode="after")
    def _something(self) -> GatewayBackend:
        if self.httproute is None and not self.autoscalers:
            raise ValueError("give httproute, autoscalers or both: a gateway backend with neither can change nothing")
        return self


#: a Gateway API sectionName (an HTTPRoute rule's `name`)
SectionName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]


class BreakerPolicyTarget(Strict):
    """Where one pool's breaker goes on Envoy Gateway: a BackendTrafficPolicy attached to its HTTPRoute (rule)."""

    route: KubeName = Field(description="the HTTPRoute the pool is served through, in the backend's namespace")
    rule: SectionName | None = Field(
        None, description="the route rule's `name` that holds the pool's backendRef (none: the whole route)"
    )
    policy: KubeName | None = Field(None, description="the policy's name (default: infercast-breaker-<pool>)")


class EnvoyGatewayBreakers(Strict):
    """set_breaker_threshold as Envoy Gateway BackendTrafficPolicies (docs/actuator.md has the mapping): the
    threshold is the per-try timeout, and a host that times out (or fails) this many times in a row is ejected."""

    pools: dict[str, BreakerPolicyTarget] = Field(min_length=1, description="pool -> where its policy attaches")
    consecutive_gateway_errors: Annotated[int, Field(ge=1, le=1000)] = Field(
        5, description="passive health check: consecutive 502/503/504s (timeouts included) that eject a host"
    )
    interval_seconds: PosFloat = Field(10.0, description="how often ejection is judged (the twin's breaker window)")
    ejection_seconds: PosFloat = Field(30.0, description="base ejection time (the twin's breaker open time)")
    max_ejection_percent: Annotated[int, Field(ge=1, le=100)] = Field(
        10, description="at most this share of a pool's hosts ejected at once (Envoy Gateway's default)"
    )


class EnvoyGatewayBackend(GatewayBackend):
    """The gateway backend on a cluster whose gateway is Envoy Gateway: HTTPRoute weights and autoscaler floors as
    `gateway` has them, and breaker thresholds as BackendTrafficPolicies (`breakers`)."""

    kind: Literal["envoy-gateway"]  # type: ignore[assignment]
    breakers: EnvoyGatewayBreakers | None = Field(None, description="where set_breaker_threshold goes (none: refused)")

    @model_validator(mode="after")
    def _something(self) -> EnvoyGatewayBackend:
        if self.httproute is None and not self.autoscalers and self.breakers is None:
            raise ValueError("give httproute, autoscalers or breakers: a backend with none can change nothing")
        return self


class LiteLLMBackend(Strict):
    """A LiteLLM proxy's admin API: pool weights as deployments' `weight`, breaker thresholds as their
    `stream_timeout` (with `allowed_fails` / `cooldown_time` in its router_settings); docs/actuator.md."""

    kind: Literal["litellm"]
    url: str = Field(description="the proxy's base URL, e.g. http://litellm:4000")
    token_env: EnvName | None = Field(
        "LITELLM_MASTER_KEY", description="environment variable holding the proxy's master (admin) key"
    )
    deployments: dict[str, str] = Field(
        min_length=1, description="pool -> its deployment's model_info.id (GET /model/info lists them)"
    )
    allowed_fails: PosInt | None = Field(
        None, description="router_settings.allowed_fails kept with every breaker change (none: left as it is)"
    )
    cooldown_seconds: PosFloat | None = Field(
        None, description="router_settings.cooldown_time kept with every breaker change (none: left as it is)"
    )
    weight_scale: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        1000, description="deployment weight = action weight x this, rounded (LiteLLM's `weight` is an integer)"
    )
    timeout_seconds: PosFloat = 5.0

    _url = field_validator("url")(lambda v: _check_url(v, ("http://", "https://")))


class HAProxyBackend(Strict):
    """HAProxy through its runtime API (a UNIX socket at `level admin`): pool weights as its servers' weights,
    admission as each server's `maxconn`, `scale_pool` as drain; idempotency keys and the fencing token in two stick
    tables the proxy declares (actuators/backends/haproxy.py, docs/lab.md)."""

    kind: Literal["haproxy"]
    socket: str = Field(description="the runtime API's UNIX socket (haproxy.cfg: `stats socket PATH level admin`)")
    backend: str = Field("engines", min_length=1, description="the HAProxy backend that holds the pools' servers")
    servers: dict[str, tuple[str, ...]] = Field(
        min_length=1, description="pool -> its HAProxy server names in that backend"
    )
    full_concurrency: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        description="requests at which one engine's KV cache is full (its KV tokens / a mean request's): "
        "set_admission's memory_limit m sets each server's maxconn to max(1, floor(m x this))"
    )
    weight_scale: Annotated[float, Field(gt=0.0, le=256.0)] = Field(
        100.0, description="server weight = pool weight x this, rounded (HAProxy's weights are 0-256)"
    )
    timeout_seconds: PosFloat = 5.0

    @field_validator("servers")
    @classmethod
    def _servers(cls, v: dict[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
        seen: dict[str, str] = {}
        for pool, names in v.items():
            if not names:
                raise ValueError(f"pool {pool!r} names no server")
            for n in names:
                if not n or any(c.isspace() for c in n):
                    raise ValueError(f"pool {pool!r}: server name {n!r} must be non-empty without spaces")
                if n in seen:
                    raise ValueError(f"server {n!r} is in both pool {seen[n]!r} and pool {pool!r}")
                seen[n] = pool
        return v


Backend = Annotated[
    HttpBackend
    | RedisBackend
    | FileBackend
    | KubernetesBackend
    | GatewayBackend
    | EnvoyGatewayBackend
    | LiteLLMBackend
    | HAProxyBackend,
    Field(discriminator="kind"),
]


class SingleLeader(Strict):
    """One replica: it always leads (no fencing token)."""

    kind: Literal["single"] = "single"


class RedisLeader(Strict):
    """A Redis lease (SET NX PX, renewed by compare-and-set) with an INCR'd fencing token."""

    kind: Literal["redis"]
    url: str = "redis://127.0.0.1:6379/0"
    key: str = Field("infercast:actuator:leader", min_length=1)
    lease_seconds: Annotated[float, Field(ge=1.0, le=MAX_ACTUATOR_SECONDS)] = 15.0
    identity: str | None = Field(None, description="this replica's name (default: host:pid:random)")
    timeout_seconds: PosFloat = 1.0

    _url = field_validator("url")(lambda v: _check_url(v, ("redis://", "rediss://", "unix://")))


class KubernetesLeader(KubernetesAccess):
    """A `coordination.k8s.io/v1` Lease; its leaseTransitions is the fencing token."""

    kind: Literal["kubernetes"]
    name: str = Field("infercast-actuator", min_length=1)
    lease_seconds: Annotated[int, Field(ge=1, le=int(MAX_ACTUATOR_SECONDS))] = 15
    identity: str | None = Field(None, description="this replica's name (default: $POD_NAME or host:pid)")


Leader = Annotated[SingleLeader | RedisLeader | KubernetesLeader, Field(discriminator="kind")]
