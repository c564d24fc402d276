"""Harm episodes and the scores of a page for harm (`infercast.predictors.harm`, issue 37): the episode logic for all
inputs (hypothesis), and the page scores on cases a reader can check by hand."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.predictors.harm import HarmRule, PageRule, episodes, kv_harm, pages, score_page, urgent_harm

STEP = 15.0


def _grid(n: int) -> np.ndarray:
    return np.arange(n, dtype=float) * STEP


flag_lists = st.lists(st.booleans(), min_size=0, max_size=80)
merges = st.sampled_from([0.0, 15.0, 30.0, 60.0, 300.0, 1000.0])


@settings(max_examples=200, deadline=None)
@given(flag_lists, merges)
def test_episodes_cover_every_harmful_sample_and_are_separated_by_at_least_the_resolve_time(flags, merge):
    t = _grid(len(flags))
    eps = episodes(t, np.array(flags, bool), merge)
    harmful = t[np.array(flags, bool)] if flags else np.zeros(0)
    # every harmful sample lies in exactly one episode; every episode starts and ends on a harmful sample
    for x in harmful:
        assert sum(s <= x <= e for s, e in eps) == 1
    assert all(s in harmful and e in harmful and s <= e for s, e in eps)
    # ordered, disjoint, and no two closer than the resolve time (consecutive harmful samples are one episode)
    for (_, e0), (s1, _) in itertools.pairwise(eps):
        assert e0 < s1
        assert s1 - e0 >= merge and s1 - e0 > STEP
    assert bool(eps) == bool(len(harmful))


@settings(max_examples=200, deadline=None)
@given(flag_lists)
def test_without_merging_episodes_are_the_maximal_runs(flags):
    t = _grid(len(flags))
    eps = episodes(t, np.array(flags, bool), 0.0)
    runs = pages(t, np.array(flags, bool), STEP * 1.5)
    assert eps == runs


@settings(max_examples=200, deadline=None)
@given(flag_lists, st.lists(st.booleans(), min_size=80, max_size=80), merges)
def test_page_scores_are_bounded_and_the_degenerate_pages_read_as_such(harm_flags, firing, merge):
    n = 80
    t = _grid(n)
    hf = np.zeros(n, bool)
    hf[: len(harm_flags)] = harm_flags
    eps = episodes(t, hf, merge)
    s = score_page(t, np.array(firing, bool), eps)
    assert 0 <= s["paged"] <= s["episodes"] <= len(eps)
    assert s["recall"] is None or 0 <= s["recall"] <= 1
    assert s["median_lead_seconds"] is None or 60 <= s["median_lead_seconds"] <= 600
    assert 0 <= s["false_pages"] <= s["pages"]
    assert s["paged_fraction"] == pytest.approx(np.mean(firing))
    never = score_page(t, np.zeros(n, bool), eps)
    assert never["paged"] == 0 and never["false_pages"] == 0 and never["paged_fraction"] == 0
    always = score_page(t, np.ones(n, bool), eps)
    assert always["paged"] == always["episodes"] and always["paged_fraction"] == 1
    assert always["false_pages"] == (0 if eps else 1)


def test_a_page_two_minutes_ahead_has_a_two_minute_lead_and_one_thirty_seconds_ahead_is_a_miss():
    t = _grid(200)  # 50 minutes
    harm = [(1500.0, 1600.0)]
    early = (t >= 1380) & (t <= 1600)
    s = score_page(t, early, harm)
    assert s["episodes"] == 1 and s["recall"] == 1 and s["median_lead_seconds"] == 120 and s["false_pages"] == 0
    late = (t >= 1470) & (t <= 1600)
    assert score_page(t, late, harm)["recall"] == 0


def test_a_page_with_no_harm_within_ten_minutes_is_a_false_page_and_counts_per_day():
    t = _grid(240)  # one hour
    harm = [(3000.0, 3100.0)]
    firing = np.zeros(240, bool)
    firing[(t >= 300) & (t <= 330)] = True  # no harm until 3000: false
    firing[(t >= 2490) & (t <= 2550)] = True  # harm 8.5 minutes after it: paged ahead, not false
    s = score_page(t, firing, harm)
    assert s["pages"] == 2 and s["false_pages"] == 1 and s["false_pages_per_day"] == pytest.approx(24.0)
    assert s["recall"] == 1 and s["median_lead_seconds"] == 510


def test_a_page_that_started_long_before_is_a_lead_of_ten_minutes_at_most():
    t = _grid(240)
    s = score_page(t, t >= 600, [(3000.0, 3050.0)], PageRule())
    assert s["recall"] == 1 and s["median_lead_seconds"] == 600


def test_harm_before_the_first_evaluation_could_page_it_is_not_scored():
    t = _grid(100) + 300.0
    s = score_page(t, np.zeros(100, bool), [(330.0, 400.0), (1200.0, 1300.0)])
    assert s["episodes"] == 1


def test_kv_harm_needs_a_full_cache_and_urgent_harm_discounts_the_misses_a_prompt_s_length_makes_certain():
    kv = np.array([0.5, 0.95, 0.5, 0.3, 0.3])
    alloc = np.array([0, 1, 2, 2, 5])  # failures at samples 1, 2 (cache full then / just before) and 4 (cache free)
    assert kv_harm(kv, alloc, 0.9).tolist() == [False, True, True, False, False]
    rule = HarmRule()
    sent, missed = np.array([100, 100, 10, 100]), np.array([6, 5, 1, 10])
    assert urgent_harm(sent, missed, rule).tolist() == [True, False, False, True]
    assert urgent_harm(sent, missed, rule, structural=np.array([0, 0, 0, 8])).tolist() == [True, False, False, False]


def test_mismatched_lengths_are_a_clear_error():
    with pytest.raises(ValueError, match="2 times but 3 flags"):
        episodes(np.zeros(2), np.zeros(3, bool), 0.0)
