"""Shapes of common served models, so a fleet file can name a model and leave its shape out.

Only the twin and the exporter's KV capacity figure need a model's shape (layers, KV heads, head size, weights);
a real fleet's exporters, rules, dashboards, predictor and actuator need only the served model name.  When a
version's `model.name` is one of these Hugging Face ids (or its last path segment, e.g. `Llama-3.1-8B-Instruct`,
as vLLM serves it without `--served-model-name`), the fields the fleet file leaves out are filled in from here.

Figures are the models' published `config.json` (num_hidden_layers, num_key_value_heads, head size =
hidden_size / num_attention_heads, torch_dtype) on huggingface.co/<id>; weights are the model card's parameter
count x 2 bytes (bfloat16), in GiB.  Cross-checked against copies of those config.json files found with the
`search` tool (e.g. citsjtu2020/LLM-Prof sglang/Model_Config.md for Llama-3.1-8B; oumi's
configs/recipes/llama3_1/README.md for the 8B and 70B; Qwen2.5-72B and Mistral-7B-v0.3 layer shapes).
"""

from __future__ import annotations

from typing import Any

#: the twin's shape fields that a fleet file may leave out for a known model
SHAPE_FIELDS = ("layers", "kv_heads", "head_dim", "weights_gb")

GIB = 1024**3


def _weights_gib(params_billions: float) -> float:
    return round(params_billions * 1e9 * 2 / GIB, 1)  # bfloat16: 2 bytes a parameter


# id -> shape.  params: the model card's "Model size" (billions).
KNOWN_MODELS: dict[str, dict[str, Any]] = {
    # 32 layers, 32 heads / 8 KV heads, hidden 4096, 8.03B params
    "meta-llama/Llama-3.1-8B-Instruct": {
        "layers": 32, "kv_heads": 8, "head_dim": 128, "dtype": "bfloat16", "weights_gb": _weights_gib(8.03),
    },
    # 80 layers, 64 heads / 8 KV heads, hidden 8192, 70.6B params
    "meta-llama/Llama-3.1-70B-Instruct": {
        "layers": 80, "kv_heads": 8, "head_dim": 128, "dtype": "bfloat16", "weights_gb": _weights_gib(70.6),
    },
    # 28 layers, 28 heads / 4 KV heads, hidden 3584, 7.62B params
    "Qwen/Qwen2.5-7B-Instruct": {
        "layers": 28, "kv_heads": 4, "head_dim": 128, "dtype": "bfloat16", "weights_gb": _weights_gib(7.62),
    },
    # 80 layers, 64 heads / 8 KV heads, hidden 8192, 72.7B params
    "Qwen/Qwen2.5-72B-Instruct": {
        "layers": 80, "kv_heads": 8, "head_dim": 128, "dtype": "bfloat16", "weights_gb": _weights_gib(72.7),
    },
    # 32 layers, 32 heads / 8 KV heads, head_dim 128, 7.25B params
    "mistralai/Mistral-7B-Instruct-v0.3": {
        "layers": 32, "kv_heads": 8, "head_dim": 128, "dtype": "bfloat16", "weights_gb": _weights_gib(7.25),
    },
}  # fmt: skip

# The id vLLM serves is the --model argument unless --served-model-name renames it; a local copy is often named
# after the id's last segment.  Matching ignores case.
_BY_NAME: dict[str, str] = {}
for _id in KNOWN_MODELS:
    _BY_NAME[_id.lower()] = _id
    _BY_NAME[_id.rsplit("/", 1)[-1].lower()] = _id


def known_shape(name: str) -> dict[str, Any] | None:
    """The published shape of a served model name, or None when it is not a known model."""
    key = _BY_NAME.get(name.strip().lower())
    return dict(KNOWN_MODELS[key]) if key else None


def known_model_names() -> list[str]:
    return sorted(KNOWN_MODELS)


__all__ = ["KNOWN_MODELS", "SHAPE_FIELDS", "known_model_names", "known_shape"]
