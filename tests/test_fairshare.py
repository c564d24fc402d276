"""Splitting whole units between claimants: max-min fair, and by value (the standby nodes between pools)."""

from __future__ import annotations

from infercast.fairshare import share_by_value


def test_share_by_value_gives_every_want_when_there_is_enough():
    assert share_by_value([2, 3], 6, [90.0, 11.0]).tolist() == [2, 3]


def test_share_by_value_fills_the_most_valuable_want_first_then_the_next():
    assert share_by_value([10, 10], 4, [90.0, 11.0]).tolist() == [4, 0]
    assert share_by_value([3, 10], 4, [90.0, 11.0]).tolist() == [3, 1]
    assert share_by_value([3, 10, 5], 6, [11.0, 90.0, 50.0]).tolist() == [0, 6, 0]


def test_share_by_value_splits_equal_values_max_min_and_never_gives_more_than_n_or_wanted():
    assert share_by_value([10, 10], 4, [0.0, 0.0]).tolist() == [2, 2]
    assert share_by_value([1, 10, 10], 5, [5.0, 5.0, 1.0]).tolist() == [1, 4, 0]
    assert share_by_value([2, 2], 0, [1.0, 2.0]).tolist() == [0, 0]
    assert share_by_value([], 3, []).tolist() == []
