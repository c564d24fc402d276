"""`FleetConfig`: the whole fleet file, its sections, and the checks that span sections (a pool's version, a
failover or an autoscaler naming a pool that exists, a backend mapping known pools)."""

from __future__ import annotations

from pydantic import Field, model_validator

from .actuator import ActuatorConfig, GuardrailConfig, PolicyConfig
from .alerts import AlertingConfig, SloConfig
from .backends import EnvoyGatewayBackend, GatewayBackend, HAProxyBackend, KubernetesBackend, LiteLLMBackend
from .base import GIB, Strict
from .exporter import ExporterConfig, MetricsConfig
from .pools import PoolConfig, TargetConfig, VersionConfig
from .predictor import Event, PredictorConfig
from .protections import HPA_SCALE_DOWN_STABILIZATION_SECONDS, Protections
from .router import RouterConfig
from .scenario import ScenarioConfig, TwinConfig
from .thresholds import Thresholds


class FleetConfig(Strict):
    name: str = "fleet"
    versions: dict[str, VersionConfig] = Field(min_length=1)
    pools: dict[str, PoolConfig] = Field(min_length=1)
    targets: tuple[TargetConfig, ...] = ()
    thresholds: Thresholds = Thresholds()
    router: RouterConfig = RouterConfig()
    events: tuple[Event, ...] = ()
    metrics: MetricsConfig = MetricsConfig()
    exporter: ExporterConfig = ExporterConfig()
    predictor: PredictorConfig = PredictorConfig()
    scenario: ScenarioConfig | None = None
    twin: TwinConfig = TwinConfig()
    protections: Protections = Protections()
    policy: PolicyConfig = PolicyConfig()
    guardrails: GuardrailConfig = GuardrailConfig()
    actuator: ActuatorConfig = ActuatorConfig()
    slo: SloConfig = SloConfig()
    alerting: AlertingConfig = AlertingConfig()

    @model_validator(mode="after")
    def _references(self) -> FleetConfig:
        """Every name one section gives of another's (a pool, a version, a stream) must exist there; all problems
        are reported at once, in the order of the file's sections."""
        for name, v in self.versions.items():
            v.model._where = f"versions.{name}.model"  # a private attribute: the refusal names the version
        problems = [
            f"slo.pools: unknown pool {pool!r} (have {sorted(self.pools)})"
            for pool in self.slo.pools
            if pool not in self.pools
        ]
        problems += self._pool_problems()
        problems += self._target_problems()
        problems += self._protection_problems()
        problems += self._backend_problems()
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _pool_problems(self) -> list[str]:
        problems = []
        for name, pool in self.pools.items():
            if pool.version not in self.versions:
                problems.append(
                    f"pools.{name}.version: unknown version {pool.version!r} (have {sorted(self.versions)})"
                )
            for f in pool.failover:
                if f not in self.pools:
                    problems.append(f"pools.{name}.failover: unknown pool {f!r}")
                elif f == name:
                    problems.append(f"pools.{name}.failover: a pool cannot fail over to itself")
            v = self.versions.get(pool.version)
            # only a shape the file (or the known-model table) gives can be checked; a real fleet needs none
            if (
                v
                and v.model.weights_gb is not None
                and int(v.model.weights_gb * GIB) >= pool.node_memory_bytes * pool.memory_utilization
            ):
                problems.append(
                    f"pools.{name}: weights of {pool.version} ({v.model.weights_gb} GiB) leave no room for a KV cache "
                    f"in {pool.gpus_per_node} x {pool.gpu.memory_gb} GiB"
                )
        return problems

    def _target_problems(self) -> list[str]:
        problems = []
        seen = set()
        for i, t in enumerate(self.targets):
            if t.name in seen:
                problems.append(f"targets.{i}.name: duplicate target name {t.name!r}")
            seen.add(t.name)
            if t.pool is not None and t.pool not in self.pools:
                problems.append(f"targets.{i}.pool: unknown pool {t.pool!r}")
            if t.version is not None and t.version not in self.versions:
                problems.append(f"targets.{i}.version: unknown version {t.version!r}")
        return problems

    def _backend_problems(self) -> list[str]:
        """The pools the actuator's backend maps (Deployments, servers, autoscalers, routes, breakers) exist."""
        backend = self.actuator.backend
        mapped: list[tuple[str, str]] = []
        if isinstance(backend, KubernetesBackend | LiteLLMBackend):
            mapped += [("deployments", p) for p in backend.deployments]
        if isinstance(backend, HAProxyBackend):
            mapped += [("servers", p) for p in backend.servers]
        if isinstance(backend, GatewayBackend):
            mapped += [("autoscalers", p) for p in backend.autoscalers]
            mapped += [("httproute.backends", p) for p in (backend.httproute.backends if backend.httproute else {})]
            if isinstance(backend, EnvoyGatewayBackend) and backend.breakers is not None:
                mapped += [("breakers.pools", p) for p in backend.breakers.pools]
        return [
            f"actuator.backend.{where}: unknown pool {pool!r} (have {sorted(self.pools)})"
            for where, pool in mapped
            if pool not in self.pools
        ]

    def _protection_problems(self) -> list[str]:
        pr = self.protections
        problems = []
        pools = set(self.pools)
        cp = pr.context_pools
        if cp is not None:
            base = self.pools.get(cp.pool)
            if base is None:
                problems.append(f"protections.context_pools.pool: unknown pool {cp.pool!r}")
            elif base.standby or cp.long_nodes >= base.nodes:
                problems.append(
                    f"protections.context_pools: {cp.pool!r} must be a serving pool with more than long_nodes nodes"
                )
            for key in ("short_pool", "long_pool"):
                name = getattr(cp, key)
                if name in self.pools:
                    problems.append(f"protections.context_pools.{key}: {name!r} is already a pool")
            pools = (pools - {cp.pool}) | {cp.short_pool, cp.long_pool}
        for name in pr.cold_standby:
            if name not in self.pools:
                problems.append(f"protections.cold_standby: unknown pool {name!r}")
        a = pr.autoscaler
        if a is not None:
            for name in a.pools:
                if name not in pools:
                    problems.append(f"protections.autoscaler.pools: unknown pool {name!r} (have {sorted(pools)})")
            res = self.pools.get(a.reservoir)
            if res is None or not res.standby:
                problems.append(f"protections.autoscaler.reservoir: {a.reservoir!r} must be a standby pool")
        if self.scenario is not None:
            named = {"quota_lanes": list(pr.quota_lanes), "drf_tenants": list(pr.drf_tenants)}
            if pr.length_gates is not None:
                named["length_gates.long_text_streams"] = list(pr.length_gates.long_text_streams)
            if pr.api_key_tiers is not None:
                named["api_key_tiers.streams"] = list(pr.api_key_tiers.streams)
            for where, names in named.items():
                for name in names:
                    if name not in self.scenario.stream_names:
                        problems.append(
                            f"protections.{where}: unknown stream {name!r} (have {list(self.scenario.stream_names)})"
                        )
        return problems

    def pool_version(self, pool: str) -> VersionConfig:
        return self.versions[self.pools[pool].version]

    @property
    def dwell_seconds(self) -> float:
        """How long a setting must stand before it is moved back: the autoscaler's scale-down stabilization window
        (Kubernetes' own dwell for a replica count; its default without an autoscaler).  The actuator's reserve holds
        a node that long, its policy holds a tightening that long before relaxing it, and the flap count (a setting
        moved one way, back, and the first way again within it) is measured against it."""
        a = self.protections.autoscaler
        return a.scale_down_stabilization_seconds if a is not None else HPA_SCALE_DOWN_STABILIZATION_SECONDS

    def require_twin_shapes(self) -> None:
        """Raise ConfigError unless every version has the model shape the twin needs (given, or a known model's).
        The twin's engines ask for it when built; a trace run that sizes its fleet first is refused here."""
        for v in self.versions.values():
            v.model.require_shape()
