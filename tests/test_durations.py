"""`infercast.durations.parse_time`: the points in time `infercast actuator log --since` and `infercast train
--prometheus --start/--end` take (one parser for both commands)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from infercast.durations import parse_time


@given(st.floats(min_value=0, max_value=4e9, allow_nan=False))
def test_unix_seconds_are_read_as_they_are(t: float) -> None:
    assert parse_time(repr(t)) == t


@given(
    st.datetimes(min_value=datetime(1971, 1, 1), max_value=datetime(2100, 1, 1)),
    st.integers(min_value=-12, max_value=12),
)
def test_an_iso_time_is_its_instant_and_utc_when_it_names_no_zone(dt: datetime, hours: int) -> None:
    """A user who writes 2026-12-06T10:00 means UTC; one who writes +02:00 means that zone."""
    assert parse_time(dt.isoformat()) == dt.replace(tzinfo=UTC).timestamp()
    zoned = dt.replace(tzinfo=timezone(timedelta(hours=hours)))
    assert parse_time(zoned.isoformat()) == zoned.timestamp()


@pytest.mark.parametrize("text", ["", "yesterday", "24h", "2026-13-01"])
def test_anything_else_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_time(text)
