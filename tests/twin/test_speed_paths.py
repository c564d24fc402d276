"""The twin's fast paths (issue 41) give what the code they replaced gave, for every input: a speed-up must change no
run's result (the flash sale's reference runs are checked byte for byte; these hold for all inputs)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.twin.requests import ROW_FIELDS, PriorityQueue, RequestQueue, Requests
from infercast.twin.router import first_of_each


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=6), max_size=60))
def test_first_of_each_is_numpys_unique_with_indices(values):
    """The pool draw groups prompts by context range: which groups there are and where each first appears decide
    which row of pool weights each request's draw reads, so they must be `np.unique`'s, in its order."""
    group = np.array(values, dtype=np.int64)
    present, first = first_of_each(group, 7)
    want_present, want_first = np.unique(group, return_index=True)
    assert present == want_present.tolist()
    assert first == want_first.tolist()


def _cohort(prio: list[int], t0: float = 0.0) -> Requests:
    n = len(prio)
    t = t0 + np.arange(n, dtype=np.float64)
    prompt = 100 + np.arange(n, dtype=np.int64)
    return Requests.new(t, prompt, np.full(n, 10), prompt + 7, np.array(prio, dtype=np.int8))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.integers(min_value=0, max_value=2), max_size=12), max_size=5))
def test_a_tiered_queue_files_each_cohort_by_class_as_before(cohorts):
    """`PriorityQueue.push` files a cohort of one class whole and splits a mixed one; each class must hold exactly
    the requests of that class, in the order they came (what the loop over the three classes filed)."""
    q = PriorityQueue()
    want: list[list[tuple]] = [[], [], []]
    for k, prio in enumerate(cohorts):
        reqs = _cohort(prio, t0=100.0 * k)
        q.push(reqs)
        for i, c in enumerate(prio):
            want[c].append(tuple(getattr(reqs, f)[i].item() for f in ROW_FIELDS))
    for c in range(3):
        got = q.classes[c].drain()
        assert [tuple(getattr(got, f)[i].item() for f in ROW_FIELDS) for i in range(len(got))] == want[c]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=0, max_value=2), min_size=1, max_size=12), st.integers(0, 3))
def test_head_lengths_are_the_head_rows(prio, requeued):
    """A node refuses a prompt too long for it by reading the head's prompt and max_tokens: the same two numbers as
    the head's row (`peek`), with requeued requests first."""
    for q in (RequestQueue(), PriorityQueue()):
        reqs = _cohort(prio)
        q.push(reqs)
        for j in range(requeued):
            row = tuple(getattr(reqs, f)[0].item() for f in ROW_FIELDS)
            q.push_front((*row[:2], 5000 + j, row[3], 9000 + j, *row[5:]))
        while len(q):
            row = q.peek()
            assert q.head_lengths() == (row[2], row[4])
            q.pop()
