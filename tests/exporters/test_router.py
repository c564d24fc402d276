"""The router SDK: what a Python router records is what Prometheus scrapes, and bad values are refused by name."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, generate_latest

from infercast.config import load_config
from infercast.exporters.router import MAX_COUNT, RouterRecorder, apply_ingest, known_label_sets, parse_ingest
from infercast.exporters.server import Exporter
from tests.exporters.conftest import REPO


def test_counts_are_scraped_as_catalog_counters():
    rec = RouterRecorder()
    rec.record_request("v4-main", "v4", "urgent", "ok", 40)
    rec.record_request("v4-main", "v4", "urgent", "ok", 2)
    rec.record_request("v3.5-fallback", "v3.5", "low", "shed")
    rec.record_degradation("v4", "v3.5", "oom", 3)
    reg = CollectorRegistry()
    reg.register(rec)
    text = generate_latest(reg).decode()
    # what the user sees on /metrics
    assert 'infercast_router_requests_total{outcome="ok",pool="v4-main",priority="urgent",version="v4"} 42.0' in text
    assert 'infercast_router_requests_total{outcome="shed",pool="v3.5-fallback",priority="low",version="v3.5"} 1.0' in (
        text
    )
    assert 'infercast_degradations_total{from_version="v4",reason="oom",to_version="v3.5"} 3.0' in text
    assert "# TYPE infercast_router_requests_total counter" in text
    assert (
        reg.get_sample_value(
            "infercast_degradations_total", {"from_version": "v4", "to_version": "v3.5", "reason": "oom"}
        )
        == 3.0
    )


def test_snapshot_sums_by_outcome_and_reason():
    rec = RouterRecorder()
    rec.record_request("a", "v4", "normal", "ok", 5)
    rec.record_request("b", "v3.5", "urgent", "ok", 7)
    rec.record_request("b", "v3.5", "urgent", "timeout", 1)
    rec.record_degradation("v4", "v3.5", "memory_pressure", 2)
    rec.record_degradation("v4", "v3.5", "oom", 1)
    snap = rec.snapshot()
    assert snap["requests_by_outcome"] == {"ok": 12, "timeout": 1}
    assert snap["degradations_by_reason"] == {"memory_pressure": 2, "oom": 1}
    assert snap["requests"][("b", "v3.5", "urgent", "ok")] == 7


@pytest.mark.parametrize(
    ("call", "bad"),
    [
        (lambda r: r.record_request("p", "v4", "vip", "ok"), "'vip'"),
        (lambda r: r.record_request("p", "v4", "urgent", "exploded"), "'exploded'"),
        (lambda r: r.record_degradation("v4", "v3.5", "gremlins"), "'gremlins'"),
        (lambda r: r.record_request("", "v4", "urgent", "ok"), "pool"),
        (lambda r: r.record_request("p", "v4", "urgent", "ok", -1), "-1"),
        (lambda r: r.record_request("p", "v4", "urgent", "ok", 1.5), "1.5"),
    ],
)
def test_bad_values_raise_valueerror_naming_them(call, bad):
    rec = RouterRecorder()
    with pytest.raises(ValueError, match=bad.replace(".", r"\.")):
        call(rec)
    assert rec.snapshot()["requests"] == {} and rec.snapshot()["degradations"] == {}


def test_thread_safe_under_concurrent_recording():
    rec = RouterRecorder()

    def work():
        for _ in range(2000):
            rec.record_request("p", "v4", "normal", "ok")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for _ in range(50):
        list(rec.collect())
    for t in threads:
        t.join()
    assert rec.snapshot()["requests"][("p", "v4", "normal", "ok")] == 8000


def test_ingest_applies_all_or_nothing():
    rec = RouterRecorder()
    body = {
        "requests": [{"pool": "p", "version": "v4", "priority": "urgent", "outcome": "ok", "n": 10}],
        "degradations": [{"from_version": "v4", "to_version": "v3.5", "reason": "timeout"}],
    }
    assert apply_ingest(rec, body) == 2
    assert rec.snapshot()["degradations"] == {("v4", "v3.5", "timeout"): 1}
    bad = {
        "requests": [
            {"pool": "p", "version": "v4", "priority": "urgent", "outcome": "ok", "n": 10},
            {"pool": "p", "version": "v4", "priority": "urgent", "outcome": "nope"},
        ]
    }
    with pytest.raises(ValueError, match=r"requests\[1\].*'nope'"):
        apply_ingest(rec, bad)
    # the valid first item of the rejected body was not applied
    assert rec.snapshot()["requests"][("p", "v4", "urgent", "ok")] == 10


@pytest.mark.parametrize(
    ("body", "msg"),
    [
        ([], "JSON object"),
        ({"requests": {}}, "must be a list"),
        ({"reqs": []}, "unknown keys"),
        ({"requests": [{"pool": "p"}]}, "version"),
        ({"requests": [{"pool": "p", "version": "v", "priority": "low", "outcome": "ok", "x": 1}]}, "unknown keys"),
        ({"degradations": [{"from_version": "a", "to_version": "b", "reason": "oom", "n": True}]}, "True"),
    ],
)
def test_ingest_rejects_malformed_bodies(body, msg):
    with pytest.raises(ValueError, match=msg):
        parse_ingest(body)


def test_cardinality_guard_refuses_new_label_sets():
    rec = RouterRecorder(max_series=2)
    rec.record_request("a", "v", "low", "ok")
    rec.record_request("b", "v", "low", "ok")
    rec.record_request("b", "v", "low", "ok")  # existing label set still counts
    with pytest.raises(ValueError, match="label sets"):
        rec.record_request("c", "v", "low", "ok")
    assert sum(rec.snapshot()["requests"].values()) == 3


# --- issue 12: bounded counts, the fleet file's names, label sets known in advance -------------------------------
def test_counts_are_bounded_in_the_sdk_and_the_ingest():
    # before: n = 10**400 was counted, and every /metrics after it answered HTTP 500
    rec = RouterRecorder()
    with pytest.raises(ValueError, match="at most 1,000,000"):
        rec.record_request("p", "v4", "urgent", "ok", MAX_COUNT + 1)
    with pytest.raises(ValueError, match="a 401-digit number"):
        parse_ingest({"requests": [{"pool": "p", "version": "v4", "priority": "low", "outcome": "ok", "n": 10**400}]})
    rec.record_request("p", "v4", "urgent", "ok", MAX_COUNT)
    assert rec.snapshot()["requests"][("p", "v4", "urgent", "ok")] == MAX_COUNT


def test_known_label_sets_start_at_zero_from_the_first_scrape():
    # before: infercast_degradations_total was absent from a calm exporter (rate() and alerts saw nothing)
    config = load_config(REPO / "examples" / "flash-sale.yaml")
    exp = Exporter(config, [])
    exp.scrape()
    reg = CollectorRegistry(auto_describe=False)
    reg.register(exp)
    text = generate_latest(reg).decode()
    exp.close()
    for reason in ("timeout", "oom", "breaker_open", "memory_pressure", "context_too_long", "health_check", "manual"):
        assert f'infercast_degradations_total{{from_version="v4",reason="{reason}",to_version="v3.5"}} 0.0' in text
    for pool, version in (("v4-main", "v4"), ("v4-standby", "v4"), ("v3.5-fallback", "v3.5")):
        for outcome in ("ok", "error", "timeout", "rejected", "shed", "retried"):
            labels = f'outcome="{outcome}",pool="{pool}",priority="urgent",version="{version}"'
            assert f"infercast_router_requests_total{{{labels}}} 0.0" in text
    requests_, degradations = known_label_sets(config)
    assert len(requests_) == 3 * 3 * 6 and len(degradations) == 1 * 7  # v4 -> v3.5 is the only degradation path
    # a count that comes in replaces the 0 (it is not a second series)
    exp.recorder.record_degradation("v4", "v3.5", "oom", 2)
    assert exp.recorder.snapshot()["degradations"][("v4", "v3.5", "oom")] == 2


INGEST_ITEM = st.fixed_dictionaries(
    {
        "pool": st.sampled_from(["v4-main", "v3.5-fallback", "nope", "", 5]),
        "version": st.sampled_from(["v4", "v3.5", "v9", None]),
        "priority": st.sampled_from(["urgent", "low", "vip"]),
        "outcome": st.sampled_from(["ok", "error", "exploded"]),
    },
    optional={
        "n": st.one_of(
            st.integers(-5, 2 * MAX_COUNT), st.just(10**400), st.floats(allow_nan=True), st.booleans(), st.text()
        )
    },
)


@settings(max_examples=400, deadline=None)
@given(st.lists(INGEST_ITEM, max_size=5), st.lists(INGEST_ITEM, max_size=3))
def test_any_ingest_body_is_applied_whole_or_refused_whole(good_then, more):
    config = load_config(REPO / "examples" / "flash-sale.yaml")
    rec = RouterRecorder()
    before = rec.snapshot()["requests"]
    try:
        applied = apply_ingest(rec, {"requests": good_then + more}, config)
    except ValueError as e:
        assert str(e) and rec.snapshot()["requests"] == before  # refused: nothing of it applied
        return
    assert applied == len(good_then + more)
    for (pool, version, _, _), n in rec.snapshot()["requests"].items():
        assert config.pools[pool].version == version and 0 <= n <= MAX_COUNT * applied
