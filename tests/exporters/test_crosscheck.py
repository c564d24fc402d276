"""Engine values are range-checked and cross-checked, keyed on every label that identifies a model version (issue 12).

Each test reproduces a silent wrong value the exporter used to publish; now the user sees either the right series or
`infercast_target_up 0` with a reason naming the bad value."""

from __future__ import annotations

import logging

import pytest

from infercast.catalog import KV_CACHE_USAGE_RATIO
from infercast.config import TargetConfig, load_config
from infercast.exporters import dcgm, sglang, tgi, trtllm, vllm
from infercast.exporters.base import FAMILY_DROPPED, Sample, ScrapeError, Target
from infercast.exporters.derive import avalanche_risk, derive, health
from infercast.exporters.server import Exporter, build_sources
from tests.exporters.conftest import REPO, fleet
from tests.exporters.fakes import Route, payload
from tests.exporters.test_server import get, render, samples

CONFIG = load_config(REPO / "examples" / "flash-sale.yaml")


def target(kind: str = "vllm", **kw) -> Target:
    return Target.from_config(TargetConfig(name="node-a", kind=kind, url="http://127.0.0.1:1/metrics", **kw), CONFIG)


def values(out, name, **labels):
    return sorted(s.value for s in out if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()))


# --- TensorRT-LLM / Triton -----------------------------------------------------------------------------------------
def trt_page(versions: dict[str, tuple[int, int, float]]) -> str:
    """A Triton page serving chat-v4 in several model versions: {version: (used blocks, max blocks, fraction)}."""
    lines = ["# TYPE nv_trt_llm_kv_cache_block_metrics gauge", "# TYPE nv_trt_llm_request_metrics gauge"]
    for v, (used, top, fraction) in versions.items():
        for kind, value in (("used", used), ("max", top), ("free", top - used), ("fraction", fraction)):
            labels = f'kv_cache_block_type="{kind}",model="chat-v4",version="{v}"'
            lines.append(f"nv_trt_llm_kv_cache_block_metrics{{{labels}}} {value}")
        for kind, value in (("active", 10), ("waiting", 0), ("max", 64)):
            lines.append(f'nv_trt_llm_request_metrics{{model="chat-v4",request_type="{kind}",version="{v}"}} {value}')
    return "\n".join(lines) + "\n"


def test_triton_model_versions_do_not_overwrite_each_other():
    # before: versions "1" at 95% and "2" at 5% of the same model reported one series of 5% (the last read)
    out = trtllm.parse(trt_page({"1": (6080, 6400, 0.95), "2": (320, 6400, 0.05)}), target("trtllm"))
    assert values(out, "infercast_kv_cache_usage_ratio", instance="node-a/v1", version="v4") == [0.95]
    assert values(out, "infercast_kv_cache_usage_ratio", instance="node-a/v2", version="v4") == [0.05]
    # and the pool's health sees the full one (the worst instance decides)
    dims = health(CONFIG, out)
    assert dims[("v4-main", "v4")]["kv_usage"] == pytest.approx(20.0)  # ramp(0.95, 0.75, 1.0)


def test_one_triton_version_keeps_the_plain_instance_name():
    out = trtllm.parse(payload("tensorrt-llm-triton.prom"), target("trtllm"))
    assert values(out, "infercast_kv_cache_usage_ratio", instance="node-a", version="v4") == [0.9152]


def test_trtllm_fraction_is_cross_checked_against_used_over_max():
    # before: `fraction` was taken as is; a page saying 0.05 while 6080 of 6400 blocks are used reported 5%
    with pytest.raises(ScrapeError, match=r"fraction 0.05 disagrees with used / max = 6080 / 6400 = 0.9500"):
        trtllm.parse(trt_page({"1": (6080, 6400, 0.05)}), target("trtllm"))
    with pytest.raises(ScrapeError, match="fraction 57 is over 1"):
        trtllm.parse(trt_page({"1": (6080, 6400, 57.0)}), target("trtllm"))
    # the rounding of the text is not a disagreement (0.383 vs 2598 / 6784 = 0.38296)
    assert values(trtllm.parse(trt_page({"1": (2598, 6784, 0.383)}), target("trtllm")), KV_CACHE_USAGE_RATIO) == [0.383]


# --- ratios above 1 ---------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("mod", "kind", "page", "old", "new", "reason"),
    [
        (vllm, "vllm", "vllm.prom", " 0.9312", " 57.0", "vllm:kv_cache_usage_perc has value '57.0' (expected 0-1)"),
        (vllm, "vllm", "twin-node.prom", "0.22", "2.2", "fragmentation_ratio has value '2.2' (expected 0-1)"),
        (sglang, "sglang", "sglang.prom", "} 0.8729", "} 87.29", "sglang:token_usage has value '87.29' (expected 0-1)"),
        (dcgm, "dcgm", "dcgm-exporter.prom", "} 97", "} 970", "DCGM_FI_DEV_GPU_UTIL has value '970' (expected 0-100)"),
    ],
)
def test_a_ratio_over_its_range_is_an_error_not_a_value(mod, kind, page, old, new, reason):
    # before: a `kv_cache_usage_perc` of 57.0 was exported as a usage of 57 (5,700%)
    text = payload(page)
    assert old in text
    with pytest.raises(ScrapeError, match=reason.replace("(", r"\(").replace(")", r"\)")):
        mod.parse(text.replace(old, new, 1), target(kind))


def test_derived_ratios_over_1_are_errors():
    text = payload("tgi.prom")
    tokens = next(ln for ln in text.splitlines() if ln.startswith("tgi_batch_current_max_tokens"))
    with pytest.raises(ScrapeError, match=r"infercast_kv_cache_usage_ratio of 'node-a' would be 2\.5"):
        tgi.parse(
            text.replace(tokens, tokens.rsplit(" ", 1)[0] + " 1018880"),
            target("tgi", pool="v4-main", version="v4"),
        )
    # 212 running on an engine the fleet file says takes 128: the fleet file or the engine is wrong; say so.  The
    # divisor is the fleet file's (since issue 38 a default one too: vLLM's 256), so only that family goes, with
    # the reason; the target and the rest of its page stay
    out = sglang.parse(payload("sglang.prom"), target("sglang", max_batch=128))
    dropped = [s for s in out if s.name == FAMILY_DROPPED]
    assert [s.labels["family"] for s in dropped] == ["infercast_batch_saturation_ratio"]
    assert "would be 1.656, over 1" in dropped[0].labels["reason"] and "--max-num-seqs" in dropped[0].labels["reason"]
    assert "infercast_batch_saturation_ratio" not in {s.name for s in out}
    assert "infercast_kv_cache_usage_ratio" in {s.name for s in out}


def test_an_out_of_range_value_drops_its_family_with_the_reason(fixture_server, caplog):
    # issue 24 item 6: the family goes, not the target (the rest of the page is kept; tests/exporters/
    # test_scrape_faults.py); the value is never exported
    fixture_server.routes["/bad"] = Route(payload("vllm.prom").replace(" 0.9312", " 57.0", 1))
    config = fleet([{"name": "bad", "kind": "vllm", "url": fixture_server.url("/bad")}])
    exp = Exporter(config, build_sources(config))
    caplog.set_level(logging.WARNING, logger="infercast.exporters.server")
    exp.scrape()
    m = samples(render(exp))
    exp.close()
    assert get(m, "infercast_target_up", target="bad") == 1
    assert not [k for k in m if k[0] == "infercast_kv_cache_usage_ratio"]
    assert any("vllm:kv_cache_usage_perc dropped" in r.getMessage() and "(expected 0-1)" in r.getMessage()
               for r in caplog.records)  # fmt: skip


# --- served models the fleet file does not know -----------------------------------------------------------------------
def test_a_served_model_missing_from_the_fleet_file_is_reported():
    # before: model "llama-unknown" became its own version "llama-unknown", splitting the pool's health score
    text = payload("vllm-chat-v3.5.prom").replace('model_name="chat-v3.5"', 'model_name="llama-unknown"')
    with pytest.raises(ScrapeError, match=r"serves model 'llama-unknown', which no version of the fleet file names"):
        vllm.parse(text, target())
    # a target the fleet file gives a version: that is the version (the engine's alias is the operator's call)
    out = vllm.parse(text, target(version="v3.5", pool="v3.5-fallback"))
    assert {s.labels["version"] for s in out if "version" in s.labels} == {"v3.5"}


def test_two_series_landing_on_the_same_labels_are_an_error():
    # two unknown models on a target with one version would overwrite each other: refused, naming the labels
    text = payload("vllm-chat-v3.5.prom")
    extra = "\n".join(
        ln.replace('model_name="chat-v3.5"', 'model_name="other"')
        for ln in text.splitlines()
        if ln.startswith("vllm:num_requests_running")
    )
    text = text.replace('model_name="chat-v3.5"', 'model_name="alias"') + extra + "\n"
    with pytest.raises(ScrapeError, match="two series of the page map to infercast_requests_running"):
        vllm.parse(text, target(version="v3.5"))


# --- SGLang queue depth in the avalanche risk ---------------------------------------------------------------------
def test_sglang_queue_depth_counts_in_the_avalanche_risk():
    # before: an SGLang pool at 30% KV with 17 requests waiting per running one scored a risk of 0.0
    text = payload("sglang.prom").replace("} 212.0", "} 4.0").replace("} 57.0", "} 68.0").replace("} 0.8729", "} 0.30")
    out = sglang.parse(text, target("sglang"))
    assert values(out, "infercast_requests_waiting") == [68.0] and values(out, "infercast_requests_running") == [4.0]
    dims = health(CONFIG, out)
    assert dims[("v4-main", "v4")]["queue_depth"] == 0.0
    risk = avalanche_risk(CONFIG, out, dims)["v4-main"]
    assert risk == 100.0  # full own pressure, and v3.5's headroom is unknown (counts as none)
    calm = [Sample(s.name, s.labels, 1.0 if s.name == "infercast_requests_waiting" else s.value) for s in out]
    assert avalanche_risk(CONFIG, calm, health(CONFIG, calm))["v4-main"] == 0.0
    assert "infercast_avalanche_risk_score" in {s.name for s in derive(CONFIG, out)}
