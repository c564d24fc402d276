"""Requests as columns: the twin moves cohorts of requests through the router and queues as numpy arrays.

One `Requests` holds any number of requests; the router splits and routes them with vectorised operations, so
12,000 req/s costs a few array operations per tick instead of 12,000 Python objects.  Only requests a node admits
into its running set get a slot of their own (see `engine.py`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

PRIORITY_NAMES = ("urgent", "normal", "low")  # index = priority code
# the order of a request row (`RequestQueue.peek`) is the order of the fields
ROW_FIELDS = (
    "orig_t", "att_t", "prompt", "out", "max_tokens", "prio", "attempt", "served", "sent_t", "tenant", "malformed"
)  # fmt: skip
DTYPES = {
    "orig_t": np.float64, "att_t": np.float64, "prompt": np.int64, "out": np.int64, "max_tokens": np.int64,
    "prio": np.int8, "attempt": np.int8, "served": bool, "sent_t": np.float64, "tenant": np.int8, "malformed": bool,
}  # fmt: skip


_EMPTY = tuple(np.empty(0, dtype=DTYPES[f]) for f in ROW_FIELDS)  # shared: nothing can be written into them


@dataclass
class Requests:
    orig_t: np.ndarray  # when the client first sent it (latency is measured from here, retries included)
    att_t: np.ndarray  # when this attempt was sent (the client's timeout runs from here)
    prompt: np.ndarray  # prompt tokens
    out: np.ndarray  # tokens it will generate
    max_tokens: np.ndarray  # the request's max_tokens parameter (what a contiguous manager reserves)
    prio: np.ndarray  # 0 urgent, 1 normal, 2 low
    attempt: np.ndarray  # 1 for the first try
    served: np.ndarray  # bool: its first token was already delivered (a preempted request being recomputed)
    sent_t: np.ndarray  # when the router dispatched it to a node (the pool's own latency runs from here)
    tenant: np.ndarray  # the stream it came from (index into the scenario's streams; quota lanes are per stream)
    malformed: np.ndarray  # bool: an invalid payload (an engine prefills it, then answers 400)

    def __len__(self) -> int:
        return len(self.orig_t)

    @staticmethod
    def empty() -> Requests:
        return Requests(*_EMPTY)

    @staticmethod
    def new(t: np.ndarray, prompt: np.ndarray, out: np.ndarray, max_tokens: np.ndarray, prio: np.ndarray,
            tenant: int = 0, malformed: bool = False) -> Requests:  # fmt: skip
        """First attempts sent at times t."""
        n = len(t)
        return Requests(
            t.copy(),
            t.copy(),
            prompt,
            out,
            max_tokens,
            prio,
            np.ones(n, dtype=np.int8),
            np.zeros(n, dtype=bool),
            t.copy(),
            np.full(n, tenant, dtype=np.int8),
            np.full(n, malformed, dtype=bool),
        )

    def take(self, idx: np.ndarray | slice) -> Requests:
        # the fields spelled out: this runs hundreds of thousands of times a run, and a loop over
        # `dataclasses.fields` cost more than the indexing itself
        return Requests(
            self.orig_t[idx], self.att_t[idx], self.prompt[idx], self.out[idx], self.max_tokens[idx],
            self.prio[idx], self.attempt[idx], self.served[idx], self.sent_t[idx], self.tenant[idx],
            self.malformed[idx],
        )  # fmt: skip

    def columns(self) -> tuple[np.ndarray, ...]:
        """The arrays in `ROW_FIELDS` order."""
        return (
            self.orig_t, self.att_t, self.prompt, self.out, self.max_tokens, self.prio, self.attempt, self.served,
            self.sent_t, self.tenant, self.malformed,
        )  # fmt: skip

    @staticmethod
    def concat(parts: list[Requests]) -> Requests:
        if len(parts) == 1:  # the common case, without the filtering below
            p = parts[0]
            return p if len(p.orig_t) else Requests.empty()
        parts = [p for p in parts if len(p.orig_t)]
        if not parts:
            return Requests.empty()
        if len(parts) == 1:
            return parts[0]
        return Requests(*(np.concatenate(cols) for cols in zip(*(p.columns() for p in parts), strict=True)))


class RequestQueue:
    """A FIFO of request cohorts with a cheap head: appends are whole arrays, pops walk a pointer."""

    def __init__(self) -> None:
        self._chunks: list[Requests] = []
        self._head = 0  # index into the first chunk
        self._front: list[tuple] = []  # requeued requests (preempted), served before the chunks
        self._len = 0

    def __len__(self) -> int:
        return self._len

    def push(self, reqs: Requests) -> None:
        """Append a cohort; it is kept ordered by attempt time, so client timeouts drop from the head."""
        if len(reqs):
            if not is_sorted(reqs.att_t):
                reqs = reqs.take(stable_order(reqs.att_t))
            self._chunks.append(reqs)
            self._len += len(reqs)

    def push_front(self, row: tuple) -> None:
        """Put one request (a row as from `peek`) back at the head: a preempted request keeps its place."""
        self._front.append(row)
        self._len += 1

    def peek(self) -> tuple:
        if self._front:
            return self._front[-1]
        h = self._head
        return tuple(col[h].item() for col in self._chunks[0].columns())

    def head_lengths(self) -> tuple[int, int]:
        """(prompt, max_tokens) of the request `peek` would return, without building its row."""
        if self._front:
            row = self._front[-1]
            return row[2], row[4]
        c, h = self._chunks[0], self._head
        return int(c.prompt[h]), int(c.max_tokens[h])

    def head(self, n: int) -> Requests:
        """The first n requests, in the order `peek`/`pop` would hand them out, left in the queue."""
        if n > 0 and not self._front and self._chunks:  # the head of the first chunk holds them: one slice
            c, h = self._chunks[0], self._head
            if len(c.orig_t) - h >= n:
                return c.take(slice(h, h + n))
        parts: list[Requests] = []
        if self._front and n > 0:
            rows = self._front[::-1][:n]  # the last one put back comes out first
            parts.append(rows_to_requests(rows))
            n -= len(rows)
        h = self._head
        for c in self._chunks:
            if n <= 0:
                break
            k = min(n, len(c) - h)
            parts.append(c.take(slice(h, h + k)))
            n -= k
            h = 0
        return Requests.concat(parts)

    def head_column(self, n: int, name: str) -> np.ndarray:
        """`getattr(self.head(n), name)` without building the head's other columns."""
        parts: list[np.ndarray] = []
        if self._front and n > 0:
            rows = self._front[::-1][:n]
            i = ROW_FIELDS.index(name)
            parts.append(np.array([r[i] for r in rows], dtype=DTYPES[name]))  # as `rows_to_requests` builds it
            n -= len(rows)
        h = self._head
        for c in self._chunks:
            if n <= 0:
                break
            col = getattr(c, name)
            k = min(n, len(col) - h)
            parts.append(col[h : h + k])
            n -= k
            h = 0
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.empty(0, dtype=DTYPES[name])

    def pop(self) -> None:
        self._len -= 1
        if self._front:
            self._front.pop()
            return
        self._head += 1
        if self._head >= len(self._chunks[0]):
            self._chunks.pop(0)
            self._head = 0

    def head_att_t(self) -> float:
        if self._front:
            return self._front[-1][1]
        return float(self._chunks[0].att_t[self._head]) if self._chunks else float("inf")

    def drop_older_than(self, att_t_cutoff: float) -> Requests:
        """Remove requests whose attempt started before the cutoff (their clients gave up); returns them."""
        if not self._len:
            return Requests.empty()
        if not self._front and self._chunks[0].att_t[self._head] >= att_t_cutoff:  # the oldest is recent enough
            return Requests.empty()
        out: list[Requests] = []
        if self._front:
            keep = [r for r in self._front if r[1] >= att_t_cutoff]
            gone = [r for r in self._front if r[1] < att_t_cutoff]
            if gone:
                out.append(rows_to_requests(gone))
                self._len -= len(gone)
                self._front = keep
        while self._chunks:
            c = self._chunks[0]
            tail = c.att_t[self._head :]
            n_old = int(tail.searchsorted(att_t_cutoff, side="left"))
            if n_old == 0:
                break
            out.append(c.take(slice(self._head, self._head + n_old)))
            self._len -= n_old
            self._head += n_old
            if self._head >= len(c):
                self._chunks.pop(0)
                self._head = 0
            else:
                break
        return Requests.concat(out)

    def pop_many(self, k: int) -> Requests:
        """Remove and return up to k requests from the head (requeued ones first)."""
        parts: list[Requests] = []
        if self._front and k > 0:
            rows = [self._front.pop() for _ in range(min(k, len(self._front)))]
            parts.append(rows_to_requests(rows))
            self._len -= len(rows)
            k -= len(rows)
        while k > 0 and self._chunks:
            c = self._chunks[0]
            n = min(k, len(c) - self._head)
            parts.append(c.take(slice(self._head, self._head + n)))
            self._head += n
            self._len -= n
            k -= n
            if self._head >= len(c):
                self._chunks.pop(0)
                self._head = 0
        return Requests.concat(parts)

    def discard(self, k: int) -> None:
        """`pop_many(k)` for requests the caller already holds (from `head`): nothing is built."""
        n = min(k, len(self._front))
        if n:
            del self._front[len(self._front) - n :]
            self._len -= n
            k -= n
        while k > 0 and self._chunks:
            n = min(k, len(self._chunks[0]) - self._head)
            self._head += n
            self._len -= n
            k -= n
            if self._head >= len(self._chunks[0]):
                self._chunks.pop(0)
                self._head = 0

    def drain(self) -> Requests:
        if not self._len:
            return Requests.empty()
        parts = []
        if self._front:
            parts.append(rows_to_requests(self._front))
        for i, c in enumerate(self._chunks):
            parts.append(c.take(slice(self._head if i == 0 else 0, len(c))))
        self._chunks, self._front, self._head, self._len = [], [], 0, 0
        return Requests.concat(parts)


def is_sorted(a: np.ndarray) -> bool:
    return len(a) < 2 or bool((a[1:] >= a[:-1]).all())


_FEW_RUNS = 8  # `stable_order`: at most this many descents (this many + 1 sorted runs) go to the stable sort


def stable_order(a: np.ndarray) -> np.ndarray:
    """`np.argsort(a, kind="stable")`, faster on times: numpy's default sort (several times faster on random
    floats), kept when the sorted keys are all distinct -- then only one order sorts them, the stable one; with a tie
    (or a NaN) the stable sort decides.  Times made of a few sorted runs (a tick's arrivals per stream and the
    retries due, one run per failure) go straight to the stable sort, which merges runs (several times faster
    there than the default sort); either way the order is the stable one."""
    if len(a) > 1 and np.count_nonzero(a[1:] < a[:-1]) < _FEW_RUNS:
        return a.argsort(kind="stable")
    order = a.argsort()
    s = a[order]
    if len(a) > 1 and not bool((s[1:] > s[:-1]).all()):
        return a.argsort(kind="stable")
    return order


def rows_to_requests(rows: list[tuple]) -> Requests:
    cols = list(zip(*rows, strict=True))
    return Requests(*(np.array(c, dtype=DTYPES[f]) for f, c in zip(ROW_FIELDS, cols, strict=True)))


class PriorityQueue:
    """Three `RequestQueue`s, one per priority class, served urgent first (seed 004's tiers at a node).

    Same interface as `RequestQueue`; `peek`/`pop` take the head of the most urgent non-empty class."""

    def __init__(self) -> None:
        self.classes = (RequestQueue(), RequestQueue(), RequestQueue())

    def __len__(self) -> int:
        a, b, c = self.classes
        return a._len + b._len + c._len

    def _head(self) -> RequestQueue:
        return next(q for q in self.classes if len(q))

    def head_prio(self) -> int:
        return next(i for i, q in enumerate(self.classes) if len(q))

    def push(self, reqs: Requests) -> None:
        if not len(reqs):
            return
        present = (np.bincount(reqs.prio, minlength=3)).nonzero()[0].tolist()
        if len(present) == 1:  # one class: the cohort as it is
            self.classes[present[0]].push(reqs)
            return
        for c in present:
            self.classes[c].push(reqs.take((reqs.prio == c).nonzero()[0]))

    def push_front(self, row: tuple) -> None:
        self.classes[int(row[ROW_FIELDS.index("prio")])].push_front(row)

    def peek(self) -> tuple:
        return self._head().peek()

    def head_lengths(self) -> tuple[int, int]:
        return self._head().head_lengths()

    def head(self, n: int) -> Requests:
        """The first n requests in serving order (urgent, then normal, then low), left in the queues."""
        parts = []  # `_across` spelled out (a hot path), empty classes skipped as in `pop_many`
        for q in self.classes:
            if n <= 0:
                break
            if q._len:
                part = q.head(n)
                n -= len(part.orig_t)
                parts.append(part)
        return Requests.concat(parts)

    def head_column(self, n: int, name: str) -> np.ndarray:
        """`getattr(self.head(n), name)` without building the head's other columns."""
        parts = []
        for q in self.classes:
            if n <= 0:
                break
            if q._len:
                part = q.head_column(n, name)
                n -= len(part)
                parts.append(part)
        if len(parts) == 1:
            return parts[0]
        return np.concatenate(parts) if parts else np.empty(0, dtype=DTYPES[name])

    def pop(self) -> None:
        self._head().pop()

    def head_att_t(self) -> float:
        """When the oldest urgent request was sent: a health check probes with an urgent request, and normal and
        low work is meant to wait behind urgent work, so its age says nothing about whether the queue moves."""
        return self.classes[0].head_att_t()

    def drop_older_than(self, att_t_cutoff: float) -> Requests:
        # an empty class gives nothing: skipped
        return Requests.concat([q.drop_older_than(att_t_cutoff) for q in self.classes if q._len])

    def pop_many(self, k: int) -> Requests:
        parts = []  # `_across` spelled out (a hot path): each class in serving order until k are taken
        for q in self.classes:
            if k <= 0:
                break
            if q._len:  # an empty class gives an empty part: skipped
                part = q.pop_many(k)
                k -= len(part.orig_t)
                parts.append(part)
        return Requests.concat(parts)

    def _across(self, n: int, take: Callable[[RequestQueue, int], Requests]) -> Requests:
        """`take(queue, k)` from each class in serving order until n requests are taken, as one cohort."""
        parts = []
        for q in self.classes:
            if n <= 0:
                break
            part = take(q, n)
            n -= len(part)
            parts.append(part)
        return Requests.concat(parts)

    def discard(self, k: int) -> None:
        for q in self.classes:
            n = min(k, len(q))
            q.discard(n)
            k -= n

    def drain(self) -> Requests:
        return Requests.concat([q.drain() for q in self.classes])
