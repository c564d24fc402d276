"""Fuzzing the parsing path: well over 1,000 generated bad payloads; each either parses to sane catalog samples
or is refused with ScrapeError (target up 0), never another exception."""

from __future__ import annotations

import math

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from infercast.exporters import dcgm, sglang, tgi, trtllm, vllm
from infercast.exporters.base import ScrapeError, Target, TextParser, parse_text
from infercast.exporters.sources import MODULES, PARSERS
from infercast.exporters.windows import Windows
from tests.exporters.fakes import payload

PAYLOADS = {
    "vllm": [payload("vllm-chat-v3.5.prom"), payload("twin-node.prom"), payload("vllm.docs-excerpt.prom")],
    "sglang": [payload("sglang-chat-v3.5.prom")],
    "tgi": [payload("tgi.prom")],
    "trtllm": [payload("tensorrt-llm-triton.prom")],
    "dcgm": [payload("dcgm-exporter.prom")],
}
WANTED = {"vllm": vllm.WANTED, "sglang": sglang.WANTED, "tgi": tgi.WANTED, "trtllm": trtllm.WANTED, "dcgm": dcgm.WANTED}
BAD_TOKENS = ["NaN", "-1", "+Inf", "-Inf", "1e999", "0x10", "1_0", "", "∞", "1.2.3", '"5"', "{", "}", "=", "\\", "\x00"]
BAD_TOKENS += ["57.0", "1.5", "1e308", "100000"]  # out of range for ratios and percentages (issue 12)
TARGET = Target("fuzz", "vllm", "http://127.0.0.1:1/metrics", pool="v4-main", version="v4", max_batch=64)
RUNS = {"examples": 0, "refused": 0}


@st.composite
def mutated(draw):
    kind = draw(st.sampled_from(sorted(PAYLOADS)))
    text = draw(st.sampled_from(PAYLOADS[kind]))
    lines = text.split("\n")
    wanted = [j for j, ln in enumerate(lines) if ln.split("{")[0].split(" ")[0] in WANTED[kind]]
    for _ in range(draw(st.integers(1, 3))):
        if wanted and draw(st.booleans()):  # half the time hit a family the parser reads
            i = min(draw(st.sampled_from(wanted)), len(lines) - 1)
        else:
            i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["value", "cut", "insert", "dup", "truncate", "labels"]))
        line = lines[i]
        if op == "value" and " " in line:
            lines[i] = line.rsplit(" ", 1)[0] + " " + draw(st.sampled_from(BAD_TOKENS))
        elif op == "cut" and line:
            a = draw(st.integers(0, len(line) - 1))
            lines[i] = line[:a] + line[a + draw(st.integers(1, 20)) :]
        elif op == "insert":
            lines.insert(i, draw(st.text(max_size=40)))
        elif op == "dup":
            lines.insert(i, line)
        elif op == "truncate":
            lines = lines[: i + 1]
            lines[-1] = line[: draw(st.integers(0, len(line)))]
        elif op == "labels" and "{" in line:
            lines[i] = line.replace("{", "{" + draw(st.sampled_from(['a="', "b=1,", '="x",', 'c="\\', ",,"])), 1)
    return kind, "\n".join(lines)


def check(kind: str, text: str) -> None:
    RUNS["examples"] += 1
    try:
        samples = PARSERS[kind](text, TARGET)
    except ScrapeError as e:
        RUNS["refused"] += 1
        assert str(e)  # a reason to log
        return
    keys = set()
    for s in samples:
        assert isinstance(s.value, float) and math.isfinite(s.value) and s.value >= 0, s
        assert all(isinstance(v, str) for v in s.labels.values())
        assert not s.name.endswith("_ratio") or s.value <= 1.0, s  # a ratio over 1 is never exported
        key = (s.name, tuple(sorted(s.labels.items())))
        assert key not in keys, s  # no two series of a page on the same labels
        keys.add(key)
    Windows(300).apply(samples, 0.0)  # the stateful stage takes whatever a parser returns


@settings(max_examples=1100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated())
def test_mutated_real_payloads(case):
    check(*case)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from(sorted(PAYLOADS)), st.text(max_size=300))
def test_arbitrary_text(kind, text):
    check(kind, text)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated(), st.lists(st.integers(1, 4096), min_size=1, max_size=40))
def test_the_body_parsed_as_it_arrives_reads_the_same_as_the_whole_body(case, cuts):
    # the exporter feeds the parser chunks as they come off the socket (split anywhere, even inside a UTF-8
    # character); it must see exactly what the whole body gives: the same samples or the same reason
    kind, text = case
    mod = MODULES[kind]
    raw = text.encode()
    try:
        whole: object = parse_text(text, mod.WANTED, mod.MAXIMA)
    except ScrapeError as e:
        whole = str(e)
    p = TextParser(mod.WANTED, mod.MAXIMA)
    try:
        pos = 0
        for cut in cuts:
            p.feed_bytes(raw[pos : pos + cut])
            pos += cut
        p.feed_bytes(raw[pos:])
        streamed: object = p.result()
    except ScrapeError as e:
        streamed = str(e)
    assert streamed == whole


def test_enough_bad_payloads_were_generated():
    # runs after the two property tests (file order): at least 1,000 payloads refused as bad
    if RUNS["examples"] == 0:  # run alone (-k): generate the payloads here instead of skipping
        test_mutated_real_payloads()
        test_arbitrary_text()
    assert RUNS["examples"] >= 1500
    assert RUNS["refused"] >= 1000, RUNS
