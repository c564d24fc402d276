"""`scenario` and `twin`: the simulated traffic (phases, streams, lengths, faults) and the twin engines'
physical constants.  Only the twin and the benches read them; a real fleet's file has neither."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from .base import (
    MAX_FAULTS,
    MAX_PHASES,
    MAX_RPS,
    MAX_SCENARIO_SECONDS,
    MAX_STREAMS,
    PosFloat,
    Ratio,
    Strict,
    Tokens,
    _check_priority_shares,
)


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
