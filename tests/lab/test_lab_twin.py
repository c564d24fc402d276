"""The twin configured as the lab's engines (issue 40 item 5).

What a user sees: the twin of the lab's 16-block engines replays the lab's arrivals without an out-of-memory crash
(before, its KV pool rounded a few blocks in use up to a 128-block segment, eight times the card, and crashed at
once), holds exactly the lab's pool, preempts when the pool is overrun, and is compared with the lab on the
figures the bench publishes (KV-usage mean absolute difference, preemptions, TTFT)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.simulator.lab.engines import EngineShape
from infercast.simulator.lab.twin import Measured, kv_mad, measured_from, replay_on_twin, twin_fleet
from infercast.simulator.twin.kvcache import PagedKV


@settings(max_examples=60, deadline=None)
@given(
    capacity=st.integers(1, 300),
    segment=st.integers(1, 256),
    ops=st.lists(st.tuples(st.sampled_from(["admit", "release", "settle", "release_cached"]), st.integers(1, 64)),
                 max_size=40),
)  # fmt: skip
def test_the_paged_pool_never_holds_more_than_its_capacity(capacity: int, segment: int, ops) -> None:
    """Any pool, any segment, any sequence of admissions, releases and settling: the memory the pool holds stays
    between the blocks in use and the pool's capacity (an engine never has more KV memory than its card gives)."""
    kv = PagedKV(capacity_blocks=capacity, block_tokens=16, slots=64, segment_blocks=segment, release_seconds=10.0)
    live: list[int] = []
    for i, (op, n) in enumerate(ops):
        if op == "admit":
            slot = i % 64
            if slot not in live and kv.try_admit(slot, prompt_tokens=16 * n, max_tokens=0):
                live.append(slot)
        elif op == "release" and live:
            kv.release(live.pop(0))
        elif op == "settle":
            kv.settle(float(n))
        elif op == "release_cached":
            kv.release_cached()
        assert kv.used_blocks <= kv.pool_blocks <= capacity or (kv.used_blocks == 0 and kv.pool_blocks <= capacity)
        assert kv.footprint_tokens() <= capacity * 16


def test_a_pool_smaller_than_a_segment_is_allocated_whole_and_settles_within_it() -> None:
    kv = PagedKV(capacity_blocks=16, block_tokens=32, slots=4)  # the twin's default 128-block segments
    assert kv.try_admit(0, prompt_tokens=90, max_tokens=0)
    assert kv.pool_blocks == 16  # the whole pool at the first request, as vLLM allocates it at start
    kv.release(0)
    kv.settle(1.0)
    kv.release_cached()
    assert kv.pool_blocks == 0 and kv.footprint_if_admitted(32 * 20, 0) == 16 * 32


MEASURED = Measured(inter_token_seconds=0.02, prefill_tokens_per_second=2000.0, requests=100)


def test_the_twin_of_the_lab_holds_exactly_the_labs_pool() -> None:
    from infercast.simulator.replay.traces import Trace
    from infercast.simulator.twin.fleet import trace_fleet

    shape = EngineShape()
    cfg = twin_fleet(2, shape, MEASURED)
    trace = Trace(name="t", source="s", arrivals_s=np.array([0.0]), prompt_tokens=np.array([10]),
                  output_tokens=np.array([1]), duration_s=1.0)  # fmt: skip
    fleet = trace_fleet(cfg, trace, 0, None, sample_seconds=1.0)
    assert [n.kv_capacity_tokens for n in fleet.nodes] == [shape.kv_tokens] * 2
    assert all(n.kv.capacity_blocks == shape.blocks and n.kv.block_tokens == shape.block_size for n in fleet.nodes)
    assert all(n.max_batch == shape.max_num_seqs for n in fleet.nodes)


def test_the_twin_replays_an_overload_of_the_labs_engines_without_crashing_and_preempts() -> None:
    """60 s of 12 requests/s of 100-token prompts and 100-token outputs at 20 ms a token: far more than two 512-token
    pools hold.  Before the pool fix the twin crashed (OOM) at the first settle; now it preempts, as vLLM does."""
    rng = np.random.default_rng(0)
    n = 720
    arrivals = np.sort(rng.uniform(0, 60, n))
    client = [(float(t), float(t), None, None, 100, 100, True) for t in arrivals]
    tw = replay_on_twin(client, 60.0, twin_fleet(2, EngineShape(), MEASURED), drain_limit_s=900)
    assert tw["oom_events"] == 0
    assert tw["preemptions"] > 0 and tw["kv_peak"] == 1.0
    assert all(0.0 <= kv <= 1.0 for _, _, kv in tw["kv_series"])
    assert tw["ttft_p50_ms"] is not None and tw["ttft_p99_ms"] >= tw["ttft_p50_ms"]


def test_kv_mad_is_zero_for_the_same_series_and_the_gap_for_a_shifted_one() -> None:
    a = [(float(t), "engine-0", 0.2) for t in range(10)] + [(float(t), "engine-1", 0.6) for t in range(10)]
    # the twin's nodes have other names and come in the other order: paired by their busiest second
    b = [(float(t), "n1", 0.6) for t in range(10)] + [(float(t), "n0", 0.2) for t in range(10)]
    assert kv_mad(a, b, 10.0) == 0.0
    c = [(t, name, kv + 0.1) for t, name, kv in b]
    assert kv_mad(a, c, 10.0) == pytest.approx(0.1)
    with pytest.raises(ValueError, match="engines"):
        kv_mad(a, b[:10], 10.0)


def test_the_step_time_is_what_the_engines_measured() -> None:
    report = {"engine_timing": {"inter_token_ms": 20.0, "prefill_tokens_per_second": 3000.0, "decode_tokens": 6400},
              "seconds": 100.0, "completed": 50}  # fmt: skip
    m = measured_from(report, engines=2)
    # mean decoding batch = 0.02 s x 6400 tokens / 100 s / 2 engines = 0.64; batch-1 time = 20 ms / (1 + 0.64/64)
    assert m.inter_token_seconds == pytest.approx(0.02 / 1.01)
    assert m.prefill_tokens_per_second == 3000.0
    with pytest.raises(ValueError, match="engine timing"):
        measured_from({"engine_timing": {"inter_token_ms": None}})


def test_kv_mad_over_windows_compares_levels_not_single_requests() -> None:
    """A lab engine that holds one request every other second (0, 0.5, 0, 0.5, ...) and a twin that holds a quarter
    of the pool all the time: 0.25 apart every second, the same level over 10 s windows."""
    lab = [(float(t), "e", 0.5 if t % 2 else 0.0) for t in range(21)]
    twin = [(float(t), "n", 0.25) for t in range(21)]
    assert kv_mad(lab, twin, 20.0) == pytest.approx(0.25)
    assert kv_mad(lab, twin, 20.0, window_s=10) == pytest.approx(0.0)


def test_kv_mad_refuses_a_run_shorter_than_its_window() -> None:
    # what the user sees: a ValueError naming the run's length and the window, not a NaN and numpy's warning
    a = [(float(t), "engine-0", 0.5) for t in range(10)]
    with pytest.raises(ValueError, match="a run of 9 s holds no whole comparison window of 10 s"):
        kv_mad(a, a, 9.0, window_s=10)
    with pytest.raises(ValueError, match="window of 0 s"):
        kv_mad(a, a, 9.0, window_s=0)
