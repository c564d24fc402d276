"""Recording rules on the engines' own metrics: per (pool, version) KV usage (mean and fullest engine), batch
saturation, requests per second and their share, computed by Prometheus from what vLLM, SGLang, TGI and
TensorRT-LLM (Triton) expose, with their own labels kept.  Pure: a fleet file in, rule groups out.

The engines know nothing of pools and versions: those are target labels, set by the generated PodMonitors'
relabelings (Kubernetes) or the generated plain `scrape_configs` (infercast/tools/k8s/scrape.py), so no `honor_labels`
and no exporter in between.  Only series that carry a `pool` label are read (`{pool!=""}`): another job scraping
the same engines is not counted twice.

Two levels, named `level:metric:operations` (the names are the catalog's, `infercast.catalog.REC_ENGINE_*`):
- `instance:` one series per engine, whatever its kind: a vLLM data-parallel engine (`engine` label), an SGLang
  scheduler (tensor and pipeline rank 0 only: every rank reports the same state), a TGI router, a Triton model;
  the same instances the exporter counts (docs/exporters.md);
- `pool_version:` (and `version:`) aggregates of those, which dashboards, alerts and the predictor can read.

What each engine gives (docs/exporters.md has the same table for the exporter):

- KV usage: vLLM `vllm:kv_cache_usage_perc` (older releases: `gpu_cache_usage_perc`), SGLang `sglang:token_usage`,
  TGI `tgi_batch_current_max_tokens / tgi_batch_max_total_tokens`, Triton `nv_trt_llm_kv_cache_block_metrics`
  used / max blocks;
- batch saturation, running / maximum batch: vLLM `vllm:num_requests_running`, SGLang `sglang:num_running_reqs`,
  TGI `tgi_batch_current_size`, each over the pool's maximum batch from the fleet file (none of them exports it);
  Triton `nv_trt_llm_request_metrics` active / max;
- requests per second: vLLM `vllm:request_success_total` (every finished_reason), SGLang
  `sglang:num_requests_total`, TGI `tgi_request_count`, Triton core's `nv_inference_request_success`.

Triton's KV usage is used / max blocks, not its `fraction` gauge, which can disagree with them (the README's own
example does: tests/data/engines/tensorrt-llm-readme.prom).  Triton serves several models from one server, so its
series are read only for the fleet file's model names (not the ensemble's pre- and post-processing models), and the
scrape config maps each model to its version (`metric_relabel_configs` on `model`).
"""

from __future__ import annotations

import re
from typing import Any

from infercast.catalog import (
    REC_ENGINE_BATCH_SATURATION,
    REC_ENGINE_BATCH_SATURATION_AVG,
    REC_ENGINE_BATCH_SATURATION_MAX,
    REC_ENGINE_KV_USAGE,
    REC_ENGINE_KV_USAGE_AVG,
    REC_ENGINE_KV_USAGE_MAX,
    REC_ENGINE_MAX_BATCH,
    REC_ENGINE_REQUESTS_POOL_RATE,
    REC_ENGINE_REQUESTS_POOL_SHARE,
    REC_ENGINE_REQUESTS_RATE,
    REC_ENGINE_REQUESTS_RUNNING,
    REC_ENGINE_REQUESTS_VERSION_SHARE,
    REC_ENGINE_REQUESTS_WAITING,
)
from infercast.config import FleetConfig

GROUP = "infercast.engines"
#: the rate window of the committed rules (the `rate5m` in the names)
RATE_WINDOW = "5m"
#: only series scraped under the generated jobs (they carry the fleet file's pool)
SCRAPED = 'pool!=""'
#: SGLang: every tensor / pipeline rank reports the same scheduler state; read rank 0 (or no rank label)
SGLANG_RANK0 = 'tp_rank=~"|0",pp_rank=~"|0"'


def names(window: str = RATE_WINDOW) -> dict[str, str]:
    """Symbol -> recorded name, for rules built with rate window `window` (`rate5m` becomes `rate<window>`)."""
    plain = {
        "kv_usage": REC_ENGINE_KV_USAGE,
        "batch_saturation": REC_ENGINE_BATCH_SATURATION,
        "requests_rate": REC_ENGINE_REQUESTS_RATE,
        "requests_running": REC_ENGINE_REQUESTS_RUNNING,
        "requests_waiting": REC_ENGINE_REQUESTS_WAITING,
        "max_batch": REC_ENGINE_MAX_BATCH,
        "kv_usage_avg": REC_ENGINE_KV_USAGE_AVG,
        "kv_usage_max": REC_ENGINE_KV_USAGE_MAX,
        "batch_saturation_avg": REC_ENGINE_BATCH_SATURATION_AVG,
        "batch_saturation_max": REC_ENGINE_BATCH_SATURATION_MAX,
        "requests_pool_rate": REC_ENGINE_REQUESTS_POOL_RATE,
        "requests_pool_share": REC_ENGINE_REQUESTS_POOL_SHARE,
        "requests_version_share": REC_ENGINE_REQUESTS_VERSION_SHARE,
    }
    if not re.fullmatch(r"\d+[smhd]", window):
        raise ValueError(f"rate window must be a Prometheus duration like 5m or 30s, got {window!r}")
    return {k: v.replace(f"rate{RATE_WINDOW}", f"rate{window}") for k, v in plain.items()}


def pool_max_batch(cfg: FleetConfig, pool: str) -> int | None:
    """The pool's maximum batch: `pools.<pool>.engines.max_batch`, else a target's `max_batch` in that pool, else
    the version's `batcher.max_batch`; None when the fleet file gives none."""
    p = cfg.pools[pool]
    if p.engines.max_batch is not None:
        return p.engines.max_batch
    for t in cfg.targets:
        if t.pool == pool and t.max_batch is not None:
            return t.max_batch
    batcher = getattr(cfg.versions.get(p.version), "batcher", None)
    return getattr(batcher, "max_batch", None)


def model_names(cfg: FleetConfig) -> dict[str, str]:
    """Served model name -> the fleet file's version serving it."""
    out = {}
    for version, v in cfg.versions.items():
        name = getattr(getattr(v, "model", None), "name", None)
        if name:
            out[name] = version
    return out


def _models_regex(cfg: FleetConfig) -> str:
    """The fleet's model names as a regex inside a PromQL string (whose backslashes escape: doubled)."""
    regex = "|".join(re.escape(m) for m in sorted(model_names(cfg))) or "$^"
    return regex.replace("\\", "\\\\").replace('"', '\\"')


def engine_rules(cfg: FleetConfig, window: str | None = None) -> list[dict[str, Any]]:
    """The rule groups (one group: Prometheus evaluates its rules in order, each seeing the ones before); `window`:
    the rates' window, by default the fleet file's `metrics.rate_window`."""
    window = window or cfg.metrics.rate_window
    n = names(window)
    triton = f'{SCRAPED},model=~"{_models_regex(cfg)}"'
    cap = n["max_batch"]
    rules: list[dict[str, Any]] = []
    for pool in cfg.pools:
        mb = pool_max_batch(cfg, pool)
        if mb is not None:
            rules.append({"record": cap, "expr": f"vector({mb})", "labels": {"pool": pool}})
    per_pool = f"on (pool) group_left () {cap}"
    # one rule per recorded name, the engines' expressions joined by `or` (their series never share a label set:
    # each comes from its own target); promtool's lint refuses the same name recorded twice with the same labels
    kv = [
        f"vllm:kv_cache_usage_perc{{{SCRAPED}}} or vllm:gpu_cache_usage_perc{{{SCRAPED}}}",
        f"sglang:token_usage{{{SCRAPED},{SGLANG_RANK0}}}",
        f"tgi_batch_current_max_tokens{{{SCRAPED}}} / tgi_batch_max_total_tokens{{{SCRAPED}}}",
        f'nv_trt_llm_kv_cache_block_metrics{{{triton},kv_cache_block_type="used"}} / ignoring (kv_cache_block_type) '
        f'nv_trt_llm_kv_cache_block_metrics{{{triton},kv_cache_block_type="max"}}',
    ]
    saturation = [
        f"vllm:num_requests_running{{{SCRAPED}}} / {per_pool}",
        f"sglang:num_running_reqs{{{SCRAPED},{SGLANG_RANK0}}} / {per_pool}",
        f"tgi_batch_current_size{{{SCRAPED}}} / {per_pool}",
        f'nv_trt_llm_request_metrics{{{triton},request_type="active"}} / ignoring (request_type) '
        f'nv_trt_llm_request_metrics{{{triton},request_type="max"}}',
    ]
    # the queue an engine reports: the LSTM's covariates and the dashboards' running/waiting panels
    running = [
        f"vllm:num_requests_running{{{SCRAPED}}}",
        f"sglang:num_running_reqs{{{SCRAPED},{SGLANG_RANK0}}}",
        f"tgi_batch_current_size{{{SCRAPED}}}",
        f'max without (request_type) (nv_trt_llm_request_metrics{{{triton},request_type="active"}})',
    ]
    waiting = [
        f"vllm:num_requests_waiting{{{SCRAPED}}}",
        f"sglang:num_queue_reqs{{{SCRAPED},{SGLANG_RANK0}}}",
        f"tgi_queue_size{{{SCRAPED}}}",
        f'max without (request_type) (nv_trt_llm_request_metrics{{{triton},request_type="waiting"}})',
    ]
    requests = [
        f"sum without (finished_reason) (rate(vllm:request_success_total{{{SCRAPED}}}[{window}]))",
        f"sum without (is_streaming) (rate(sglang:num_requests_total{{{SCRAPED}}}[{window}]))",
        f"rate(tgi_request_count{{{SCRAPED}}}[{window}])",
        f"rate(nv_inference_request_success{{{triton}}}[{window}])",
    ]
    rules += [
        {"record": n["kv_usage"], "expr": _union(kv)},
        {"record": n["batch_saturation"], "expr": _union(saturation)},
        {"record": n["requests_rate"], "expr": _union(requests)},
        {"record": n["requests_running"], "expr": _union(running)},
        {"record": n["requests_waiting"], "expr": _union(waiting)},
        # per pool and version
        {"record": n["kv_usage_avg"], "expr": f"avg by (pool, version) ({n['kv_usage']})"},
        {"record": n["kv_usage_max"], "expr": f"max by (pool, version) ({n['kv_usage']})"},
        {"record": n["batch_saturation_avg"], "expr": f"avg by (pool, version) ({n['batch_saturation']})"},
        {"record": n["batch_saturation_max"], "expr": f"max by (pool, version) ({n['batch_saturation']})"},
        {"record": n["requests_pool_rate"], "expr": f"sum by (pool, version) ({n['requests_rate']})"},
        {
            "record": n["requests_pool_share"],
            "expr": f"{n['requests_pool_rate']} / on () group_left () sum({n['requests_pool_rate']})",
        },
        {
            "record": n["requests_version_share"],
            "expr": f"sum by (version) ({n['requests_pool_rate']}) / on () group_left () "
            f"sum({n['requests_pool_rate']})",
        },
    ]
    return [{"name": GROUP, "rules": rules}]


def _union(exprs: list[str]) -> str:
    return " or ".join(f"({e})" for e in exprs)


def engine_rule_file(cfg: FleetConfig, window: str | None = None) -> dict[str, Any]:
    """The rules document, as Prometheus loads it (alertrules/rules/engines/engines.yml)."""
    return {"groups": engine_rules(cfg, window)}
