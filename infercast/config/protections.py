"""`protections`: how the seeds' fixes are set up on this fleet (token buckets and quota lanes, context pools,
cold standby, the autoscaler, tiers, length gates, API-key tiers, KV partitions, DRF between tenants)."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from .base import MAX_NODES_PER_POOL, MAX_RPS, PosFloat, Ratio, Rps, Strict, Tokens


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


#: Kubernetes HPA's default scale-down stabilization window, seconds: the autoscaler's default, and what the
#: actuator's reserve and its flap count hold to when the fleet file has no autoscaler
HPA_SCALE_DOWN_STABILIZATION_SECONDS = 300.0


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
        HPA_SCALE_DOWN_STABILIZATION_SECONDS,
        description="a scale-down goes only as low as the highest recommendation of this window (HPA's 300 s)",
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
    # seed 004's levers (docs/control.md, "Seed 004's levers"): each is off unless set, because each changes what the
    # gateway admits and a fleet that has not asked for them must not see it
    length_gates: LengthGates | None = Field(None, description="seed 004's >1024 429 and >2048 drop at the gateway")
    api_key_tiers: ApiKeyTiers | None = Field(None, description="seed 004's per-tenant buckets by API-key tier")
    kv_partitions: KvPartitions | None = Field(None, description="seed 004's 70/25/5 KV reservation by tier")
    drf_tenants: dict[str, DrfTenant] = Field(
        default_factory=dict, description="weighted DRF between tenants (streams) for a pool's room at the gateway"
    )
    max_seq_len: Tokens | None = Field(
        None, description="engines refuse (400) a prompt whose prompt + max_tokens exceeds it (seed: 4096)"
    )
