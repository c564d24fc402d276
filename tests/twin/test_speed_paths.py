"""The twin's fast paths (issue 41) give what the code they replaced gave, for every input: a speed-up must change no
run's result (the flash sale's reference runs are checked byte for byte; these hold for all inputs)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from infercast.simulator.twin.requests import ROW_FIELDS, PriorityQueue, RequestQueue, Requests
from infercast.simulator.twin.sharing import pick, pool_row, retry_cohorts

_bound = st.integers(min_value=0, max_value=40)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(_bound, st.one_of(st.none(), _bound), st.floats(0, 3), st.integers(0, 2)), min_size=1, max_size=4
    ),
    st.lists(st.integers(min_value=0, max_value=45), min_size=1, max_size=40),
)
def test_every_prompt_of_a_context_group_is_drawn_against_the_same_pool_row(pools, prompts):
    """The pool draw computes one row of cumulative pool weights per group of prompts between the pools' context
    bounds -- from the group's first prompt, then kept while the shares and weights stay -- and draws every prompt
    of the group against it: each prompt's own row must be that row, bit for bit."""
    lo = np.array([a for a, _, _, _ in pools], dtype=np.int64)
    hi = np.array([2**62 if b is None else a + b for a, b, _, _ in pools], dtype=np.int64)
    w = np.array([x for _, _, x, _ in pools], dtype=np.float64)
    share = w * np.array([k for _, _, _, k in pools])
    bounds = np.unique(np.concatenate((lo, hi + 1)))
    prompt = np.array(prompts, dtype=np.int64)
    group = np.searchsorted(bounds, prompt, side="right")
    for g in np.unique(group):
        mine = prompt[group == g]
        c0, finite0 = pool_row(int(mine[0]), lo, hi, share, w)
        for p in mine:
            c, finite = pool_row(int(p), lo, hi, share, w)
            assert c.tobytes() == c0.tobytes() and finite == finite0


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


def _rows(reqs: Requests) -> list[tuple]:
    return [tuple(getattr(reqs, f)[i].item() for f in ROW_FIELDS) for i in range(len(reqs))]


def _filed_one_failure_at_a_time(pending, tick_seconds: float) -> dict[int, list[tuple]]:
    """What the router filed before issue 41's second pass: each failure's retries on their own, sorted stably by
    when, cut at the ticks, appended to each tick's list in the order of the failures."""
    out: dict[int, list[tuple]] = {}
    for reqs, idx, when in pending:
        order = np.argsort(when, kind="stable")
        r = reqs.take(idx[order])
        r.att_t = when[order]
        r.attempt = (reqs.attempt[idx][order] + 1).astype(np.int8)
        ticks = np.floor(r.att_t / tick_seconds + 1e-9).astype(np.int64)
        for k in dict.fromkeys(ticks.tolist()):
            out.setdefault(k, []).extend(_rows(r.take(np.flatnonzero(ticks == k))))
    return out


_failure = st.lists(
    st.tuples(st.booleans(), st.integers(min_value=0, max_value=12)), min_size=1, max_size=15
)  # (retries?, when in quarter seconds, few values: ties)


@settings(max_examples=200, deadline=None)
@given(st.lists(_failure, min_size=1, max_size=6), st.sampled_from([0.25, 0.5, 1.0]))
def test_retries_filed_together_are_what_filing_each_failure_gave(failures, tick_seconds):
    """A tick's retries are what `route` sends again, in the order it concatenates them: filing all the tick's
    failures at once (`retry_cohorts`) must give each tick the same requests in the same order -- ties in when
    included -- as filing each failure's retries on its own did."""
    pending = []
    for k, spec in enumerate(failures):
        reqs = _cohort([i % 3 for i in range(len(spec))], t0=1000.0 * k)
        reqs.attempt = np.array([1 + (i % 2) for i in range(len(spec))], dtype=np.int8)
        idx = np.array([i for i, (retry, _) in enumerate(spec) if retry], dtype=np.int64)
        if not len(idx):
            continue
        when = np.array([0.25 * spec[i][1] + 0.1 * (k % 2) for i in idx], dtype=np.float64)
        pending.append((reqs, idx, when))
    if not pending:
        return
    got: dict[int, list[tuple]] = {}
    for k, r in retry_cohorts(pending, tick_seconds):
        got.setdefault(k, []).extend(_rows(r))
    assert got == _filed_one_failure_at_a_time(pending, tick_seconds)


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 30), st.data())
def test_rows_of_rows_compose(n, data):
    """`route` narrows the rows still on their way step by step and copies the requests once: picking rows of the
    rows picked must be picking those rows of the whole (None: every row, in order)."""
    a = np.arange(100, 100 + n)
    first = data.draw(st.one_of(st.none(), st.lists(st.integers(0, max(n - 1, 0)), max_size=20 if n else 0)))
    i = None if first is None else np.array(first, dtype=np.int64)
    m = n if i is None else len(i)
    second = data.draw(st.one_of(st.none(), st.lists(st.integers(0, max(m - 1, 0)), max_size=20 if m else 0)))
    j = None if second is None else np.array(second, dtype=np.int64)
    step = a if i is None else a[i]
    step = step if j is None else step[j]
    whole = a if pick(i, j) is None else a[pick(i, j)]
    assert whole.tolist() == step.tolist()
    assert pick(a, pick(i, j)).tolist() == step.tolist()


# --- issue 41, third pass: plain-Python paths for the few requests a node admits in a tick --------------------------


def _flash_sale_node(version: str = "v4"):
    from infercast.config import load_config, resolve_scenario
    from infercast.simulator.twin.fleet import build_fleet

    fleet = build_fleet(load_config(resolve_scenario("flash-sale")))
    return next(n for n in fleet.nodes if n.version == version)


_NODE: list = []


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 40_000) | st.integers(1, 100), st.integers(0, 2)), min_size=1, max_size=32),
    st.one_of(st.floats(0.0, 1.0), st.integers(0, 60)),  # blocks in use: a share of the capacity, or blocks left
    st.floats(0.0, 1.0),  # the pool beyond them, as a share of what is left
    st.one_of(st.none(), st.floats(0.05, 1.0)),  # the memory breaker
    st.one_of(st.none(), st.floats(0.0, 1.0)),  # the low tier's idle memory level
    st.floats(0.0, 1.0),  # the memory the node showed last
    st.lists(st.floats(0.0, 20_000.0), max_size=6),  # prompt tokens still to prefill on running slots
)
def test_a_few_requests_are_admitted_as_the_array_path_admits_them(head, used, pool, limit, idle, last, prefills):
    """A node admits the head of its queue up to the first request a gate refuses (its blocks, the memory breaker,
    the low tier's idle gate).  A head of a few requests is judged in plain Python numbers (`_admit_stop_few`): how
    many are admitted and whether the memory breaker stopped it must be what the array path (`_admit_stop`) says,
    for every node state (the running float sums and byte counts to the last bit)."""
    if not _NODE:
        _NODE.append(_flash_sale_node())
    node = _NODE[0]
    node._reset_state()
    kv = node.kv
    kv.used_blocks = int(used * kv.capacity_blocks) if isinstance(used, float) else kv.capacity_blocks - used
    kv.pool_blocks = kv.used_blocks + int(pool * (kv.capacity_blocks - kv.used_blocks))
    node.control.stop_admit_memory = limit
    node.control.low_idle_memory = idle
    node._last_memory = last
    for i, w in enumerate(prefills):
        node.active[i] = True
        node.pf_work[i] = w
    reqs = _cohort([p for _, p in head])
    reqs.prompt = np.array([t for t, _ in head], dtype=np.int64)
    low = idle is not None and last >= idle
    node.queue = RequestQueue()
    node.queue.push(reqs)
    prompt = node.queue.head_column(len(reqs), "prompt")
    prio = node.queue.head_column(len(reqs), "prio") if low else None
    assert node._admit_stop_few(prompt, prio) == node._admit_stop(prompt, prio)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 70_000), max_size=32), min_size=1, max_size=12),
    st.sampled_from([1.0, 0.56]),
)
def test_a_few_floors_are_drawn_as_the_array_path_draws_them(cohorts, speed):
    """A node draws each admitted request's latency floor; a few integer prompt lengths go through plain Python
    floats and per-length terms kept across calls (`_many_few`): every floor must be the array path's
    (`_many_arrays`) to the last bit, across the draws' block refills (a block of 64 here)."""
    from infercast.simulator.twin.latency import FloorSampler

    few = FloorSampler(np.random.default_rng(5), speed, block=64)
    arrays = FloorSampler(np.random.default_rng(5), speed, block=64)
    for lengths in cohorts:
        ctx = np.array(lengths, dtype=np.int64)
        a, b = few.many(ctx), arrays._many_arrays(ctx)
        assert np.array_equal(a.view(np.int64), b.view(np.int64))


def _queue_ops():
    push = st.tuples(st.just("push"), st.lists(st.integers(0, 2), max_size=8))
    front = st.tuples(st.just("front"), st.integers(0, 2))
    take = st.tuples(st.sampled_from(["head", "pop_many", "discard", "drop"]), st.integers(0, 12))
    return st.lists(st.one_of(push, front, take), max_size=25)


@settings(max_examples=300, deadline=None)
@given(_queue_ops())
def test_the_queues_hand_out_the_requests_a_list_of_rows_would(ops):
    """The queues' shortcuts (one slice of the first cohort for `head`, empty classes skipped in a tiered queue's
    `head` and `pop_many`, an empty queue's `drop_older_than`) must hand out what a plain list of rows in serving
    order gives -- requeued rows first, then the cohorts in order; urgent, then normal, then low -- and the tiered
    queue what its generic walk over the classes (`_across`) gives."""
    for tiered in (False, True):
        q = PriorityQueue() if tiered else RequestQueue()
        model: list[list[tuple]] = [[], [], []]  # rows in serving order, per class (one class without tiers)
        t = 0.0
        for op, arg in ops:
            if op == "push":
                reqs = _cohort(arg, t0=t)
                t += 10.0
                q.push(reqs)
                for row in _rows(reqs):
                    model[row[5] if tiered else 0].append(row)
            elif op == "front":
                row = (t - 5.0, t - 5.0, 7, 1, 9, arg, 1, False, t - 5.0, 0, False)
                q.push_front(row)
                model[arg if tiered else 0].insert(0, row)
            else:
                flat = [r for rows in model for r in rows]
                if op == "head":
                    assert _rows(q.head(arg)) == flat[:arg]
                    for name in ("prompt", "prio", "att_t"):
                        col = q.head_column(arg, name)
                        assert col.dtype == getattr(q.head(arg), name).dtype
                        assert col.tolist() == [r[ROW_FIELDS.index(name)] for r in flat[:arg]]
                    if tiered:
                        assert _rows(q._across(arg, lambda c, k: c.head(k))) == flat[:arg]
                elif op in ("pop_many", "discard"):
                    got = q.pop_many(arg) if op == "pop_many" else None
                    if got is not None:
                        assert _rows(got) == flat[:arg]
                    else:
                        q.discard(arg)
                    left = arg
                    for rows in model:
                        k = min(left, len(rows))
                        del rows[:k]
                        left -= k
                else:  # drop what was sent before a cutoff (the rows are in time order within each class)
                    cutoff = t - 10.0 * arg
                    gone = _rows(q.drop_older_than(cutoff))
                    want = [r for rows in model for r in rows if r[1] < cutoff]
                    assert sorted(gone) == sorted(want)
                    for rows in model:
                        rows[:] = [r for r in rows if r[1] >= cutoff]
            assert len(q) == sum(len(rows) for rows in model)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2), max_size=30), st.integers(0, 2), st.sampled_from(["ok", "rejected", "retried"]))
def test_requests_of_one_pool_are_counted_as_per_request_pools_count_them(prio, pool, outcome):
    """The router counts outcomes by pool and priority; given one pool for a whole cohort it must record what it
    records given that pool per request: the same calls, in the same order."""
    from infercast.config import load_config, resolve_scenario
    from infercast.simulator.twin.fleet import build_fleet

    cfg = load_config(resolve_scenario("flash-sale"))
    got = []
    for one in (True, False):
        r = build_fleet(cfg).router
        p = np.array(prio, dtype=np.int8)
        r._count(pool if one else np.full(len(p), pool), p, outcome)
        got.append((list(r.recorder.requests.items()), dict(r.served)))
    assert got[0] == got[1]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.lists(st.integers(0, 40), max_size=40), max_size=14),
    st.booleans(),
)
def test_times_are_put_in_their_stable_order_however_many_runs_they_make(runs, nan):
    """`stable_order` sorts a tick's request times: whichever sort it takes (the stable sort for a few sorted runs,
    the default sort where every key differs), the order must be `argsort(kind="stable")`'s, ties and NaN included."""
    from infercast.simulator.twin.requests import stable_order

    a = np.array([v / 4.0 for run in runs for v in sorted(run)], dtype=np.float64)
    if nan and len(a):
        a[len(a) // 2] = np.nan
    assert stable_order(a).tolist() == np.argsort(a, kind="stable").tolist()


def _water_fill_arrays(loads: np.ndarray, n: int) -> np.ndarray:
    """`water_fill`'s array path as it was before issue 41's third pass (the reference for its plain-Python path)."""
    k = len(loads)
    if k == 0 or n == 0:
        return np.zeros(k, dtype=np.int64)
    order = np.argsort(loads, kind="stable")
    s = loads[order]
    csum = np.cumsum(s)
    levels = (n + csum) / np.arange(1, k + 1)
    m = int(np.flatnonzero(levels >= s)[-1]) + 1
    give = np.zeros(k)
    give[:m] = levels[m - 1] - s[:m]
    counts = np.floor(give).astype(np.int64)
    rest = n - int(counts.sum())
    if rest > 0:
        counts[np.argsort(-(give - counts), kind="stable")[:rest]] += 1
    out = np.zeros(k, dtype=np.int64)
    out[order] = counts
    return out


@settings(max_examples=400, deadline=None)
@given(st.lists(st.integers(0, 300) | st.integers(0, 3), max_size=20), st.integers(0, 2000) | st.integers(0, 7))
def test_a_few_nodes_are_water_filled_as_the_array_path_fills_them(loads, n):
    """Flow control splits a cohort over a pool's nodes by water-filling their loads; for a handful of nodes
    `water_fill` runs in plain Python numbers: the counts must be the array path's, ties and remainders included."""
    from infercast.simulator.twin.sharing import water_fill

    a = np.array(loads, dtype=np.float64)
    assert water_fill(a, n).tolist() == _water_fill_arrays(a, n).tolist()
