"""Each engine's real payload maps to the catalog with the fleet file's pool and version; what it lacks is absent."""

from __future__ import annotations

import pytest

from infercast.config import TargetConfig, load_config
from infercast.exporters import dcgm, sglang, tgi, trtllm, vllm
from infercast.exporters.base import ScrapeError, Target
from tests.exporters.conftest import REPO
from tests.exporters.fakes import payload

CONFIG = load_config(REPO / "examples" / "flash-sale.yaml")


def target(kind: str = "vllm", **kw) -> Target:
    return Target.from_config(TargetConfig(name="node-a", kind=kind, url="http://127.0.0.1:1/metrics", **kw), CONFIG)


def values(samples, name):
    return {tuple(sorted(s.labels.items())): s.value for s in samples if s.name == name}


def one(samples, name, **labels):
    found = [s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(found) == 1, (name, labels, found)
    return found[0]


def names(samples):
    return {s.name for s in samples}


def test_vllm_multiprocess_two_engines():
    s = vllm.parse(payload("vllm.prom"), target())
    # chat-v4 is served by version v4 in pool v4-main; each data-parallel engine is an instance
    assert one(s, "infercast_kv_cache_usage_ratio", instance="node-a/0", pool="v4-main", version="v4") == 0.9312
    assert one(s, "infercast_kv_cache_usage_ratio", instance="node-a/1") == 0.9688
    assert one(s, "infercast_requests_running", instance="node-a/0") == 128
    assert one(s, "infercast_requests_waiting", instance="node-a/1") == 60
    # preemptions are the KV block allocation failures
    assert one(s, "infercast_kv_block_allocation_failures_total", instance="node-a/0") == 1870
    # vLLM exports neither fragmentation nor its max batch: absent, not zero
    assert "infercast_kv_cache_fragmentation_ratio" not in names(s)
    assert "infercast_batch_saturation_ratio" not in names(s)
    assert "infercast_memory_efficiency_ratio" not in names(s)


def test_vllm_single_process_and_configured_max_batch():
    s = vllm.parse(payload("vllm-chat-v3.5.prom"), target(max_batch=128))
    assert one(s, "infercast_kv_cache_usage_ratio", instance="node-a", pool="v3.5-fallback", version="v3.5") == 0.5214
    assert one(s, "infercast_batch_saturation_ratio", instance="node-a") == pytest.approx(84 / 128)
    assert one(s, "infercast_kv_block_allocation_failures_total") == 16


def test_vllm_removed_family_names_are_mapped():
    old = (
        payload("vllm-chat-v3.5.prom")
        .replace("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        .replace("vllm:prefix_cache_", "vllm:gpu_prefix_cache_")
    )
    s = vllm.parse(old, target())
    assert one(s, "infercast_kv_cache_usage_ratio") == 0.5214
    assert one(s, "_prefix_cache_queries") == 704876486
    assert one(s, "_prefix_cache_hits") == 364804864


def test_vllm_docs_excerpt_without_engine_label():
    s = vllm.parse(payload("vllm.docs-excerpt.prom"), target(version="v4", pool="v4-main"))
    assert one(s, "infercast_requests_running", instance="node-a", pool="v4-main", version="v4") == 8
    # its batch saturation divides by v4's batcher (the fleet file's, else vLLM's default 256)
    assert one(s, "infercast_batch_saturation_ratio") == 8 / CONFIG.versions["v4"].batcher.max_batch
    assert names(s) == {"infercast_requests_running", "infercast_batch_saturation_ratio"}


def test_vllm_with_engine_extension():
    s = vllm.parse(payload("twin-node.prom"), target())
    assert one(s, "infercast_kv_cache_fragmentation_ratio") == 0.22
    assert one(s, "infercast_memory_efficiency_ratio") == 0.71
    assert one(s, "infercast_batch_saturation_ratio") == 96 / 128  # max_num_seqs from the extension
    # the extension's failure counter (preemptions + rejections) wins over preemptions alone
    assert one(s, "infercast_kv_block_allocation_failures_total") == 57
    assert one(s, "infercast_gpu_memory_used_bytes", node="node-a") == 1.5288238899e11


def test_extension_of_an_unknown_version_is_ignored():
    s = vllm.parse(payload("twin-node.prom").replace('version="1"', 'version="2"'), target())
    assert "infercast_kv_cache_fragmentation_ratio" not in names(s)
    assert one(s, "infercast_kv_block_allocation_failures_total") == 41  # back to preemptions


def test_sglang():
    s = sglang.parse(payload("sglang.prom"), target("sglang"))
    assert one(s, "infercast_kv_cache_usage_ratio", pool="v4-main", version="v4") == 0.8729
    assert one(s, "infercast_requests_running") == 212
    assert one(s, "infercast_requests_waiting") == 57
    assert one(s, "infercast_kv_block_allocation_failures_total") == 2217  # retractions
    assert one(s, "_prefix_cache_queries") == 2385343957
    assert one(s, "_prefix_cache_hits") == 987631631
    assert one(s, "infercast_memory_efficiency_ratio") == pytest.approx((14.96 + 89.5 * 640012 / 733184) / 104.46)
    assert "infercast_batch_saturation_ratio" not in names(s)
    s2 = sglang.parse(payload("sglang-chat-v3.5.prom"), target("sglang", max_batch=236))
    assert one(s2, "infercast_batch_saturation_ratio", version="v3.5") == pytest.approx(118 / 236)


def test_tgi_takes_version_from_the_fleet_file():
    s = tgi.parse(payload("tgi.prom"), target("tgi", pool="v4-main", version="v4", max_batch=236))
    assert one(s, "infercast_kv_cache_usage_ratio", pool="v4-main", version="v4") == pytest.approx(381120 / 407552)
    assert one(s, "infercast_requests_running") == 118
    assert one(s, "infercast_requests_waiting") == 47
    assert one(s, "infercast_batch_saturation_ratio") == 0.5
    assert "infercast_kv_block_allocation_failures_total" not in names(s)


def test_trtllm_two_models_two_versions():
    s = trtllm.parse(payload("tensorrt-llm-triton.prom"), target("trtllm"))
    assert one(s, "infercast_kv_cache_usage_ratio", version="v4", pool="v4-main") == 0.9152
    assert one(s, "infercast_kv_cache_usage_ratio", version="v3.5", pool="v3.5-fallback") == 0.383
    assert one(s, "infercast_batch_saturation_ratio", version="v4") == 131 / 256  # request_type="max"
    assert one(s, "infercast_requests_waiting", version="v4") == 33
    # paused_requests is a gauge, not turned into a failure counter
    assert "infercast_kv_block_allocation_failures_total" not in names(s)


@pytest.mark.parametrize("host_label", ["Hostname", "hostname"])
def test_dcgm_both_hostname_spellings(host_label):
    text = payload("dcgm-exporter.prom").replace("Hostname=", f"{host_label}=")
    s = dcgm.parse(text, Target("dcgm-a", "dcgm", "http://x"))
    gpu0 = {"node": "gpu-node-17", "gpu": "0"}
    assert one(s, "infercast_gpu_memory_used_bytes", **gpu0) == 74108 * 2**20
    assert one(s, "infercast_gpu_utilization_ratio", **gpu0) == 0.97
    assert one(s, "infercast_gpu_temperature_celsius", **gpu0) == 64
    assert one(s, "infercast_gpu_power_watts", **gpu0) == 592
    assert one(s, "infercast_gpu_sm_occupancy_ratio", **gpu0) == 0.2883
    assert one(s, "infercast_gpu_ecc_errors_total", type="uncorrectable", **gpu0) == 0
    used = one(s, "infercast_gpu_memory_used_bytes", **gpu0)
    total = one(s, "infercast_gpu_memory_total_bytes", **gpu0)
    assert 0.8 < used / total < 1.0
    # pod mapping labels are kept
    assert one(s, "infercast_gpu_memory_used_bytes", pod="vllm-chat-v4-6f9c8d7b5-x2k4q", gpu="0") == used


def test_dcgm_without_hostname_uses_the_target_node():
    lines = [ln for ln in payload("dcgm-exporter.prom").splitlines()]
    text = "\n".join(ln.replace('Hostname="gpu-node-17",', "") for ln in lines)
    s = dcgm.parse(text, Target("dcgm-a", "dcgm", "http://x", node="rack3-n7"))
    assert one(s, "infercast_gpu_temperature_celsius", node="rack3-n7", gpu="1") > 0


@pytest.mark.parametrize(
    ("mod", "kind"), [(vllm, "vllm"), (sglang, "sglang"), (tgi, "tgi"), (trtllm, "trtllm"), (dcgm, "dcgm")]
)
def test_someone_elses_payload_is_not_accepted(mod, kind):
    # a dcgm body on a vLLM target (or the reverse) is a misconfiguration, reported as such
    other = "dcgm-exporter.prom" if kind != "dcgm" else "tgi.prom"
    with pytest.raises(ScrapeError, match=r"no .* (families|fields)"):
        mod.parse(payload(other), target(kind))


def test_unknown_families_of_newer_releases_are_ignored():
    newer = payload("vllm-chat-v3.5.prom") + (
        "# HELP vllm:kv_cache_quantum_flux_ratio A family from the future.\n"
        "# TYPE vllm:kv_cache_quantum_flux_ratio gauge\n"
        'vllm:kv_cache_quantum_flux_ratio{engine="0",model_name="chat-v3.5"} 0.5\n'
    )
    assert vllm.parse(newer, target()) == vllm.parse(payload("vllm-chat-v3.5.prom"), target())


def test_emitter_checks_labels_against_the_catalog():
    from infercast.catalog import GPU_POWER_WATTS, KV_CACHE_USAGE_RATIO
    from infercast.exporters.base import Emitter

    e = Emitter()
    e.add(KV_CACHE_USAGE_RATIO, {"pool": "p", "version": "v", "instance": "i"}, 0.5)
    e.add(GPU_POWER_WATTS, {"node": "n", "gpu": "0", "uuid": "u", "pod": "x"}, 300.0)  # attribution label kept
    e.add("_internal_rate", {"anything": "goes"}, 1.0)
    with pytest.raises(ValueError, match="catalog has"):
        e.add(KV_CACHE_USAGE_RATIO, {"pool": "p", "instance": "i"}, 0.5)  # no version
    with pytest.raises(ValueError, match="no such family"):
        e.add("infercast_kv_cache_usage", {"pool": "p", "version": "v", "instance": "i"}, 0.5)


def test_batch_saturation_defaults_to_the_pools_engines_then_the_versions_batcher():
    """Issue 38 item 1: a fleet file that gives `pools.<pool>.engines.max_batch` (or nothing: vLLM's 256) and no
    per-target `max_batch` got no `infercast_batch_saturation_ratio` at all; the user sees it now, with the same
    divisor as the engines-mode rules (`pool_max_batch`)."""
    from infercast.alertrules.engines import pool_max_batch
    from infercast.config import parse_config

    doc = CONFIG.model_dump(mode="json", exclude_none=True)
    doc["pools"]["v3.5-fallback"]["engines"] = {"max_batch": 128}
    cfg = parse_config(doc)
    text = payload("vllm-chat-v3.5.prom")

    def parsed(**kw):
        tc = TargetConfig(name="node-a", kind="vllm", url="http://127.0.0.1:1/metrics", **kw)
        return vllm.parse(text, Target.from_config(tc, cfg))

    running = one(parsed(pool="v3.5-fallback"), "infercast_requests_running")
    assert one(parsed(pool="v3.5-fallback"), "infercast_batch_saturation_ratio") == pytest.approx(running / 128)
    assert pool_max_batch(cfg, "v3.5-fallback") == 128  # the engines-mode rules divide by the same
    # no engines.max_batch: the version's batcher, which a fleet file without one has at vLLM's default 256
    assert cfg.versions["v3.5"].batcher.max_batch != 256  # the twin's fixed batcher of this fleet file, ...
    del doc["versions"]["v3.5"]["batcher"]
    cfg = parse_config(doc)  # ... left out
    assert one(parsed(version="v3.5"), "infercast_batch_saturation_ratio") == pytest.approx(running / 256)
    # the target's own max_batch still wins
    assert one(parsed(pool="v3.5-fallback", max_batch=100), "infercast_batch_saturation_ratio") == pytest.approx(
        running / 100
    )
