"""The fleet file: one validated YAML document describes pools, model versions, targets and thresholds.

Every service (`exporter`, `predictor`, `actuator`), the twin and the demo read the same file.  Validation is
strict (unknown keys are errors) and happens before anything starts: `load_config` either returns a complete
`FleetConfig` or raises `ConfigError` whose message names each bad key and what is wrong with it.

Durations are `*_seconds`, sizes `*_bytes` or `*_gb` (GiB, as GPU cards are sold), ratios 0-1.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Annotated, Any, Literal, get_args, get_origin

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, field_validator, model_validator

from infercast.models import SHAPE_FIELDS, known_model_names, known_shape

GIB = 1024**3
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "fp8": 1, "int8": 1}

Ratio = Annotated[float, Field(ge=0.0, le=1.0)]
PosFloat = Annotated[float, Field(gt=0.0)]
PosInt = Annotated[int, Field(gt=0)]
#: the most nodes one pool may have (the twin builds every node: 100,000,000 grew memory 16 MB/s before this bound)
MAX_NODES_PER_POOL = 10_000
# Every count and rate has a maximum (issue 24 item 7): a value past it is a ConfigError naming the key and the bound
# ("Input should be less than or equal to ..."), rc 2.  docs/security.md lists them.
#: requests per second: a traffic phase, the router's and a lane's token bucket, an announced event
MAX_RPS = 1_000_000.0
#: tokens of one request: context limits and splits, length distributions, the client's max_tokens, prefill chunks
MAX_TOKENS = 10_000_000
#: requests in one engine batch
MAX_BATCH = 100_000
#: a scenario's length, seconds (7 days)
MAX_SCENARIO_SECONDS = 7 * 86_400.0
#: phases of one stream, streams of a scenario, faults of a scenario
MAX_PHASES, MAX_STREAMS, MAX_FAULTS = 10_000, 100, 10_000
#: changes per rolling hour the guardrails may allow (one a second)
MAX_CHANGE_BUDGET_PER_HOUR = 3_600
# Every duration and count has an upper bound a human would accept (issue 36 item 5): `.inf`, `1e308` or `1e300`
# seconds crashed the daemon at start or left it "active" with every scheduled run failing.  The actuator's own
# timings have tight bounds of their own (an hour); any other `*_seconds` at most a year, any other number at most
# MAX_NUMBER, every number finite: `check_bounds` checks the whole validated file, naming the key.
#: the most any duration in the fleet file may be (a year), seconds
MAX_DURATION_SECONDS = 366 * 86_400.0
#: the actuator's loop interval, misfire grace and leader lease: an hour at most
MAX_ACTUATOR_SECONDS = 3_600.0
#: any other number (a count, a factor, a size): finite and at most this (bytes: MAX_BYTES; a seed: any integer)
MAX_NUMBER = 1e9
MAX_BYTES = 2**40
#: a fleet file is refused above this size before it is parsed (a 50 MB file of 700k keys took minutes and GBs)
MAX_FLEET_FILE_BYTES = 1024 * 1024
#: and nested deeper than this (a fleet file is a handful of levels deep): refused as it is read, not after
MAX_FLEET_FILE_DEPTH = 64
Rps = Annotated[float, Field(gt=0.0, le=MAX_RPS)]
Tokens = Annotated[int, Field(gt=0, le=MAX_TOKENS)]


class ConfigError(ValueError):
    """A fleet file that cannot be used; the message lists every problem as `key.path: problem`."""


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ModelShape(Strict):
    """The served model, and for the twin its transformer shape (KV bytes per token follow from it).

    A real fleet needs only `name`.  The shape fields are the twin's (and the exporter's KV capacity figure's):
    a known model (`infercast/models.py`) fills in what the fleet file leaves out; for any other model they stay
    unset until a fleet file gives them, and the twin refuses to simulate the version (`require_shape`)."""

    name: str = Field(description="served model name, e.g. chat-v4 (vLLM's --served-model-name)")
    layers: PosInt | None = Field(None, description="twin: transformer layers (config.json num_hidden_layers)")
    kv_heads: PosInt | None = Field(None, description="twin: KV heads (config.json num_key_value_heads)")
    head_dim: PosInt | None = Field(None, description="twin: size of one attention head")
    dtype: Literal["float32", "float16", "bfloat16", "fp8", "int8"] = "float16"
    weights_gb: PosFloat | None = Field(None, description="twin: weights resident per node, GiB")
    # where this shape sits in the fleet file, for the refusal's message; FleetConfig sets it
    _where: str = PrivateAttr("versions.<version>.model")

    @model_validator(mode="before")
    @classmethod
    def _fill_known(cls, data: Any) -> Any:
        if isinstance(data, dict) and isinstance(data.get("name"), str):
            shape = known_shape(data["name"])
            if shape is not None:  # what the file gives wins; the published figures fill the rest
                return {**shape, **{k: v for k, v in data.items() if v is not None}}
        return data

    @property
    def missing_shape(self) -> tuple[str, ...]:
        """The shape fields the twin needs that neither the fleet file nor the known-model table gives."""
        return tuple(f for f in SHAPE_FIELDS if getattr(self, f) is None)

    def require_shape(self) -> None:
        """Raise ConfigError naming this model's place in the fleet file, what is missing and the known models."""
        missing = self.missing_shape
        if missing:
            raise ConfigError(
                f"{self._where}: the twin needs the model's shape: {', '.join(missing)} "
                f"{'is' if len(missing) == 1 else 'are'} not given and {self.name!r} is not a known model; give "
                f"them under {self._where}, or name a known model ({', '.join(known_model_names())})"
            )

    @property
    def kv_bytes_per_token(self) -> int:
        self.require_shape()
        assert self.layers and self.kv_heads and self.head_dim  # for the type checker: require_shape raised
        # K and V, per layer, per KV head, per head dim.
        return 2 * self.layers * self.kv_heads * self.head_dim * DTYPE_BYTES[self.dtype]

    @property
    def weights_bytes(self) -> int:
        self.require_shape()
        assert self.weights_gb is not None
        return int(self.weights_gb * GIB)


class Batcher(Strict):
    kind: Literal["dynamic", "fixed"]
    max_batch: Annotated[int, Field(gt=0, le=MAX_BATCH)] = Field(
        description="dynamic: merge up to this many; fixed: exactly this many per batch"
    )
    timeout_seconds: PosFloat = Field(
        2.0, description="a batch older than this times out (dynamic: partial commit + retry; fixed: dropped)"
    )


#: vLLM's default --max-num-seqs (the engine-arguments reference: "Maximum number of sequences per iteration",
#: 256); a version that names no batcher is a vLLM engine at its defaults
VLLM_DEFAULT_MAX_NUM_SEQS = 256


class VersionConfig(Strict):
    model: ModelShape
    kv_manager: Literal["paged", "contiguous"] = Field("paged", description="twin: vLLM's PagedAttention by default")
    block_size_tokens: PosInt = 16
    max_model_len: PosInt = 32768
    batcher: Batcher = Field(
        Batcher(kind="dynamic", max_batch=VLLM_DEFAULT_MAX_NUM_SEQS),
        description="continuous batching up to vLLM's default max_num_seqs unless given",
    )
    peak_throughput_factor: Annotated[float, Field(gt=0.0, le=1.0)] = Field(
        1.0, description="peak throughput relative to the fastest version (seed 000: v3.5 is 0.56 of v4)"
    )


class GpuSpec(Strict):
    name: str = "A100-40GB"
    memory_gb: PosFloat = 40.0


EngineKind = Literal["vllm", "sglang", "tgi", "trtllm"]
#: `metrics.source`: where the per-engine serving figures are read from (MetricsConfig)
MetricsSource = Literal["exporter", "engines"]


class PoolEngines(Strict):
    """Where Prometheus finds a pool's engines, for the generated PodMonitors and scrape configs
    (infercast/tools/k8s/scrape.py): the engine kind (its metric names, port and path), and on Kubernetes the labels
    of its pods.  Everything has a default, so a fleet file needs none of it."""

    kind: EngineKind = Field("vllm", description="the serving engine: vllm, sglang, tgi or trtllm (Triton)")
    pod_labels: dict[str, str] | None = Field(
        None,
        description="Kubernetes label selector (matchLabels) of the pool's engine pods; default "
        "{infercast.io/pool: <pool name>}.  A pod labelled infercast.io/version: <version> is that version "
        "(a canary); otherwise the pool's.",
    )
    port: Annotated[int, Field(gt=0, lt=65536)] | str | None = Field(
        None,
        description="the engine's metrics port: a number or the container port's name; default the engine's own "
        "(vllm 8000, sglang 30000, tgi 80, trtllm 8002)",
    )
    path: str = Field("/metrics", description="the metrics path")
    max_batch: Annotated[int, Field(gt=0, le=MAX_BATCH)] | None = Field(
        None,
        description="the engines' maximum batch (vLLM --max-num-seqs, SGLang --max-running-requests, TGI "
        "--max-batch-size) for the batch saturation rule; default the version's batcher.max_batch.  Triton "
        "exports its own.",
    )


class PoolConfig(Strict):
    version: str
    nodes: Annotated[int, Field(gt=0, le=MAX_NODES_PER_POOL)]
    gpus_per_node: PosInt = 4
    gpu: GpuSpec = GpuSpec()
    weight: Annotated[float, Field(ge=0.0)] = 1.0
    min_context_tokens: Annotated[int, Field(ge=0, le=MAX_TOKENS)] = 0
    max_context_tokens: Tokens | None = Field(
        None, description="requests longer than this are routed elsewhere (context-length pools)"
    )
    failover: tuple[str, ...] = Field((), description="pools to degrade to, in order")
    standby: bool = Field(False, description="cold standby: not routed to until pre-warmed or failed over to")
    memory_utilization: Ratio = Field(0.95, description="share of GPU memory the engine may use")
    engines: PoolEngines = Field(
        PoolEngines(), description="how Prometheus finds the pool's engines (PodMonitors, scrape configs)"
    )

    @property
    def node_memory_bytes(self) -> int:
        return int(self.gpus_per_node * self.gpu.memory_gb * GIB)


TargetKind = Literal["vllm", "sglang", "tgi", "trtllm", "dcgm", "twin"]


class TargetConfig(Strict):
    name: str
    kind: TargetKind
    url: str | None = Field(None, description="http(s) URL of /metrics; for kind twin, omitted (in-process)")
    pool: str | None = None
    version: str | None = None
    node: str | None = Field(None, description="node name for GPU targets (dcgm)")
    max_batch: Annotated[int, Field(gt=0, le=MAX_BATCH)] | None = Field(
        None, description="max batch size, for engines that do not export it"
    )

    @model_validator(mode="after")
    def _url_or_twin(self) -> TargetConfig:
        if self.kind != "twin" and not self.url:
            raise ValueError(f"target {self.name!r} of kind {self.kind} needs a url")
        if self.url and not self.url.startswith(("http://", "https://")):
            raise ValueError(f"target {self.name!r}: url must start with http:// or https://")
        return self


class Thresholds(Strict):
    """Policy numbers from the seeds' incident reports: one place for every threshold."""

    kv_forecast_trigger: Ratio = 0.75
    kv_forecast_for_seconds: Annotated[float, Field(ge=0)] = Field(
        30.0,
        description="the predictive alert's `for:`: the upper band must stay over the trigger this long "
        "(30 s = three consecutive forecasts at the 15 s tick); chosen by bench/tune_alarm.py on unscored twin runs",
    )
    kv_forecast_hysteresis: Annotated[float, Field(ge=0, lt=0.5)] = Field(
        0.0,
        description="once firing, the predictive alert stays until the upper band is below the trigger minus this "
        "(0: bench/tune_alarm.py found 0.03 no better and 0.05 or more costing lead on the tuning runs)",
    )
    memory_breaker: Ratio = 0.80
    fragmentation_release: Ratio = 0.25
    fragmentation_warning: Ratio = 0.20
    fragmentation_green: Ratio = 0.15
    context_reject_tokens: PosInt = 24_000
    timeout_base_seconds: PosFloat = 0.2
    timeout_context_tokens: PosInt = 4_000
    timeout_qps_unit: PosFloat = 3_000.0
    timeout_max_load_factor: PosFloat = 3.0
    gpu_temperature_celsius: PosFloat = 85.0
    gpu_utilization_breaker: Ratio = 0.80
    queue_saturated: PosInt = 5
    # scoring of the health dimensions and avalanche risk (exporters/derive.py)
    allocation_failures_bad_per_request_second: PosFloat = Field(
        0.01, description="allocation failures per second per running request at which that dimension scores 0"
    )
    queue_bad_factor: PosFloat = Field(10.0, description="queue depth scores 0 at this many times queue_saturated")
    router_share_bad: Ratio = Field(0.05, description="share of timeouts, errors or degradations that scores 0")
    gpu_temperature_margin_celsius: PosFloat = Field(
        15.0, description="gpu_temperature starts losing points this far below gpu_temperature_celsius"
    )
    nodes_down_full_pressure: Ratio = Field(
        0.25, description="a pool with this share of its serving targets down is at full avalanche pressure"
    )


def _check_priority_shares(v: dict[str, float]) -> dict[str, float]:
    unknown = set(v) - {"urgent", "normal", "low"}
    if unknown:
        raise ValueError(f"unknown priority classes {sorted(unknown)}; use urgent, normal, low")
    if abs(sum(v.values()) - 1.0) > 1e-6:
        raise ValueError(f"priority shares must sum to 1, got {sum(v.values()):.3f}")
    return v


class RetryPolicy(Strict):
    max_attempts: PosInt = 3
    backoff_seconds: PosFloat = 1.0
    backoff_multiplier: Annotated[float, Field(ge=1.0)] = 2.0


class RouterConfig(Strict):
    cold_start_seconds: PosFloat = 90.0
    health_check_interval_seconds: PosFloat = 5.0
    health_check_failures: PosInt = 3
    breaker_latency_seconds: PosFloat = Field(0.2, description="static breaker: the seed's global 200 ms")
    retry: RetryPolicy = RetryPolicy()
    priority_shares: dict[str, Ratio] = Field(
        default_factory=lambda: {"urgent": 0.2, "normal": 0.6, "low": 0.2},
        description="share of traffic per priority class",
    )
    client_timeout_seconds: PosFloat = 30.0
    rate_limit_rps: Rps | None = Field(None, description="token-bucket admission at the router (None = off)")
    rate_limit_burst: Rps | None = Field(None, description="token-bucket depth (defaults to one second of rate)")
    rate_limit_queue_seconds: Annotated[float, Field(ge=0.0)] = Field(
        0.0, description="requests over the rate wait at the gateway up to this long before a 429 (0 = reject at once)"
    )
    breaker_window_seconds: PosFloat = 10.0
    breaker_open_seconds: PosFloat = 30.0
    breaker_error_ratio: Ratio = 0.5
    breaker_min_requests: PosInt = 20
    slo_seconds: dict[str, PosFloat] = Field(
        default_factory=lambda: {"urgent": 1.0, "normal": 5.0, "low": 30.0},
        description="time-to-first-token objective per priority (goodput counts requests within it)",
    )

    @field_validator("priority_shares")
    @classmethod
    def _shares(cls, v: dict[str, float]) -> dict[str, float]:
        return _check_priority_shares(v)


class Bucket(Strict):
    """A token bucket at the gateway (seed 004's 基础限流)."""

    rps: Rps
    burst: Annotated[float, Field(gt=0.0, le=5 * MAX_RPS)] | None = Field(
        None, description="bucket depth; default 5 x rps (seed 004: 令牌累积上限 = 常规速率 × 5)"
    )
    queue_seconds: Annotated[float, Field(ge=0.0)] = Field(
        0.0, description="requests over the rate wait this long at the gateway before a 429 (0: refuse at once)"
    )

    @property
    def depth(self) -> float:
        return self.burst if self.burst is not None else 5.0 * self.rps


class ContextPools(Strict):
    """Seed 000's version isolation (版本隔离部署): one serving pool becomes a short-context and a long-context pool."""

    pool: str = Field(description="the serving pool whose nodes are split")
    split_tokens: Tokens = Field(8192, description="prompts longer than this go to the long-context pool")
    long_nodes: Annotated[int, Field(gt=0, le=MAX_NODES_PER_POOL)] = Field(
        description="how many of the pool's nodes serve long contexts"
    )
    short_pool: str = Field(description="name of the short-context pool")
    long_pool: str = Field(description="name of the long-context pool")


class Autoscaler(Strict):
    """An autoscaler on current metrics with Kubernetes HPA's defaults (15 s sync, 10% tolerance, no scale-up
    stabilisation, 300 s scale-down stabilisation).  It starts nodes of a standby pool of the same version, which
    pay the cold start before they serve."""

    pools: tuple[str, ...] = Field(min_length=1, description="serving pools it scales (after any context split)")
    reservoir: str = Field(description="a standby pool of the same version whose nodes it may start")
    kv_target: Ratio = Field(0.6, description="mean KV-cache usage per node it aims for (llm-d's KEDA threshold)")
    waiting_target: PosFloat = Field(5.0, description="waiting requests per node it aims for (GIE's saturation)")
    sync_seconds: PosFloat = 15.0
    tolerance: Ratio = 0.1
    scale_up_stabilization_seconds: Annotated[float, Field(ge=0.0)] = Field(
        0.0, description="a scale-up goes only as high as the lowest recommendation of this window (HPA's default 0)"
    )
    scale_down_stabilization_seconds: Annotated[float, Field(ge=0.0)] = Field(
        300.0, description="a scale-down goes only as low as the highest recommendation of this window (HPA's 300 s)"
    )


class Tiers(Strict):
    """Seed 004's three tiers (分级配额): urgent at once, normal queued, low when idle."""

    normal_queue_seconds: Annotated[float, Field(ge=0.0)] = Field(
        5.0, description="normal requests over the rate wait this long at the gateway (urgent ones never wait)"
    )
    low_queue_seconds: Annotated[float, Field(ge=0.0)] = Field(30.0, description="low-priority requests wait this long")
    low_idle_memory: Ratio = Field(
        0.6,
        description="a node starts low-priority work only below this GPU memory ratio and with nothing else waiting",
    )


class LengthGates(Strict):
    """Seed 004's length gates at the gateway (输入长度拦截, 分级拦截): a prompt over `retry_above_tokens` gets a 429 on
    its first attempt and the gateway keeps its metadata, so its retry is admitted (the gate spreads mid-length
    prompts over the client's backoff); one over `drop_above_tokens` is dropped (a 400, never retried), except from
    the streams of the VIP long-text lane (对 VIP 客户开放长文本通道), whose prompts pass both gates."""

    retry_above_tokens: Tokens = Field(1024, description="a longer prompt's first attempt gets a 429 (seed: >1024)")
    drop_above_tokens: Tokens = Field(2048, description="a longer prompt is dropped with a 400 (seed: >2048)")
    long_text_streams: tuple[str, ...] = Field((), description="streams (tenants) on the VIP long-text allow-list")

    @model_validator(mode="after")
    def _ordered(self) -> LengthGates:
        if self.drop_above_tokens < self.retry_above_tokens:
            raise ValueError("length_gates: drop_above_tokens must be >= retry_above_tokens")
        return self


class ApiKeyTiers(Strict):
    """Seed 004's API-key tiers (API Key 分级管理): each stream (tenant) of a tier gets a quota lane of its own at the
    gateway, a token bucket of the tier's rate with burst = 5 x rate (令牌累积上限 = 常规速率 × 5)."""

    rps: dict[str, Rps] = Field(
        default_factory=lambda: {"platinum": 1000.0, "gold": 500.0, "standard": 100.0},
        description="tier -> requests per second (seed: 白金级 1000, 黄金级 500, 普通级 100 QPS)",
    )
    streams: dict[str, str] = Field(default_factory=dict, description="stream (tenant) -> tier")
    burst_factor: Annotated[float, Field(gt=0.0, le=100.0)] = Field(5.0, description="bucket depth = this x the rate")

    @model_validator(mode="after")
    def _known_tiers(self) -> ApiKeyTiers:
        unknown = sorted(set(self.streams.values()) - set(self.rps))
        if unknown:
            raise ValueError(f"api_key_tiers: unknown tier(s) {unknown} (have {sorted(self.rps)})")
        return self


class KvPartitions(Strict):
    """Seed 004's GPU partitions (GPU 资源分区策略) as a KV reservation on every node, by priority tier: real-time
    (urgent, HIGH), elastic (normal, MEDIUM), degraded (low, LOW).  A tier admits a prompt only while its KV stays
    within its own share plus the idle part of the shares of the tiers below it: urgent may borrow the idle elastic
    and degraded shares, normal the idle degraded share, low nothing; no tier ever borrows urgent's share."""

    urgent: Ratio = Field(0.70, description="real-time share of a node's KV blocks (seed: 实时区 70%)")
    normal: Ratio = Field(0.25, description="elastic share (seed: 弹性区 25%)")
    low: Ratio = Field(0.05, description="degraded share (seed: 降级区 5%)")

    @model_validator(mode="after")
    def _sum(self) -> KvPartitions:
        if abs(self.urgent + self.normal + self.low - 1.0) > 1e-6:
            raise ValueError("kv_partitions: the shares must add up to 1")
        return self

    @property
    def shares(self) -> tuple[float, float, float]:
        return (self.urgent, self.normal, self.low)


class DrfTenant(Strict):
    """A tenant's weighted dominant-resource-fair share at the gateway (seed 004's DRF 多租户公平调度)."""

    weight: Annotated[float, Field(gt=0.0, le=1000.0)] = 1.0
    min_quota: Ratio = Field(0.0, description="share of a pool's room it gets first when it wants it")
    max_quota: Ratio = Field(1.0, description="share of a pool's room it never exceeds when others want room")


class Protections(Strict):
    """How the seeds' fixes are set up on this fleet, with no foresight: `basic` uses the rate limit alone;
    `reactive` (and the arms built on it) all of them, with the limits of `thresholds` (memory breaker, fragmentation
    release, context rejection, dynamic timeout)."""

    rate_limit: Bucket | None = Field(None, description="the gateway's token bucket (basic rate limiting)")
    quota_lanes: dict[str, Bucket] = Field(
        default_factory=dict,
        description="streams with a bucket of their own (seed 000: 为秒杀类客户预留专用配额通道); "
        "the rest share rate_limit",
    )
    validate_requests: bool = Field(True, description="the gateway refuses malformed requests (seed 004's 预过滤层)")
    context_pools: ContextPools | None = None
    cold_standby: tuple[str, ...] = Field(
        (), description="failover pools kept switched off (seed 000's 冷备) and started when a failover needs them"
    )
    autoscaler: Autoscaler | None = None
    tiers: Tiers = Tiers()
    failover_headroom: Ratio = Field(
        0.7, description="fail over only to a pool whose mean GPU memory is below this, with no saturated queue"
    )
    flow_control_waiting: PosFloat | None = Field(
        5.0,
        description="flow control at the gateway (GIE's saturation detector): a pool is saturated at this many waiting "
        "requests per node, and normal and low requests for it wait at the gateway for their tier's time",
    )
    # seed 004's levers (docs/control.md, "Seed 004's levers"): each off unless set, so a fleet file without them
    # runs exactly as before
    length_gates: LengthGates | None = Field(None, description="seed 004's >1024 429 and >2048 drop at the gateway")
    api_key_tiers: ApiKeyTiers | None = Field(None, description="seed 004's per-tenant buckets by API-key tier")
    kv_partitions: KvPartitions | None = Field(None, description="seed 004's 70/25/5 KV reservation by tier")
    drf_tenants: dict[str, DrfTenant] = Field(
        default_factory=dict, description="weighted DRF between tenants (streams) for a pool's room at the gateway"
    )
    max_seq_len: Tokens | None = Field(
        None, description="engines refuse (400) a prompt whose prompt + max_tokens exceeds it (seed: 4096)"
    )


class PolicyConfig(Strict):
    """The predictive policy (`actuators/policy.py`): when the upper band of a pool's KV forecast crosses
    `thresholds.kv_forecast_trigger` within the horizon, act a lead time ahead, in bounded steps, and relax one
    step at a time once the forecasts and the live figures are back under it."""

    prewarm_margin_seconds: Annotated[float, Field(ge=0.0)] = Field(
        30.0, description="start standby capacity this long more than a cold start before the forecast breach"
    )
    tighten_lead_seconds: PosFloat = Field(
        60.0, description="tighten admission when the forecast breach is this close (what is admitted must drain)"
    )
    context_steps: tuple[Tokens, ...] = Field(
        (16_000, 8_192), description="accepted prompt lengths, one step per decision (seed 000: 24k -> 16k -> 8k)"
    )
    tightened_memory_limit: Ratio = Field(0.75, description="memory admission threshold while tightened")
    tightened_normal_queue_seconds: Annotated[float, Field(ge=0.0)] = 1.0
    tightened_low_queue_seconds: Annotated[float, Field(ge=0.0)] = 0.0
    traffic_surge_factor: Annotated[float, Field(gt=1.0)] = Field(
        1.5, description="a traffic forecast whose upper band reaches this many times today's rate announces a peak"
    )
    target_kv: Ratio = Field(0.6, description="KV usage per node the pre-warmed replica count aims for")
    max_replicas_step: Annotated[int, Field(gt=0, le=MAX_NODES_PER_POOL)] = Field(
        4, description="at most this many replicas more per decision (HPA: 4 per 15 s)"
    )
    max_weight_shift: Ratio = Field(0.5, description="at most this share of a pool's weight moved per decision")
    hysteresis: Ratio = Field(0.05, description="relax only below the trigger minus this")
    relax_hold_seconds: Annotated[float, Field(ge=0.0)] = Field(
        60.0, description="forecasts and live figures must stay below the relax level this long before a step back"
    )


class GuardrailConfig(Strict):
    """Bounds around every decision of the actuator (`actuators/guardrails.py`)."""

    max_replicas_step: Annotated[int, Field(gt=0, le=MAX_NODES_PER_POOL)] = Field(
        4, description="at most this many replicas more or fewer per decision"
    )
    cooldown_seconds: Annotated[float, Field(ge=0.0)] = Field(
        60.0, description="one change per action kind and target in this long (rollbacks excepted)"
    )
    change_budget_per_hour: Annotated[int, Field(gt=0, le=MAX_CHANGE_BUDGET_PER_HOUR)] = Field(
        30, description="at most this many applied changes in any rolling hour"
    )
    verify_window_seconds: PosFloat = Field(
        60.0, description="check each action's effect this long after it (after the cold start for a scale-up)"
    )
    stale_after_seconds: PosFloat = Field(60.0, description="live figures older than this freeze the actuator")
    forecast_stale_after_seconds: PosFloat = Field(
        120.0, description="forecasts older than this (the forecaster down) freeze the actuator"
    )


class Event(Strict):
    """A calendar event for the traffic forecaster (promotions, version upgrades)."""

    name: str
    kind: Literal["promotion", "upgrade", "holiday", "maintenance"] = "promotion"
    start: str = Field(description="ISO time or seconds from the trace start, e.g. '2024-11-11T00:00:00' or '600'")
    end: str
    lower_window_seconds: Annotated[float, Field(ge=0)] = 0.0
    upper_window_seconds: Annotated[float, Field(ge=0)] = 0.0
    expected_rps: Rps | None = Field(
        None,
        description="the requests per second the organisers expect at the event's peak, fleet-wide: the traffic "
        "forecast reads it before the event (spread over the pools as today's traffic is) and the `scheduled` arm "
        "pre-scales for it (unset: it takes every spare node)",
    )


class MetricsConfig(Strict):
    """Where the per-engine serving figures (KV-cache usage, batch saturation, requests per second) are read from."""

    source: MetricsSource = Field(
        "exporter",
        description="exporter: the alerts, dashboards and predictor read the series the infercast exporter "
        "re-emits from the engines (the default, as before); engines: they "
        "read the recording rules on the engines' own metrics (pool_version:engine_kv_cache_usage:max, ...: "
        "alertrules/engines.py, Prometheus scraping the engines itself), and the exporter emits only what the "
        "engines do not give (docs/exporters.md)",
    )
    rate_window: str = Field(
        "5m",
        pattern=r"^\d+[smhd]$",
        description="the engine rules' rate() window (the `rate5m` in their names); what reads them uses the same",
    )


# --- SLOs and alerting (alertrules/ reads these; docs/alerting.md) -------------------------------------------------
#: the burn rates of the SLO alerts (the SRE workbook's multi-window, multi-burn-rate alerts, a 30-day budget):
#: fast page 14.4x over 1 h and 5 m (2% of the budget in an hour), slow page 6x over 6 h and 30 m (5% in six hours),
#: ticket 1x over the slow windows (the budget spent as fast as it accrues)
SLO_BURN_FAST, SLO_BURN_SLOW, SLO_BURN_TICKET = 14.4, 6.0, 1.0
#: vLLM's time-to-first-token histogram buckets (vllm/v1/metrics/loggers.py, the same as the twin's exposition):
#: the latency SLI counts the requests in the bucket at the target, so a target must be one of its bounds
TTFT_BUCKET_BOUNDS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
    1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip


def _check_objective(v: float | None, key: str) -> float | None:
    # the fast page fires at an error ratio of 14.4 x the budget: an objective whose budget times 14.4 is 100% or
    # more could never page
    if v is not None and not (1.0 - 1.0 / SLO_BURN_FAST) < v < 1.0:
        raise ValueError(
            f"{key} objective {v} must be above {1.0 - 1.0 / SLO_BURN_FAST:.4f} and below 1 (the fast page fires "
            f"at {SLO_BURN_FAST:g} x the error budget)"
        )
    return v


def _check_ttft(v: float | None) -> float | None:
    if v is not None and v not in TTFT_BUCKET_BOUNDS:
        raise ValueError(
            f"ttft_seconds {v} is not a bucket bound of the engines' time-to-first-token histogram "
            f"(one of {', '.join(f'{b:g}' for b in TTFT_BUCKET_BOUNDS)})"
        )
    return v


class PoolObjectives(Strict):
    """One pool's objectives; what is left out is the fleet's (`slo:`)."""

    availability: float | None = Field(None, description="share of requests that must end well")
    latency: float | None = Field(None, description="share of requests whose first token must come within ttft")
    ttft_seconds: float | None = Field(None, description="the latency target: a bound of the TTFT histogram")

    @field_validator("availability", "latency")
    @classmethod
    def _objective(cls, v: float | None, info: Any) -> float | None:
        return _check_objective(v, info.field_name)

    @field_validator("ttft_seconds")
    @classmethod
    def _ttft(cls, v: float | None) -> float | None:
        return _check_ttft(v)


class SloConfig(Strict):
    """Service-level objectives per pool (and so per model version), read by the SLO burn-rate alerts.

    Availability: the share of requests that end `ok` (not error, timeout, rejected or shed) among every request
    that ended, from the router's `infercast_router_requests_total` (or, with `metrics.source: engines`, the
    engines' finished-reason counters: abort and error are bad).  Latency: the share of requests whose time to first
    token is within `ttft_seconds`, from the engines' TTFT histogram buckets."""

    availability: float = Field(0.99, description="share of requests that must end well (30-day budget)")
    latency: float = Field(0.95, description="share of requests whose first token must come within ttft_seconds")
    ttft_seconds: float = Field(2.5, description="the latency target: a bound of the engines' TTFT histogram")
    pools: dict[str, PoolObjectives] = Field(default_factory=dict, description="per-pool objectives")

    @field_validator("availability", "latency")
    @classmethod
    def _objective(cls, v: float, info: Any) -> float:
        _check_objective(v, info.field_name)
        return v

    @field_validator("ttft_seconds")
    @classmethod
    def _ttft(cls, v: float) -> float:
        _check_ttft(v)
        return v

    def of(self, pool: str) -> tuple[float, float, float]:
        """The pool's (availability, latency, ttft_seconds): its own where set, else the fleet's."""
        p = self.pools.get(pool, PoolObjectives())
        return (
            self.availability if p.availability is None else p.availability,
            self.latency if p.latency is None else p.latency,
            self.ttft_seconds if p.ttft_seconds is None else p.ttft_seconds,
        )


class AlertingConfig(Strict):
    """What the generated alerts link to."""

    runbook_base_url: str | None = Field(
        None,
        description="where the runbooks are published (https://...): every alert's runbook_url is <base>/<Alert>.md; "
        "unset: $INFERCAST_RUNBOOK_BASE_URL, else the runbooks' path in the package (not a link a pager opens)",
    )

    @field_validator("runbook_base_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"https?://[^\s/]+(/\S*)?", v):
            raise ValueError(f"runbook_base_url must be an http(s) URL a pager can open, got {v!r}")
        return v.rstrip("/") if v else v


class ExporterConfig(Strict):
    listen: str = "127.0.0.1:9400"
    scrape_timeout_seconds: PosFloat = 2.0
    staleness_seconds: PosFloat = 60.0
    max_body_bytes: PosInt = 16 * 1024 * 1024
    max_series_per_target: PosInt = Field(
        2000, description="series of the families it reads one target may send per scrape (label cardinality)"
    )
    hit_ratio_window_seconds: PosFloat = 300.0


class PredictorConfig(Strict):
    listen: str = "127.0.0.1:9401"
    prometheus_url: str | None = None
    horizon_seconds: PosFloat = 300.0
    step_seconds: PosFloat = 15.0
    history_seconds: PosFloat = 6 * 3600.0
    refit_interval_seconds: PosFloat = 1800.0
    forecast_interval_seconds: PosFloat = 15.0
    band: tuple[Ratio, Ratio] = (0.1, 0.9)
    min_history_points: PosInt = 20
    stale_after_seconds: PosFloat = 120.0
    model_file: str | None = None
    time_scale: PosFloat = Field(
        1.0,
        description="simulated seconds per wall second of the fleet it watches: 1 in production; a stack over a twin "
        "run faster than real time (`--twin-speed S`) sets S, and the durations here are then wall seconds, so the "
        "LSTM, trained in the fleet's own time, reads its history at S times its step "
        "(`infercast.predictors.timescale`)",
    )
    band_adaptation: Annotated[float, Field(ge=0)] = Field(
        0.05, description="adaptive conformal step (log-width per forecast) of the online band calibration; 0 = off"
    )
    event_onset_seconds: Annotated[float, Field(ge=0)] = Field(
        30.0,
        description="a calendar event never seen before may fill the KV cache from this long after it starts: "
        "the KV upper band is the ceiling from then for one horizon (predictors/calendar.py)",
    )
    traffic_bound_factor: Annotated[float, Field(gt=1)] = Field(
        1.5, description="traffic forecasts never exceed this times the highest rate in the history"
    )
    torch_threads: PosInt = Field(
        1,
        description="torch's CPU threads in `infercast predictor` (the LSTM's batched pass): 1, because the tick's "
        "pass is small matrix work that a second thread barely speeds up on 2 cores, while torch's default (one per "
        "core) fights the rest of the process and the machine's other jobs for them (docs/lstm.md)",
    )
    legacy_forecast_labels: bool = Field(
        True,
        description="deprecated, removed in the next release with the labels it keeps: also label every forecast "
        "series with its former names, model (= forecaster) and ml_forecast (= band, as yhat, yhat_lower, "
        "yhat_upper), on the same series, so queries and alerts written against them keep matching; false: the new "
        "labels only (everything infercast ships reads only those; docs/predictors.md, Deprecated labels)",
    )


# --- the actuator (docs/actuator.md) ---------------------------------------------------------------------------
def _check_url(v: str | None, schemes: tuple[str, ...]) -> str | None:
    if v is not None and not v.startswith(schemes):
        raise ValueError(f"must start with {' or '.join(schemes)}, got {v!r}")
    return v


def parse_listen(value: str, default_host: str | None = None) -> tuple[str, int]:
    """`HOST:PORT` -> (host, port): the one parser of every listen address (fleet file and `--listen` flags).

    The port is digits in 0-65535; an IPv6 host may be bracketed (`[::1]:9400` -> `::1`).  An empty host is an
    error unless `default_host` is given (the predictor's `:9401` means loopback).  ValueError says what is wrong.
    """
    host, sep, port = value.rpartition(":")
    host = host.strip("[]") or (default_host or "")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected host:port, got {value!r}")
    return host, int(port)


def _check_listen(v: str) -> str:
    parse_listen(v)
    return v


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


class WebhookConfig(Strict):
    """Alertmanager's webhook into the actuator (served on `actuator.listen` beside /metrics)."""

    path: str = Field("/api/v1/alerts", pattern=r"^/[A-Za-z0-9/_.-]*$")
    token_env: EnvName = Field(
        "INFERCAST_ACTUATOR_TOKEN",
        description="environment variable holding the bearer token Alertmanager must send (unset: no auth, "
        "acceptable on loopback only)",
    )
    token_file: str | None = Field(
        None, min_length=1, description="a file holding that token (a mounted Secret); one source: not with token_env"
    )
    max_body_bytes: Annotated[int, Field(ge=1024, le=16 * 1024 * 1024)] = 4 * 1024 * 1024
    inbox_size: Annotated[int, Field(gt=0, le=10_000)] = Field(
        1000, description="alert events kept for the loop; the oldest are dropped when full"
    )
    dedup_seconds: Annotated[float, Field(ge=0.0, le=86_400.0)] = Field(
        300.0, description="an alert with the same fingerprint and status within this time is a duplicate"
    )
    alert_ttl_seconds: Annotated[float, Field(ge=60.0, le=86_400.0)] = Field(
        900.0,
        description="a firing alert not re-sent for this long is over (keep it above the actuator route's "
        "repeat_interval, 5m)",
    )


class ActuatorConfig(Strict):
    """The actuator daemon (`infercast actuator`): docs/actuator.md."""

    mode: Literal["advisory", "active"] = Field(
        "advisory", description="advisory: decide, log and publish, touch nothing (the default)"
    )
    backend: Backend | None = Field(None, description="where actions go; required to run the daemon")
    leader: Leader = SingleLeader()
    audit_db: str = Field("actuator-audit.db", min_length=1, description="SQLite audit trail (relative: to the cwd)")
    listen: str = Field("127.0.0.1:9402", description="host:port of /metrics and the webhook")
    webhook: WebhookConfig = WebhookConfig()
    prometheus_url: str | None = Field(None, description="live metrics (default: predictor.prometheus_url)")
    interval_seconds: Annotated[float, Field(gt=0.0, le=MAX_ACTUATOR_SECONDS)] = Field(
        15.0,
        description="how often the control loop runs on its own (live metrics, breakers, the newest forecasts); an "
        "alert the webhook accepts runs it at once as well",
    )
    misfire_grace_seconds: Annotated[float, Field(ge=1.0, le=MAX_ACTUATOR_SECONDS)] = Field(
        5.0, description="a loop run this late still runs; later ones are counted as missed"
    )
    apply_attempts: Annotated[int, Field(ge=1, le=10)] = 3
    apply_backoff_seconds: Annotated[float, Field(gt=0.0, le=60.0)] = 0.2

    _listen = field_validator("listen")(lambda v: _check_listen(v))
    _prom = field_validator("prometheus_url")(lambda v: _check_url(v, ("http://", "https://")))


class TrafficPhase(Strict):
    """One phase of a scenario: from `start_seconds` the rate and long-context share ramp to the given values."""

    start_seconds: Annotated[float, Field(ge=0)]
    ramp_seconds: Annotated[float, Field(ge=0)] = 0.0
    rps: Annotated[float, Field(ge=0, le=MAX_RPS)]
    long_share: Ratio = Field(description="share of prompts over 8k tokens")
    long_ramp_seconds: Annotated[float, Field(ge=0)] | None = Field(
        None, description="time for long_share to reach its value (defaults to ramp_seconds)"
    )


class LengthDistribution(Strict):
    """Prompt and output lengths for generated arrivals (scenarios and ServeGen)."""

    short_median_tokens: Tokens = 1800
    short_max_tokens: Tokens = 8192
    long_median_tokens: Tokens = 14000
    long_max_tokens: Tokens = 32768
    sigma: PosFloat = 0.55
    long_sigma: PosFloat = 0.35
    output_median_tokens: Tokens = 150
    output_max_tokens: Tokens = 2048
    request_max_tokens: Tokens = Field(
        512, description="the max_tokens clients send (outputs are clipped to it; contiguous KV reserves it)"
    )


def _ordered_phases(v: tuple[TrafficPhase, ...]) -> tuple[TrafficPhase, ...]:
    starts = [p.start_seconds for p in v]
    if starts != sorted(starts):
        raise ValueError("phases must be ordered by start_seconds")
    return v


class Stream(Strict):
    """A further source of requests beside the scenario's own phases: another tenant (the flash-sale customer), or
    one of a load test's user classes (seed 004's Locust plan).  Quota lanes refer to streams by name."""

    name: str
    phases: tuple[TrafficPhase, ...] = Field(min_length=1, max_length=MAX_PHASES)
    lengths: LengthDistribution | None = Field(None, description="prompt and output lengths (default: the scenario's)")
    priority_shares: dict[str, Ratio] | None = Field(
        None, description="share of this stream's requests per priority class (default: router.priority_shares)"
    )
    malformed: bool = Field(
        False,
        description="requests with an invalid payload (seed 004's 异常格式攻击): an engine spends the prefill on them "
        "and then answers 400; a gateway that validates requests refuses them at once",
    )

    _ordered = field_validator("phases")(_ordered_phases)

    @field_validator("priority_shares")
    @classmethod
    def _shares(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        return None if v is None else _check_priority_shares(v)


class Fault(Strict):
    """A fault injected into a scenario (seed 004's 故障注入测试): at `at_seconds` the node's GPU process is killed
    (随机kill GPU进程): what it held fails back to the clients, and it serves again after the cold start."""

    at_seconds: Annotated[float, Field(ge=0)]
    node: str = Field(description="node name, e.g. bed-0 (pool name and index)")
    kind: Literal["kill"] = "kill"


class ScenarioConfig(Strict):
    duration_seconds: Annotated[float, Field(gt=0.0, le=MAX_SCENARIO_SECONDS)]
    phases: tuple[TrafficPhase, ...] = Field(min_length=1, max_length=MAX_PHASES)
    stream: str = Field("main", description="name of the stream the top-level phases describe")
    streams: tuple[Stream, ...] = Field(
        (), max_length=MAX_STREAMS, description="further streams of requests, added to the phases'"
    )
    lengths: LengthDistribution = LengthDistribution()
    seed: int = 0
    faults: tuple[Fault, ...] = Field((), max_length=MAX_FAULTS, description="faults injected during the run")

    _ordered = field_validator("phases")(_ordered_phases)

    @model_validator(mode="after")
    def _unique_streams(self) -> ScenarioConfig:
        names = [self.stream, *(s.name for s in self.streams)]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"stream names must be unique; repeated: {dup}")
        return self

    @property
    def stream_names(self) -> tuple[str, ...]:
        """Stream names by tenant index (0: the top-level phases)."""
        return (self.stream, *(s.name for s in self.streams))


class TwinConfig(Strict):
    """Physical constants of the simulated engines that a fleet file does not otherwise carry."""

    tick_seconds: Annotated[float, Field(gt=0.0, le=1.0)] = 0.25
    prefill_tokens_per_second: PosFloat = Field(
        48_000.0, description="batched prefill throughput of the fastest version"
    )
    inter_token_seconds: PosFloat = Field(0.012, description="decode time per token at batch 1")
    overhead_gb_per_gpu: Annotated[float, Field(ge=0.0)] = 1.0
    activation_gb_per_1k_tokens: Annotated[float, Field(ge=0.0)] = 0.10
    prefill_chunk_tokens: Tokens = Field(16384, description="chunked prefill: prompt tokens per engine step")
    kv_release_seconds: PosFloat = Field(
        60.0, description="an on-demand paged pool gives free memory back with this time constant"
    )
    fixed_batch_wait_seconds: PosFloat = 0.05
    health_queue_age_seconds: PosFloat = 10.0


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
        problems = []
        for pool in self.slo.pools:
            if pool not in self.pools:
                problems.append(f"slo.pools: unknown pool {pool!r} (have {sorted(self.pools)})")
        for name, v in self.versions.items():
            v.model._where = f"versions.{name}.model"  # a private attribute: the refusal names the version
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
        seen = set()
        for i, t in enumerate(self.targets):
            if t.name in seen:
                problems.append(f"targets.{i}.name: duplicate target name {t.name!r}")
            seen.add(t.name)
            if t.pool is not None and t.pool not in self.pools:
                problems.append(f"targets.{i}.pool: unknown pool {t.pool!r}")
            if t.version is not None and t.version not in self.versions:
                problems.append(f"targets.{i}.version: unknown version {t.version!r}")
        problems += self._protection_problems()
        backend = self.actuator.backend
        if isinstance(backend, KubernetesBackend | LiteLLMBackend):
            for pool in backend.deployments:
                if pool not in self.pools:
                    problems.append(f"actuator.backend.deployments: unknown pool {pool!r} (have {sorted(self.pools)})")
        if isinstance(backend, HAProxyBackend):
            for pool in backend.servers:
                if pool not in self.pools:
                    problems.append(f"actuator.backend.servers: unknown pool {pool!r} (have {sorted(self.pools)})")
        if isinstance(backend, GatewayBackend):
            mapped = [("autoscalers", p) for p in backend.autoscalers]
            mapped += [("httproute.backends", p) for p in (backend.httproute.backends if backend.httproute else {})]
            if isinstance(backend, EnvoyGatewayBackend) and backend.breakers is not None:
                mapped += [("breakers.pools", p) for p in backend.breakers.pools]
            for where, pool in mapped:
                if pool not in self.pools:
                    problems.append(f"actuator.backend.{where}: unknown pool {pool!r} (have {sorted(self.pools)})")
        if problems:
            raise ValueError("; ".join(problems))
        return self

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

    def require_twin_shapes(self) -> None:
        """Raise ConfigError unless every version has the model shape the twin needs (given, or a known model's).
        The twin's engines ask for it when built; a trace run that sizes its fleet first is refused here."""
        for v in self.versions.values():
            v.model.require_shape()


#: what a section of the fleet file is for, when a misplaced key's hint points there
_SECTION_NOTES = {
    "versions.<version>.model": "the twin's model shape",
    "twin": "the twin's constants",
    "scenario": "the twin's traffic",
}


def _submodels(annotation: Any, name: str) -> list[tuple[type[BaseModel], str]]:
    """The models a field holds, each with the path step to reach it: `.<pool>` for a dict's values, `.<i>` for a
    tuple's items, nothing for the model itself."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [(annotation, "")]
    args = get_args(annotation)
    origin = get_origin(annotation)
    if origin is dict and len(args) == 2:
        return [(m, f".<{name.removesuffix('s')}>{step}") for m, step in _submodels(args[1], name)]
    if origin is tuple:
        return [(m, f".<i>{step}") for m, step in _submodels(args[0], name)] if args else []
    return [found for a in args for found in _submodels(a, name)]  # a union or Annotated: each of its arms


def _field_places(model: type[BaseModel], prefix: str = "", depth: int = 0) -> dict[str, list[str]]:
    """Every key of the fleet-file schema -> the sections where it is a field (`versions.<version>.model`)."""
    places: dict[str, list[str]] = {}
    for name, field in model.model_fields.items():
        places.setdefault(name, []).append(prefix)
        if depth < 8:
            path = f"{prefix}.{name}" if prefix else name
            for sub, step in _submodels(field.annotation, name):
                for key, where in _field_places(sub, path + step, depth + 1).items():
                    places.setdefault(key, []).extend(w for w in where if w not in places[key])
    return places


_FIELD_PLACES: dict[str, list[str]] | None = None


def misplaced_key_hint(loc: tuple[str | int, ...]) -> str | None:
    """For an unknown key that is a field elsewhere in the fleet file: where it belongs, e.g. "'layers' belongs in
    versions.<version>.model (the twin's model shape)"; None when it is a field nowhere (a typo)."""
    global _FIELD_PLACES
    if _FIELD_PLACES is None:
        _FIELD_PLACES = _field_places(FleetConfig)
    key = str(loc[-1])
    here = ".".join(str(p) for p in loc[:-1])
    places = [
        w
        for w in _FIELD_PLACES.get(key, [])
        if not re.fullmatch(re.sub(r"<[^>]+>", "[^.]+", re.escape(w)), here)  # `<pool>` matches any pool name
    ]
    if not places:
        return None
    named = [f"{w or 'the top level'}" + (f" ({_SECTION_NOTES[w]})" if w in _SECTION_NOTES else "") for w in places]
    shown = " or ".join(named[:3]) + (f" (and {len(named) - 3} more)" if len(named) > 3 else "")
    return f"{key!r} belongs in {shown}"


#: keys a release renamed or merged: (where, key) -> what to write instead
RENAMED_KEYS: dict[tuple[str, str], str] = {
    ("actuator", k): "the fast and predictive loops ran the same tick; set actuator.interval_seconds instead"
    for k in ("fast_interval_seconds", "predictive_interval_seconds")
}


def unknown_key_message(loc: tuple[str | int, ...]) -> str:
    """What to tell a user about a key the fleet file may not have here: a key a release renamed, a field of
    another section, or a typo."""
    renamed = RENAMED_KEYS.get((".".join(str(p) for p in loc[:-1]), str(loc[-1]))) if loc else None
    if renamed:
        return f"no longer a field: {renamed}"
    hint = misplaced_key_hint(loc)
    return f"not a field here; {hint}" if hint else "unknown key (typo?)"


def _format_errors(err: ValidationError) -> str:
    lines = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "(top level)"
        msg = e["msg"].removeprefix("Value error, ")
        if e["type"] == "extra_forbidden":
            msg = unknown_key_message(tuple(e["loc"]))
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def parse_config(data: Any, source: str = "<config>") -> FleetConfig:
    if not isinstance(data, dict):
        raise ConfigError(f"{source}: expected a mapping at the top level, got {type(data).__name__}")
    # top-level `x-...` keys are the file's own (anchors for merge keys, `x-pool: &pool {...}` then `<<: *pool`,
    # as Docker Compose has them): not fields, never read
    data = {k: v for k, v in data.items() if not (isinstance(k, str) and k.startswith("x-"))}
    try:
        cfg = FleetConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(f"{source}: invalid fleet configuration:\n{_format_errors(err)}") from None
    except RecursionError:
        raise ConfigError(f"{source}: invalid fleet configuration: nested deeper than a fleet file can be") from None
    problems = check_bounds(cfg)
    if problems:
        raise ConfigError(f"{source}: invalid fleet configuration:\n" + "\n".join(f"  {p}" for p in problems))
    return cfg


def _bound_of(key: str) -> tuple[float, str]:
    """(the most a number under `key` may be, how to say it)."""
    if key.endswith("_seconds"):
        return MAX_DURATION_SECONDS, "a year (31,622,400 s)"
    if key.endswith("_bytes"):
        return float(MAX_BYTES), "1 TiB"
    return MAX_NUMBER, f"{MAX_NUMBER:,.0f}"


def check_bounds(cfg: BaseModel) -> list[str]:
    """Every number of a validated fleet file finite and within its bound (`_bound_of`: a duration a year, a
    size 1 TiB, anything else MAX_NUMBER; a field's own tighter bound was checked by validation), as
    `key.path: problem` lines.  A `seed` may be any integer."""
    problems: list[str] = []

    def walk(value: Any, path: str, key: str) -> None:
        if isinstance(value, BaseModel):
            for name in type(value).model_fields:
                walk(getattr(value, name), f"{path}.{name}" if path else name, name)
        elif isinstance(value, dict):
            for k, v in value.items():
                walk(v, f"{path}.{k}", key)  # a mapping's values are bounded as its key's: slo_seconds.urgent
        elif isinstance(value, tuple | list):
            for i, v in enumerate(value):
                walk(v, f"{path}.{i}", key)
        elif isinstance(value, int | float) and not isinstance(value, bool) and key != "seed":
            if isinstance(value, float) and not math.isfinite(value):
                problems.append(f"{path}: must be a finite number, got {value!r}")
                return
            bound, said = _bound_of(key)
            if value > bound:
                problems.append(f"{path}: {value:g} is above the most a fleet file may give here, {said}")

    walk(cfg, "", "")
    return problems


def load_config(path: str | Path) -> FleetConfig:
    """Read and validate a fleet file, or a shipped example named without a suffix (`flash-sale`); raises
    ConfigError with every problem, or returns the whole config."""
    p = Path(path)
    if not p.suffix and not p.exists():
        p = resolve_scenario(str(path))
    try:
        with p.open("rb") as f:  # at most one byte over the cap is read: a FIFO or a growing file cannot hold us
            raw = f.read(MAX_FLEET_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(f"{p}: no such file") from None
    except OSError as e:
        raise ConfigError(f"{p}: cannot read: {e}") from None
    if len(raw) > MAX_FLEET_FILE_BYTES:
        raise ConfigError(
            f"{p}: larger than a fleet file can be (over {MAX_FLEET_FILE_BYTES // 1024} KiB); refused before parsing"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{p}: cannot read: {e}") from None
    if _DEEP_FLOW.search(text):  # the reader would scan every bracket before the depth check sees one
        raise ConfigError(
            f"{p}: not valid YAML: nested deeper than a fleet file can be (over {MAX_FLEET_FILE_DEPTH} levels of "
            "brackets in a row)"
        )
    try:
        data = yaml.load(text, Loader=UniqueKeyLoader)  # a SafeLoader subclass
    except yaml.YAMLError as e:
        raise ConfigError(f"{p}: not valid YAML: {e}") from None
    except RecursionError:  # "{" * 5000: the reader recurses once per level (found by bench/hostile.py)
        raise ConfigError(f"{p}: not valid YAML: nested deeper than the reader can follow") from None
    return parse_config(data, str(p))


#: more opening brackets in a row than a fleet file nests: PyYAML's scanner reads all of `{` x 5000 looking for a
#: simple key (1.2 s on a busy machine) before the composer's depth check can stop it
_DEEP_FLOW = re.compile(r"(?:[\[{]\s*){" + str(MAX_FLEET_FILE_DEPTH + 1) + "}")


class UniqueKeyLoader(yaml.SafeLoader):
    """`yaml.safe_load`, except that a key repeated in one mapping is an error naming its line (YAML's own rule;
    PyYAML silently keeps the last value, so `nodes: 4` then `nodes: 400` ran with 400), and a document nested
    deeper than MAX_FLEET_FILE_DEPTH is refused as soon as the reader gets there (`"{" * 5000` took 2.6 s to fail
    in the reader's recursion).  Merge keys (`<<: *base`, `<<: [*a, *b]`) work as YAML 1.1 says: the keys written
    beside them override the merged ones, which is no repeat."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_FLEET_FILE_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than a fleet file can be (over {MAX_FLEET_FILE_DEPTH} levels)", mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":  # `<<`: flattened by the base class
                continue
            try:
                key = self.construct_object(key_node, deep=True)
                hash(key)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            line = key_node.start_mark.line + 1
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {str(key)[:60]!r} (line {line}; first on line {seen[key]})",
                    key_node.start_mark,
                )  # fmt: skip
            seen[key] = line
        return super().construct_mapping(node, deep)


def resolve_scenario(name_or_path: str) -> Path:
    """`flash-sale` -> the shipped examples/flash-sale.yaml; a path is returned as is."""
    from infercast.resources import example_fleet, examples_dir

    p = Path(name_or_path)
    if p.suffix in (".yaml", ".yml") or p.exists():
        return p
    candidate = example_fleet(name_or_path)
    if candidate.exists():
        return candidate
    known = sorted(x.stem for x in examples_dir().glob("*.yaml"))
    raise ConfigError(f"unknown scenario {name_or_path!r}; known: {', '.join(known)} (or give a .yaml path)")
