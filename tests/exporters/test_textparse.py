"""The strict parser: what a scrape refuses, and why (the reason the user sees in the exporter's log)."""

from __future__ import annotations

import pytest

from infercast.exporters.base import ScrapeError, parse_text

W = {"m", "m_total"}


def test_reads_labels_escapes_and_timestamps():
    text = '# HELP m h\n# TYPE m gauge\nm{a="x\\"y",b="line\\nnext"} 1.5 1700000000000\nm{a="z"} 2e3\n\nother 7\n'
    out = parse_text(text, W)
    assert out["m"] == [({"a": 'x"y', "b": "line\nnext"}, 1.5), ({"a": "z"}, 2000.0)]
    assert "other" not in out  # not wanted: shape-checked, not kept


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("<html><body>502 Bad Gateway</body></html>", "not a Prometheus sample"),
        ('{"status": "ok"}', "not a Prometheus sample"),
        ('m{a="b" 1', "not a Prometheus sample"),
        ("m one", "not a number"),
        ("m 1_000", "not a number"),
        ("m NaN", "finite"),
        ("m +Inf", "finite"),
        ("m -3", "finite value >= 0"),
        ('m{a="1"} 1\nm{a="1"} 2', "duplicate series"),
        ('m{a="1",a="2"} 1', "given twice"),
        ("m{a=1} 1", "malformed labels"),
        ("# TYPE m bogus", "unknown metric type"),
    ],
)
def test_bad_bodies_fail_with_a_reason(text, reason):
    with pytest.raises(ScrapeError, match=reason):
        parse_text(text, W)


def test_nan_in_an_unread_family_does_not_fail_the_target():
    # vLLM histograms' _sum can be NaN in some releases; we do not read them, so the target stays usable
    assert parse_text("python_gc_seconds NaN\nm 1", W) == {"m": [({}, 1.0)]}


def test_windows_line_endings():
    assert parse_text("m 1\r\nm_total 2\r\n", W) == {"m": [({}, 1.0)], "m_total": [({}, 2.0)]}
