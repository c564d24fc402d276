"""Time to first token as an onset signal (issue 42 item 2): where a fleet has no router counter
(`metrics.source: engines` without infercast's router), the engines' TTFT histogram -- the latency SLO's
`vllm:time_to_first_token_seconds`, which Prometheus scrapes from the engines -- says a surge is here within one
scrape.  Pure signal (`signals.latency`, `signals.ttft_onset`) with properties, then `StoreInputs` on a store that
holds only what an engines-mode Prometheus holds."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.actuators.inputs import StoreInputs
from infercast.actuators.signals import (
    MIN_EXTRA_TTFT_SECONDS,
    MIN_HISTORY,
    MIN_TTFT_REQUESTS,
    TTFT_FACTOR,
    Arrivals,
    Latency,
    latency,
    onset,
    ttft_onset,
)
from infercast.alertrules.slo import VLLM_TTFT
from infercast.alertrules.sources import series_name
from infercast.catalog import REQUESTS_WAITING
from infercast.config import load_config
from infercast.store.memory import MemoryStore
from tests.conftest import REPO

NO_ROUTER = Arrivals(0.0, 0.0, 0.0, 15.0, 0)  # what the inputs read where no router counter exists


def test_first_tokens_coming_late_in_the_last_scrape_are_an_onset_without_any_router_counter():
    """Ten calm minutes at 0.2 s mean TTFT, then one 15 s interval at 2.5 s: a surge, said in words."""
    counts = np.array([150.0] * 40 + [120.0])
    sums = counts * np.array([0.2] * 40 + [2.5])
    t = latency(sums, counts)
    assert (t.last_seconds, t.baseline_seconds, t.history) == (2.5, 0.2, 40)
    assert onset(NO_ROUTER, 0.0, 0.0, t) == "time to first token 2.50 s over the last interval against 0.20 s"


def test_a_few_slow_first_tokens_or_a_short_history_are_not_an_onset():
    assert ttft_onset(Latency(3.0, 0.2, MIN_TTFT_REQUESTS - 1, 40)) == "", "too few first tokens to judge"
    assert ttft_onset(Latency(3.0, 0.2, 100.0, MIN_HISTORY - 1)) == "", "less than a minute of history"
    assert ttft_onset(Latency(0.05, 0.01, 100.0, 40)) == "", "five times a tiny TTFT is still fast"


def test_the_queue_signal_is_judged_without_a_router_counter_once_first_tokens_give_a_minute():
    """Before, the queue tripling was judged only after a minute of router history: a fleet without a router never
    had its queue read as an onset."""
    calm = Latency(0.2, 0.2, 150.0, 40)
    assert "waiting" in onset(NO_ROUTER, 90.0, 10.0, calm)
    assert onset(NO_ROUTER, 90.0, 10.0, Latency(0.2, 0.2, 150.0, 0)) == "", "no history of any kind"


def test_intervals_without_a_first_token_have_no_mean():
    t = latency(np.array([np.nan, 0.0, 30.0, 30.0]), np.array([np.nan, 0.0, 150.0, 150.0]))
    assert (t.last_seconds, t.baseline_seconds, t.history) == (0.2, 0.2, 1)


means = st.floats(0.001, 60.0, allow_nan=False)
counts = st.floats(0.0, 5000.0, allow_nan=False)


@settings(max_examples=300, deadline=None)
@given(means, counts, st.integers(1, 60))
def test_a_flat_ttft_never_fires(mean, n, length):
    c = np.full(length, n)
    assert ttft_onset(latency(c * mean, c)) == ""


@settings(max_examples=300, deadline=None)
@given(st.lists(means, min_size=MIN_HISTORY, max_size=40), means, means, st.floats(MIN_TTFT_REQUESTS, 5000.0))
def test_it_is_monotone_in_the_last_intervals_ttft(before, last, more, n):
    """Whatever the baseline, a slower last interval fires whenever a faster one did."""
    lo, hi = sorted((last, last + more))
    c = np.full(len(before) + 1, n)
    fired = [ttft_onset(latency(c * np.array([*before, x]), c)) != "" for x in (lo, hi)]
    assert fired[1] or not fired[0]


@settings(max_examples=300, deadline=None)
@given(st.lists(means, min_size=MIN_HISTORY, max_size=40), means, st.floats(MIN_TTFT_REQUESTS, 5000.0))
def test_it_fires_exactly_past_both_thresholds(before, last, n):
    c = np.full(len(before) + 1, n)
    base = float(np.median(before))
    got = ttft_onset(latency(c * np.array([*before, last]), c)) != ""
    past = last >= TTFT_FACTOR * base and last - base >= MIN_EXTRA_TTFT_SECONDS
    if not math.isclose(last, TTFT_FACTOR * base) and not math.isclose(last - base, MIN_EXTRA_TTFT_SECONDS):
        assert got == past


def test_store_inputs_see_the_ttft_onset_in_engines_mode():
    """`metrics.source: engines`: Prometheus holds the engines' TTFT histogram and their waiting-requests rule, no
    router counter.  Calm, then the last scrape's first tokens come ten times slower: the pool's outlook says a
    surge is here (and so announces it at once); the queue is read from the engines' own rule."""
    cfg = load_config(REPO / "examples" / "flash-sale.yaml")
    cfg = cfg.model_copy(update={"metrics": cfg.metrics.model_copy(update={"source": "engines"})})
    store = MemoryStore()
    step, now = 15.0, 6000.0
    total = count = 0.0
    for i, t in enumerate(np.arange(now - 600.0, now + 1.0, step)):
        last = t == now
        n, mean = (100.0, 2.0) if last else (150.0, 0.2)
        if i:
            total, count = total + n * mean, count + n
        for engine in ("a", "b"):  # two engines, half each
            labels = {"pool": "v4-main", "instance": engine}
            store.write(f"{VLLM_TTFT}_sum", labels, t, total / 2)
            store.write(f"{VLLM_TTFT}_count", labels, t, count / 2)
            store.write(series_name(REQUESTS_WAITING, "engines"), labels, t, 4.0)
    inputs = StoreInputs(store, cfg, step)
    first = inputs._first_signals("v4-main", now)
    assert first["onset"] == "time to first token 2.00 s over the last interval against 0.20 s"
    assert first["waiting"] == 8.0
    assert inputs._first_signals("v4-main", now - step)["onset"] == ""
