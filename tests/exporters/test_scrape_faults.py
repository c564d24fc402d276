"""Issue 24 item 6: scrape faults are visible and local.

- An expected engine metric that is missing (renamed by an upgrade) gets `infercast_target_metric_missing{target,
  metric} 1` and one log line; before, it was dropped in silence (`up` stayed 1 and the forecast simply stopped).
- A malformed family drops that family, not the target, and counts in `infercast_target_parse_errors_total`; before,
  one bad line downed the whole target.
- TensorRT-LLM's README example page (tests/data/engines/tensorrt-llm-readme.prom) parses: running, waiting and
  saturation are exported and the one family it cannot trust is named; before, the target went down with
  "fraction ... disagrees".
"""

from __future__ import annotations

import logging

from infercast.exporters.base import TextParser
from infercast.exporters.server import Exporter, build_sources
from tests.exporters.conftest import fleet
from tests.exporters.fakes import Route, payload
from tests.exporters.test_server import get, render, samples

RUNNING = "vllm:num_requests_running"


def _exporter(fixture_server, text: str, kind: str = "vllm", **tc) -> Exporter:
    fixture_server.routes["/page"] = Route(text)
    config = fleet([{"name": "node", "kind": kind, "url": fixture_server.url("/page"), **tc}])
    return Exporter(config, build_sources(config))


def test_a_renamed_engine_metric_is_a_missing_series_and_one_log_line_while_the_target_stays_up(fixture_server, caplog):
    text = payload("vllm.prom").replace("vllm:kv_cache_usage_perc", "vllm:kv_cache_usage_fraction")
    exp = _exporter(fixture_server, text)
    caplog.set_level(logging.INFO, logger="infercast.exporters.server")
    try:
        exp.scrape()
        exp.scrape()
        m = samples(render(exp))
    finally:
        exp.close()
    assert get(m, "infercast_target_up", target="node") == 1
    assert get(m, "infercast_target_metric_missing", target="node", metric="vllm:kv_cache_usage_perc") == 1
    assert get(m, "infercast_target_metric_missing", target="node", metric=RUNNING) == 0
    said = [r.getMessage() for r in caplog.records if "is missing from its page" in r.getMessage()]
    assert len(said) == 1 and "vllm:kv_cache_usage_perc" in said[0]  # once, not every cycle
    assert not [k for k in m if k[0] == "infercast_kv_cache_usage_ratio"]
    assert [k for k in m if k[0] == "infercast_requests_running"]  # the rest of the page is there


def test_a_malformed_family_drops_that_family_not_the_target(fixture_server, caplog):
    text = payload("vllm.prom").replace(f'{RUNNING}{{engine="0"', f"{RUNNING}{{engine=0", 1)
    assert text != payload("vllm.prom")
    exp = _exporter(fixture_server, text)
    caplog.set_level(logging.WARNING, logger="infercast.exporters.server")
    try:
        exp.scrape()
        exp.scrape()
        m = samples(render(exp))
    finally:
        exp.close()
    assert get(m, "infercast_target_up", target="node") == 1  # before: 0, the whole page refused
    assert get(m, "infercast_target_parse_errors_total", target="node", family=RUNNING) == 2
    assert not [k for k in m if k[0] == "infercast_requests_running"]  # that family, this round: gone
    assert [k for k in m if k[0] == "infercast_kv_cache_usage_ratio"]  # the others: kept
    assert get(m, "infercast_target_metric_missing", target="node", metric=RUNNING) == 0  # dropped, not missing
    said = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(said) == 1 and RUNNING in said[0] and "malformed labels" in said[0]


def test_an_out_of_range_value_drops_its_family_with_the_reason(fixture_server):
    text = payload("vllm.prom").replace(" 0.9312", " 57.0", 1)
    exp = _exporter(fixture_server, text)
    try:
        exp.scrape()
        m = samples(render(exp))
    finally:
        exp.close()
    assert get(m, "infercast_target_up", target="node") == 1
    assert get(m, "infercast_target_parse_errors_total", target="node", family="vllm:kv_cache_usage_perc") == 1
    assert not [k for k in m if k[0] == "infercast_kv_cache_usage_ratio"]  # 57.0 is never exported as a ratio


def test_a_page_whose_only_family_is_malformed_is_down_naming_the_family(fixture_server, caplog):
    exp = _exporter(fixture_server, "tgi_queue_size NaN\ntgi_batch_current_size 3 x y\n", kind="tgi", version="v4")
    caplog.set_level(logging.WARNING, logger="infercast.exporters.server")
    try:
        exp.scrape()
        m = samples(render(exp))
    finally:
        exp.close()
    assert get(m, "infercast_target_up", target="node") == 0
    down = next(r.getMessage() for r in caplog.records if "is down" in r.getMessage())
    assert "tgi_queue_size dropped" in down and "tgi_batch_current_size dropped" in down


def test_an_html_page_still_fails_the_scrape():
    p = TextParser({"m"}, isolate=True)
    try:
        p.feed("<html><body>502</body></html>\n")
    except Exception as e:
        assert "not a Prometheus sample" in str(e)
    else:
        raise AssertionError("an HTML body must not parse")


def test_the_tensorrt_llm_readme_page_parses_and_names_the_family_it_cannot_trust(fixture_server, caplog):
    """The README's page says fraction 0.4875 beside 1 used of 6239 blocks.  KV usage for that model is dropped
    (which figure is true cannot be told) and the family named; running, waiting and saturation are exported."""
    exp = _exporter(fixture_server, payload("tensorrt-llm-readme.prom"), kind="trtllm", pool="v4-main", version="v4")
    caplog.set_level(logging.WARNING, logger="infercast.exporters.server")
    try:
        exp.scrape()
        m = samples(render(exp))
    finally:
        exp.close()
    assert get(m, "infercast_target_up", target="node") == 1  # before: 0, "fraction 0.4875 disagrees"
    fam = "nv_trt_llm_kv_cache_block_metrics"
    assert get(m, "infercast_target_parse_errors_total", target="node", family=fam) == 1
    assert get(m, "infercast_requests_waiting", instance="node") == 1
    assert get(m, "infercast_requests_running", instance="node") == 0
    assert get(m, "infercast_batch_saturation_ratio", instance="node") == 0
    assert not [k for k in m if k[0] == "infercast_kv_cache_usage_ratio"]
    said = next(r.getMessage() for r in caplog.records if "dropped" in r.getMessage())
    assert fam in said and "fraction 0.4875 disagrees with used / max = 1 / 6239" in said


def test_every_engine_fixture_has_its_expected_families():
    """The EXPECTED lists are true of the real pages: no fixture reports a missing metric."""
    from infercast.exporters.base import diagnostics, parse_text
    from infercast.exporters.sources import MODULES

    pages = {
        "vllm": ["vllm.prom", "vllm-chat-v3.5.prom"],
        "sglang": ["sglang.prom", "sglang-chat-v3.5.prom"],
        "tgi": ["tgi.prom"],
        "trtllm": ["tensorrt-llm-triton.prom", "tensorrt-llm-readme.prom"],
        "dcgm": ["dcgm-exporter.prom"],
    }
    for kind, files in pages.items():
        mod = MODULES[kind]
        for f in files:
            raw = parse_text(payload(f), mod.WANTED, mod.MAXIMA)
            missing = [s for s in diagnostics(mod.EXPECTED, raw, {}) if s.name == "_metric_missing"]
            assert missing == [], (f, missing)
