"""Windowed hit ratio, counter resets, PCIe integration and XID change counting (state between scrapes)."""

from __future__ import annotations

import pytest

from infercast.exporters.base import HIT_HITS, HIT_QUERIES, PCIE_RATE, XID_LAST, Sample
from infercast.exporters.windows import RATE_PREFIX, Windows

L = {"pool": "p", "version": "v4", "instance": "n1"}
G = {"node": "n", "gpu": "0", "uuid": "u"}


def hits(q, h):
    return [Sample(HIT_QUERIES, L, q), Sample(HIT_HITS, L, h)]


def ratio(out):
    return [s.value for s in out if s.name == "infercast_kv_cache_hit_ratio"]


def test_hit_ratio_over_the_window_and_after_a_reset():
    w = Windows(window_seconds=300)
    assert ratio(w.apply(hits(1000, 100), 0)) == []  # one point: no window yet, absent
    assert ratio(w.apply(hits(2000, 600), 60)) == [0.5]  # (600-100)/(2000-1000)
    assert ratio(w.apply(hits(3000, 700), 120)) == [pytest.approx(0.3)]  # (700-100)/(3000-1000)
    # old points leave the window: at t=460 the window starts after t=60's successor
    w.apply(hits(4000, 800), 400)
    assert ratio(w.apply(hits(5000, 1800), 460)) == [pytest.approx((1800 - 700) / (5000 - 3000))]
    # the engine restarted: counters fall; the window restarts, never a negative or >1 ratio
    assert ratio(w.apply(hits(10, 5), 480)) == []
    assert ratio(w.apply(hits(110, 55), 500)) == [0.5]


def test_no_queries_means_no_ratio():
    w = Windows(300)
    w.apply(hits(1000, 100), 0)
    assert ratio(w.apply(hits(1000, 100), 30)) == []


def test_counter_rates_for_the_scores():
    w = Windows(300)
    c = "infercast_kv_block_allocation_failures_total"
    w.apply([Sample(c, L, 10)], 0)
    out = w.apply([Sample(c, L, 40)], 30)
    assert [s.value for s in out if s.name == RATE_PREFIX + c] == [1.0]
    assert [s.value for s in out if s.name == c] == [40]  # the counter itself passes through


def test_pcie_rate_is_integrated_into_a_counter():
    w = Windows(300)
    lab = {**G, "direction": "tx"}
    first = w.apply([Sample(PCIE_RATE, lab, 1000.0)], 0)
    assert [(s.name, s.value) for s in first] == [("infercast_gpu_pcie_bytes_total", 0.0)]
    second = w.apply([Sample(PCIE_RATE, lab, 3000.0)], 10)
    assert second[0].value == 20_000.0  # trapezoid: (1000+3000)/2 * 10 s


def test_xid_changes_are_counted():
    w = Windows(300)

    def xids(v, t):
        return {s.labels["xid"]: s.value for s in w.apply([Sample(XID_LAST, G, v)], t)}

    assert xids(0, 0) == {}
    assert xids(79, 10) == {"79": 1}
    assert xids(79, 20) == {"79": 1}  # same last XID: no new error seen
    assert xids(48, 30) == {"48": 1, "79": 1}
    assert xids(79, 40) == {"48": 1, "79": 2}
