"""The fleet itself: the served models and their shapes, the model versions, the pools of nodes, and the
scrape targets (`versions`, `pools`, `targets`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, PrivateAttr, model_validator

from infercast.models import SHAPE_FIELDS, known_model_names, known_shape

from .base import (
    DTYPE_BYTES,
    GIB,
    MAX_BATCH,
    MAX_NODES_PER_POOL,
    MAX_TOKENS,
    ConfigError,
    PosFloat,
    PosInt,
    Ratio,
    Strict,
    Tokens,
)


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
