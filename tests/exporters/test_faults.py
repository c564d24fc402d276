"""The scrape budget (issue 12): a deadline that really stops parsing, a per-target series cap, bounded memory with
every fault at once.  What the user sees: the bad target down with its reason, everything else served on time."""

from __future__ import annotations

import time
import tracemalloc

import pytest

from infercast.exporters.base import Budget, ScrapeError, Target, TextParser, parse_text
from infercast.exporters.server import Exporter, build_sources
from infercast.exporters.sources import HttpSource
from infercast.exporters.vllm import WANTED
from tests.exporters.conftest import fleet
from tests.exporters.fakes import FixtureServer, Route, payload
from tests.exporters.test_server import get, render, samples


def distinct_labels(size: int) -> str:
    line = 'vllm:num_requests_running{{engine="0",model_name="model-{:08d}-padding-padding"}} 1\n'
    return "".join(line.format(i) for i in range(size // len(line.format(0))))


def source(url: str, timeout: float, max_series: int = 2000) -> HttpSource:
    return HttpSource(Target("t", "vllm", url, version="v4"), timeout, 16 * 1024 * 1024, max_series=max_series)


def test_a_page_of_distinct_labels_is_refused_at_the_series_cap():
    # before: a 10 MB page of distinct model names parsed for 6.1 s at 258 MB and exported every one of them
    srv = FixtureServer({"/m": Route(distinct_labels(10_000_000))})
    try:
        tracemalloc.start()
        # a timeout no busy machine reaches: the refusal must be the series cap's, not the deadline's
        with pytest.raises(ScrapeError, match="more than 2000 series of the families read"):
            source(srv.url("/m"), timeout=120.0).collect()
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    finally:
        srv.close()
    assert peak < 20 * 1024 * 1024  # the page is never held whole: chunks, one partial line, 2,000 series


def test_parsing_stops_at_the_deadline_in_the_scraping_thread():
    # before: "timed out after 2s" was reported while parsing went on in a background thread
    line = 'python_other_family{label_a="value-a",label_b="value-b",le="0.5"} 12345.0\n'  # shape-checked only
    text = line * (14_000_000 // len(line)) + 'vllm:num_requests_running{engine="0",model_name="chat-v4"} 1\n'
    t0 = time.monotonic()
    parse_text(text, WANTED)
    unbounded = time.monotonic() - t0
    srv = FixtureServer({"/m": Route(text)})
    timeout = min(0.2, unbounded / 4)
    try:
        # collect() raises the deadline's error itself (the parsing ran in this thread, so nothing goes on after
        # it); how soon after the deadline is bench/faults.py's figure, not a test's (issue 25: no wall-clock
        # assertion in a test)
        with pytest.raises(ScrapeError, match=f"timed out after {timeout:g}s"):
            source(srv.url("/m"), timeout=timeout).collect()
    finally:
        srv.close()
    # the parser alone, with a deadline already past, stops within one check interval
    p = TextParser(WANTED, budget=Budget(deadline=time.monotonic() - 1, timeout=2.0))
    with pytest.raises(ScrapeError, match="still parsing the body"):
        p.feed(text)
    assert p._lineno <= 256


def test_lines_longer_than_the_caps_are_refused():
    with pytest.raises(ScrapeError, match="longer than 65536 characters"):
        parse_text("# " + "x" * 70_000 + "\n", WANTED)
    long_label = 'vllm:num_requests_running{engine="0",model_name="' + "m" * 3000 + '"} 1\n'
    with pytest.raises(ScrapeError, match=r"series of 3053 characters \(at most 2048\)"):
        parse_text(long_label, WANTED)


def test_an_abandoned_scrape_ends_soon_after_the_cycle_deadline(fixture_server):
    # the exporter reports the target timed out at the deadline, and its thread is done shortly after
    fixture_server.routes["/cardinality"] = Route(distinct_labels(10_000_000))
    fixture_server.routes["/dribble"] = Route(payload("vllm.prom"), dribble=0.01)
    targets = [
        {"name": "good", "kind": "vllm", "url": fixture_server.url("/vllm")},
        {"name": "cardinality", "kind": "vllm", "url": fixture_server.url("/cardinality")},
        {"name": "dribble", "kind": "vllm", "url": fixture_server.url("/dribble")},
    ]
    config = fleet(targets, scrape_timeout_seconds=1.0)
    exp = Exporter(config, build_sources(config))
    exp.scrape()
    m = samples(render(exp))
    assert get(m, "infercast_target_up", target="good") == 1
    assert get(m, "infercast_target_up", target="cardinality") == 0
    assert get(m, "infercast_target_up", target="dribble") == 0  # the cycle ended at its deadline, not the page's end
    assert len([k for k in m if k[0] == "infercast_requests_running"]) == 2  # good's two engines, nothing else
    deadline = time.monotonic() + 60  # a guard against a thread that never ends, sized for a busy machine
    while time.monotonic() < deadline and not all(st.future.done() for st in exp.states):
        time.sleep(0.05)
    assert all(st.future.done() for st in exp.states), "a scrape thread outlived its deadline"
    exp.close()


@pytest.mark.slow
def test_the_serving_exporter_with_every_fault_at_once():
    # before (same scenario, bench/faults.py on the old checkout): /metrics 500 after one POST, answers taking
    # 15x the timeout, 1.4 GiB above idle; docs/hardening.md has both runs
    from bench.faults import run

    # honest slack for this script's own requests (issue 38 item 10: a POST waited past 10 s on a machine at load
    # 7-11 and failed with ReadTimeout while the exporter was right); no wall-clock assertion
    r = run(cycles=3, timeout=2.0, client_timeout=120.0)
    assert r["exporter_exited"] is None
    assert r["metrics_status"] == [200, 200, 200] and r["good_target_up"]
    # every /metrics answered (above) is the test; how long each took against the timeout is the bench's figure
    # (bench/faults.py, docs/hardening.md): under load it read 2.4x once while the behaviour was right (issue 25)
    assert r["peak_growth_mib"] <= 200
    assert r["hostile_posts_answered"] == ["400", "400"]
    assert r["peak_threads"] <= 64 + (2 * 32 + 4) + 16  # listener cap + scrape pool + the process's own
