"""One inference node of the twin: a waiting queue, a KV-cache manager, a batcher, a prefill server, GPU memory.

Each tick (`step(t0, t1)`) the node, in order: applies timeouts, admits waiting requests, advances prefills,
advances decoding (reporting first tokens, finishing requests, growing the KV of decoding requests and preempting
the youngest when no block is free: a block-allocation failure), then checks GPU memory: weights + CUDA
overhead + KV footprint + prefill activations above the card's memory is an OOM — the node crashes, its requests
fail back to their clients, and
it comes back after a cold start.  A paged manager that allocates on demand (no pre-allocated pool, the seed's
按需分页分配) lets the KV cache grow until the card is full, with no room kept for activations: the first prefill
step on a full card is the OOM.

Batchers (seed 000's table):
- dynamic (v4): continuous batching up to `max_batch` running requests.  Prefill is chunked and first come, first
  served (vLLM's scheduler): each tick's prefill throughput goes to the admitted prompts in admission order.  A
  prefill that overruns the batch timeout keeps what it computed and carries on in the next step (partial commit
  and retry): nothing is dropped.
- fixed (v3.5): batches of up to `max_batch` formed when the previous batch is done, prefilled together, decoded
  until the last one finishes; a batch whose prefill overruns the timeout is dropped whole (clients retry).

Each request also has a latency floor from the seed's table (`latency.py`): it cannot get its first token sooner
than the table says, however idle the node.  So the twin reproduces the table when the node is quiet, and
queueing when it is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from infercast.config import GIB, PoolConfig, TwinConfig, VersionConfig
from infercast.simulator.twin.exposition import TTFT_BUCKETS, node_metrics_text
from infercast.simulator.twin.kvcache import ContiguousKV, PagedKV
from infercast.simulator.twin.latency import FloorSampler, prefill_floor_seconds
from infercast.simulator.twin.requests import ROW_FIELDS, PriorityQueue, RequestQueue, Requests

_TTFT_EDGES = np.asarray(TTFT_BUCKETS)  # what `np.searchsorted` made of the tuple at each call
_FEW_ADMIT = 32  # a head of at most this many requests is admitted through `Node._admit_stop_few`


@dataclass
class NodeControl:
    """Knobs the router or a controller sets on a node (None = off)."""

    # admit a request only if the GPU memory it brings (its KV blocks and prefill activations) keeps the card
    # under this ratio (seed 000: 整体使用率>80% → 停止接收新请求, checked per request, not once per tick)
    stop_admit_memory: float | None = None
    release_fragmentation: float | None = None  # release queued prefills when fragmentation reaches this
    # seed 004's tiers at the node: urgent before normal before low; low only below this memory with nothing else
    # waiting (None: one FIFO queue, as engines have by default)
    low_idle_memory: float | None = None
    # seed 004's levers (off: None): the engine's hard max_seq_len (prompt + max_tokens, refused with a 400 as vLLM
    # does), and the 70/25/5 KV partitions by tier (urgent, normal, low shares of the node's KV blocks)
    max_seq_len: int | None = None
    kv_partitions: tuple[float, float, float] | None = None


@dataclass
class TickSink:
    """What a node hands back to the router each tick."""

    failed: list[tuple[Requests, str]] = field(default_factory=list)  # (requests, reason) -> clients retry
    # first tokens: (orig_t, att_t, first-token time, prio, prompt tokens)
    ttft: list[tuple[np.ndarray, ...]] = field(default_factory=list)
    completed: int = 0


class Node:
    def __init__(
        self,
        name: str,
        pool: str,
        version: str,
        vcfg: VersionConfig,
        pcfg: PoolConfig,
        model: TwinConfig,
        rng: np.random.Generator,
        cold_start_seconds: float,
        engine_index: int = 0,
    ) -> None:
        self.name, self.pool, self.version = name, pool, version
        self.vcfg, self.pcfg, self.model, self.rng = vcfg, pcfg, model, rng
        self.engine_index = engine_index
        self.cold_start_seconds = cold_start_seconds
        self.speed = vcfg.peak_throughput_factor
        self.physical_bytes = pcfg.node_memory_bytes
        self.weights_bytes = vcfg.model.weights_bytes
        self.overhead_bytes = int(model.overhead_gb_per_gpu * pcfg.gpus_per_node * GIB)
        self.bytes_per_token = vcfg.model.kv_bytes_per_token
        self.act_bytes_per_token = model.activation_gb_per_1k_tokens * GIB / 1000.0
        kv_bytes = self.physical_bytes * pcfg.memory_utilization - self.weights_bytes - self.overhead_bytes
        self.kv_capacity_tokens = int(kv_bytes // self.bytes_per_token)
        self.slots = vcfg.batcher.max_batch
        self.max_batch = vcfg.batcher.max_batch
        self.control = NodeControl()
        self.up = True
        self.up_at = 0.0
        self.oom_events = 0
        self.crash_log: list[float] = []
        self.crash_reasons: list[str] = []  # per crash: oom, killed
        self.crash_memory: list[float] = []  # GPU memory ratio that broke the card, per crash
        self.crash_fragmentation: list[float] = []
        # counters exported as vLLM-style metrics
        self.preemptions_total = 0
        self.alloc_failures_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0.0
        self.success_total = 0
        self._floor = FloorSampler(rng, self.speed)
        self.ttft_hist = np.zeros(len(TTFT_BUCKETS) + 1, dtype=np.int64)  # vLLM's buckets, +Inf last
        self.ttft_sum = 0.0
        self.t_last = 0.0
        self._reset_state()

    # --- state ------------------------------------------------------------------------------------------
    def _reset_state(self) -> None:
        s = self.slots
        self.active = np.zeros(s, dtype=bool)
        self.ttft_done = np.zeros(s, dtype=bool)
        self.prompt = np.zeros(s, dtype=np.int64)
        self.out = np.zeros(s, dtype=np.int64)
        self.max_tokens = np.zeros(s, dtype=np.int64)
        self.gen = np.zeros(s, dtype=np.float64)
        self.admit_t = np.zeros(s, dtype=np.float64)
        self.pf_work = np.zeros(s, dtype=np.float64)  # prompt tokens still to prefill
        self.pf_floor = np.zeros(s, dtype=np.float64)  # earliest first-token time (the table's floor)
        self.pf_end = np.full(s, np.inf)  # first-token time, once the prefill work is done
        self.orig_t = np.zeros(s, dtype=np.float64)
        self.att_t = np.zeros(s, dtype=np.float64)
        self.prio = np.zeros(s, dtype=np.int8)
        self.attempt = np.zeros(s, dtype=np.int8)
        self.served = np.zeros(s, dtype=bool)
        self.sent_t = np.zeros(s, dtype=np.float64)
        self.tenant = np.zeros(s, dtype=np.int8)
        self.malformed = np.zeros(s, dtype=bool)
        self.queue: RequestQueue | PriorityQueue = (
            PriorityQueue() if self.control.low_idle_memory is not None else RequestQueue()
        )
        self.batch_end_t: float | None = None  # fixed batcher: a batch is running
        self.batch_start_t = 0.0
        if self.vcfg.kv_manager == "paged":
            bt = self.vcfg.block_size_tokens
            self.kv: PagedKV | ContiguousKV = PagedKV(
                self.kv_capacity_tokens // bt, bt, self.slots, release_seconds=self.model.kv_release_seconds
            )
        else:
            self.kv = ContiguousKV(self.kv_capacity_tokens, self.slots)
        self.activation_bytes = 0.0
        self._last_memory = self._memory_bytes() / self.physical_bytes
        self.memory_blocked = False  # the memory breaker held the queue at the last admission

    # --- observations -----------------------------------------------------------------------------------
    @property
    def running(self) -> int:
        return int(np.count_nonzero(self.active))

    @property
    def waiting(self) -> int:
        return len(self.queue)

    @property
    def waiting_served_first(self) -> int:
        """Waiting requests that are not low-priority work held for idle time (all of them without tiers)."""
        return self.waiting_upto(1)

    def waiting_upto(self, prio: int) -> int:
        """Waiting requests this node serves before one of priority `prio` (all of them without tiers)."""
        q = self.queue
        return sum(len(c) for c in q.classes[: prio + 1]) if isinstance(q, PriorityQueue) else len(q)

    @property
    def load(self) -> int:
        return self.running + self.waiting

    def _computed_tokens(self, t: float) -> np.ndarray:
        """Tokens actually holding KV per slot at time t: the computed part of the prompt plus what was generated."""
        return np.where(self.active, self.prompt - self.pf_work + np.floor(self.gen), 0.0)

    def _memory_bytes(self) -> float:
        return (
            self.weights_bytes
            + self.overhead_bytes
            + self.kv.footprint_tokens() * self.bytes_per_token
            + self.activation_bytes
        )

    def memory_usage(self) -> float:
        return self._last_memory

    def kv_usage(self) -> float:
        return self.kv.allocated_tokens() / self.kv_capacity_tokens if self.up else 0.0

    def fragmentation(self, t: float) -> float:
        allocated = self.kv.footprint_tokens()
        if allocated <= 0:
            return 0.0
        held = float(np.add.reduce(self._computed_tokens(t)))
        return max(0.0, 1.0 - held / allocated)

    def memory_split(self, t: float) -> tuple[float, float]:
        """(effective compute memory, total allocated memory) in bytes, seed 000's 显存效率比 = the first / the second:
        effective is the weights, the KV of tokens computed and the prefill activations in use; allocated adds the
        CUDA overhead, KV blocks that hold no token yet (queued prompts, partly filled blocks) and cached free
        blocks (or a contiguous arena's holes)."""
        allocated = self._memory_bytes()
        effective = (
            self.weights_bytes
            + float(np.add.reduce(self._computed_tokens(t))) * self.bytes_per_token
            + self.activation_bytes
        )
        return min(effective, allocated), allocated

    def memory_efficiency(self, t: float) -> float:
        """Seed 000's 显存效率比 of this node (see `memory_split`)."""
        effective, allocated = self.memory_split(t)
        return effective / allocated if allocated > 0 else 0.0

    def healthy(self, t: float) -> bool:
        """What a health check sees: the engine answers and its queue moves."""
        return self.up and (t - self.queue.head_att_t()) < self.model.health_queue_age_seconds

    # --- the tick -------------------------------------------------------------------------------------------
    def enqueue(self, reqs: Requests) -> None:
        self.queue.push(reqs)

    def metrics_text(self) -> str:
        """vLLM-style /metrics of this node plus the infercast engine extension ('' when down)."""
        return node_metrics_text(self, self.t_last)

    def step(self, t0: float, t1: float, sink: TickSink, client_timeout: float) -> None:
        self.t_last = t1
        if not self.up:
            if t1 < self.up_at:
                return
            self.up = True
        if not self.active.any() and not len(self.queue):
            self.kv.settle(t1 - t0)
            self.activation_bytes = 0.0
            self._last_memory = self._memory_bytes() / self.physical_bytes
            return
        self._timeouts(t1, sink, client_timeout)
        self._reject_too_long(sink)
        if self.vcfg.batcher.kind == "dynamic":
            self._admit_dynamic(t0, t1)
        else:
            self._admit_fixed(t0, t1)
        self._prefill(t0, t1)
        self._decode(t0, t1, sink)
        self.kv.settle(t1 - t0)
        self._check_memory(t1, sink)

    def _prefill(self, t0: float, t1: float) -> None:
        """Chunked prefill, one prompt after another (vLLM's scheduler): the tick's prefill throughput goes first to
        prompts whose prefill has started, then to the others in admission order — with tiers, urgent before
        normal before low (vLLM's priority scheduling), which cannot preempt a prefill already under way.  So a
        prompt waits for the ones ahead of it, a short prompt behind a long one too: the head-of-line blocking
        that pools isolated by context length avoid.  A prompt's first token comes when its work is done *and*
        its floor has passed."""
        busy = (self.active & (self.pf_work > 0)).nonzero()[0]
        if not len(busy):
            return
        rate = self.model.prefill_tokens_per_second * self.speed
        budget = rate * (t1 - t0)
        if len(busy) == 1:  # one prompt: its own order
            order = busy
        else:
            waiting = self.pf_work[busy] >= self.prompt[busy]  # not started
            prio = self.prio[busy] if self.control.low_idle_memory is not None else np.zeros(len(busy))
            order = busy[np.lexsort((self.admit_t[busy], prio, waiting))]
        work = self.pf_work[order]
        spent_at = work.cumsum()  # budget used when each prompt, in that order, is done
        done = spent_at <= budget
        k = int(np.count_nonzero(done))
        fin = order[:k]
        self.pf_end[fin] = np.maximum(t0 + spent_at[:k] / rate, self.pf_floor[fin])
        self.pf_work[fin] = 0.0
        if k < len(order):  # the next prompt gets what is left of the budget
            left = budget - (spent_at[k - 1] if k else 0.0)
            self.pf_work[order[k]] -= left

    def _decode(self, t0: float, t1: float, sink: TickSink) -> None:
        # the slots are handled as index arrays in slot order (the same elements, in the same order, as boolean
        # masks over all the slots would pick: the sums below add them in the same order)
        a = self.active
        due = a & (self.pf_end <= t1)  # active, prefill done (first token due) by the end of the tick
        bad = due & self.malformed
        if bad.any():  # the prefill ran over an invalid payload: the engine answers 400, nothing is generated
            idx = bad.nonzero()[0]
            sink.failed.append((self._take(idx), "malformed"))
            self.kv.release_many(idx)
            self.active[idx] = False
            due &= ~bad
        dec = due.nonzero()[0]  # decoding this tick
        n_dec = len(dec)
        if not n_dec:
            return  # nothing decodes: no first token, nothing done, no KV growth
        # `inter_token_seconds(n_dec, ...)` in plain floats: the same operations in the same order
        itl = self.model.inter_token_seconds * (1.0 + n_dec / 64.0) / self.speed
        before = self.gen[dec]
        after = before + (t1 - np.maximum(self.pf_end[dec], t0)) / itl
        self.gen[dec] = after
        out = self.out[dec]
        self.generation_tokens_total += float(np.add.reduce(np.minimum(after, out)) - np.add.reduce(before))
        first = dec[~self.ttft_done[dec]]
        if len(first):
            again = self.served[first]
            if again.any():  # recomputed after preemption: its first token came earlier
                self.ttft_done[first[again]] = True
                first = first[~again]
        if len(first):
            ttft = self.pf_end[first] - self.sent_t[first]
            self.ttft_hist += np.bincount(_TTFT_EDGES.searchsorted(ttft, side="left"), minlength=len(self.ttft_hist))
            self.ttft_sum += float(np.add.reduce(ttft))
            sink.ttft.append(
                (self.orig_t[first], self.sent_t[first], self.pf_end[first], self.prio[first], self.prompt[first])
            )
            self.ttft_done[first] = True
        idx = dec[after >= out]  # done
        if len(idx):
            if self.vcfg.batcher.kind == "fixed":
                # static batching: slots free only when the whole batch is done
                done = np.zeros(len(a), dtype=bool)
                done[idx] = True
                if not (a & ~done).any():
                    self.kv.release_many(a.nonzero()[0])
                    self.success_total += int(a.sum())
                    sink.completed += int(a.sum())
                    self.active[:] = False
                    self.batch_end_t = None
                else:
                    self.gen[idx] = self.out[idx]  # finished, waiting for the batch
            else:
                self.kv.release_many(idx)
                self.active[idx] = False
                self.success_total += len(idx)
                sink.completed += len(idx)
        # KV growth of decoding requests (paged only; contiguous reserved it up front)
        if self.kv.kind == "paged":
            if len(idx):
                slots = dec[self.active[dec]]
                gen, out = self.gen[slots], self.out[slots]
            else:  # none finished: every decoding slot is still active, its tokens as just computed
                slots, gen = dec, after
            if len(slots):
                tokens_now = self.prompt[slots] + np.minimum(np.floor(gen), out).astype(np.int64)
                missing = self.kv.grow(slots, tokens_now)
                if missing.any():
                    self._preempt_for(slots, missing, t1)

    def _preempt_for(self, slots: np.ndarray, missing: np.ndarray, t: float) -> None:
        """No free block for decoding requests: preempt the youngest (recompute) until the rest fit."""
        need = dict(zip(slots.tolist(), missing.tolist(), strict=True))
        order = self.active.nonzero()[0]
        order = order[np.argsort(-self.admit_t[order], kind="stable")]  # youngest first
        for victim in order:
            if sum(need.values()) <= self.kv.free_blocks:
                break
            victim = int(victim)
            self.alloc_failures_total += 1
            self.preemptions_total += 1
            need.pop(victim, None)
            self._requeue(victim)
        for s, n in need.items():
            if n and self.active[s]:
                grant = min(n, self.kv.free_blocks)
                self.kv.grant(s, grant)

    def _requeue(self, slot: int) -> None:
        """Preempted (recompute): back to the head of the queue, keeping its place and its history."""
        self.kv.release(slot)
        self.active[slot] = False
        row = self._take(np.array([slot]))
        self.queue.push_front(tuple(getattr(row, f)[0].item() for f in ROW_FIELDS))

    def _timeouts(self, t1: float, sink: TickSink, client_timeout: float) -> None:
        gone = self.queue.drop_older_than(t1 - client_timeout)
        if len(gone):
            sink.failed.append((gone, "timeout"))

    def _reject_too_long(self, sink: TickSink) -> None:
        """A prompt longer than the model's context or than the whole KV cache can never run: refuse it (vLLM
        answers 400), rather than let it block the head of the queue forever."""
        limit = min(self.vcfg.max_model_len, self.kv_capacity_tokens)
        seq = self.control.max_seq_len
        rows = []
        while len(self.queue):
            prompt, max_tokens = self.queue.head_lengths()
            # seed 004's max_seq_len: the prompt and the tokens it asks for must fit (vLLM: "This model's maximum
            # context length is N tokens. However, you requested ...")
            if prompt <= limit and (seq is None or prompt + max_tokens <= seq):
                break
            rows.append(self.queue.peek())
            self.queue.pop()
        if rows:
            from infercast.simulator.twin.requests import rows_to_requests

            sink.failed.append((rows_to_requests(rows), "too_long"))

    def set_tiers(self, low_idle_memory: float | None) -> None:
        """Switch between one FIFO queue and seed 004's tiers, keeping every waiting request."""
        self.control.low_idle_memory = low_idle_memory
        tiered = low_idle_memory is not None
        if tiered != isinstance(self.queue, PriorityQueue):
            waiting = self.queue.drain()
            self.queue = PriorityQueue() if tiered else RequestQueue()
            self.queue.push(waiting)

    def _memory_if_admitted(self, prompt: int, max_tokens: int, prefill_tokens: float) -> float:
        """GPU bytes once this prompt is admitted: its KV blocks (as the pool would grow for them) and the prefill
        activations with it in the queue of prefills."""
        if self.vcfg.batcher.kind == "fixed":
            act = prefill_tokens + prompt  # the whole batch is prefilled in one pass
        else:
            act = min(prefill_tokens + prompt, self.model.prefill_chunk_tokens)
        return (
            self.weights_bytes
            + self.overhead_bytes
            + self.kv.footprint_if_admitted(prompt, max_tokens) * self.bytes_per_token
            + act * self.act_bytes_per_token
        )

    def _may_admit(self, row: tuple, prefill_tokens: float) -> bool:
        """The per-request gates: low-priority work only when idle, and the memory breaker."""
        c = self.control
        if c.low_idle_memory is not None and row[5] == 2 and self._last_memory >= c.low_idle_memory:
            return False
        lim = c.stop_admit_memory
        return lim is None or self._memory_if_admitted(row[2], row[4], prefill_tokens) <= lim * self.physical_bytes

    def _partition_allows(self, row: tuple) -> bool:
        """Seed 004's KV partitions: a tier admits a prompt only while its KV stays within its own share of the
        node's KV plus the idle part of the shares of the tiers below it (urgent may borrow the idle elastic and
        degraded shares, normal the idle degraded share; nothing borrows upward).  What decoding later grows is not
        re-checked: the reservation is judged at admission, as a scheduler's would be."""
        shares = self.control.kv_partitions
        if shares is None:
            return True
        prio = int(row[5])
        held = np.bincount(self.prio[self.active].astype(np.int64), weights=self.kv.slot_tokens()[self.active],
                           minlength=3) / self.kv_capacity_tokens  # fmt: skip
        room = shares[prio] + sum(max(0.0, shares[d] - held[d]) for d in range(prio + 1, 3))
        need = self.kv.tokens_if_admitted(row[2], row[4]) / self.kv_capacity_tokens
        return held[prio] + need <= room + 1e-12

    def _admission_open(self, t: float) -> bool:
        rel = self.control.release_fragmentation
        if rel is None or self.fragmentation(t) < rel:
            return True
        # The seed's "release the current batch at 25% fragmentation": give the cached free blocks back to the
        # GPU, and if that is not enough, admit nothing new until the admitted prefills have filled their blocks.
        self.kv.release_cached()
        return self.fragmentation(t) < rel

    def _admit_dynamic(self, t0: float, t1: float) -> None:
        if not len(self.queue) or not self._admission_open(t0):
            return
        free = (~self.active).nonzero()[0]
        if not len(free):
            return
        if self.kv.kind == "paged" and self.control.kv_partitions is None:
            self._admit_paged(t0, free)
            return
        k = 0
        prefill = float(np.add.reduce(self.pf_work[self.active]))
        self.memory_blocked = False
        while k < len(free) and len(self.queue):
            row = self.queue.peek()
            prompt, max_tokens, sent_t = row[2], row[4], row[8]
            if not self._may_admit(row, prefill):
                self.memory_blocked = True
                break  # first come, first served (within a tier): the head waits for memory
            if not self._partition_allows(row):
                break  # its tier's share is full: it waits (higher tiers were served first: none waits)
            slot = int(free[k])
            if not self.kv.try_admit(slot, prompt, max_tokens):
                self.alloc_failures_total += 1
                break  # first come, first served: the head blocks the line
            self.queue.pop()
            k += 1
            prefill += prompt
            arrive = max(t0, sent_t)
            self._fill(slot, row, arrive, arrive + self._floor(prompt))

    def _admit_paged(self, t0: float, free: np.ndarray) -> None:
        """The loop above on a paged KV cache without partitions, over the queue's head as arrays: request i is
        admitted when every request before it was and it passes the same gates, in the same order, with the
        state the ones before it left (blocks in use, the pool, the prefill queue).  So the first request that
        fails a gate ends the admission, as `break` does in the loop, and what is admitted is what the loop
        admits, to the last bit (the running sums are sequential, as the loop adds them)."""
        c, kv = self.control, self.kv
        assert isinstance(kv, PagedKV)
        q = self.queue
        n = min(len(free), len(q))
        # the gates read the head's prompts (and priorities, for the low tier's idle gate): the rest of its columns
        # only for the requests admitted
        prompt = q.head_column(n, "prompt")
        low = c.low_idle_memory is not None and self._last_memory >= c.low_idle_memory
        prio = q.head_column(n, "prio") if low else None
        m, blocked = self._admit_stop_few(prompt, prio) if n <= _FEW_ADMIT else self._admit_stop(prompt, prio)
        self.memory_blocked = blocked
        if m < n and not blocked:  # the head's blocks are not free: it blocks the line
            kv.failures += 1
            self.alloc_failures_total += 1
        if m == 0:
            return
        head = q.head(m)
        q.discard(m)
        kv.admit_many(free[:m], prompt[:m])
        self._fill_many(free[:m], head, t0)

    def _admit_stop(self, prompt: np.ndarray, prio: np.ndarray | None) -> tuple[int, bool]:
        """How many of the queue's head (its prompts; its priorities while the low tier's idle gate is shut, else
        None) `_admit_paged` admits, and whether the memory breaker (or that gate) stopped it there (else the
        blocks ran out, or every one was admitted), as array operations."""
        c, kv = self.control, self.kv
        n = len(prompt)
        # blocks in use once request i is admitted (with all before it): `try_admit` fails past the capacity
        used = kv.used_blocks + np.cumsum(kv.blocks_for(prompt))
        fails = used > kv.capacity_blocks
        blocked = np.zeros(n, dtype=bool)  # `_may_admit` says no
        if prio is not None:
            blocked |= prio == 2
        if c.stop_admit_memory is not None:
            # `_memory_if_admitted` for each request with those before it admitted.  The pool grows a segment at a
            # time only when the blocks in use outgrow it (`_grow_pool`); `footprint_if_admitted` judges with the
            # pool as it stands before the request and the segments its blocks would need
            seg = kv.segment_blocks
            grown = np.minimum(kv.capacity_blocks, -(-used // seg) * seg)
            pool_after = np.where(used > kv.pool_blocks, grown, kv.pool_blocks)
            pool_before = np.concatenate(([kv.pool_blocks], pool_after[:-1]))
            footprint = np.maximum(pool_before, grown) * kv.block_tokens
            # the prefill queue with request i in it: the loop's running float sum, in the loop's order
            prefill = np.cumsum(np.concatenate(([float(self.pf_work[self.active].sum())], prompt)))[1:]
            act = np.minimum(prefill, self.model.prefill_chunk_tokens)
            memory = (self.weights_bytes + self.overhead_bytes + footprint * self.bytes_per_token) + (
                act * self.act_bytes_per_token
            )
            blocked |= memory > c.stop_admit_memory * self.physical_bytes
        stop = (blocked | fails).nonzero()[0]
        m = int(stop[0]) if len(stop) else n
        return m, bool(m < n and blocked[m])

    def _admit_stop_few(self, prompt: np.ndarray, prio: np.ndarray | None) -> tuple[int, bool]:
        """`_admit_stop` for a short head, request by request in plain Python numbers: the same integer arithmetic
        (exact in both) and the same float operations in the same order (the prefill queue's running sum, the
        activations, the bytes), stopping at the first request a gate refuses, as the loop of `_admit_dynamic`
        does.  What it returns is what `_admit_stop` returns, for every head and node state."""
        c, kv = self.control, self.kv
        prompts = prompt.tolist()
        low = prio is not None
        prios = prio.tolist() if low else None
        lim = c.stop_admit_memory
        bt, cap, seg, pool0 = kv.block_tokens, kv.capacity_blocks, kv.segment_blocks, kv.pool_blocks
        if lim is not None:
            limit_bytes = lim * self.physical_bytes
            base = self.weights_bytes + self.overhead_bytes
            bpt, abpt = self.bytes_per_token, self.act_bytes_per_token
            chunk = self.model.prefill_chunk_tokens
            prefill = float(
                np.add.reduce(self.pf_work[self.active])
            )  # the queue of prefills, then each prompt added to it
        used = kv.used_blocks
        before = pool0  # the pool as it stands before request i (`_admit_stop`'s `pool_before`)
        for i, p in enumerate(prompts):
            used += -(-p // bt)
            blocked = low and prios[i] == 2
            if lim is not None:
                grown = min(cap, -(-used // seg) * seg)
                footprint = max(before, grown) * bt
                before = grown if used > pool0 else pool0
                prefill += float(p)
                memory = (base + footprint * bpt) + min(prefill, chunk) * abpt
                blocked = blocked or memory > limit_bytes
            if blocked or used > cap:
                return i, blocked
        return len(prompts), False

    def _admit_fixed(self, t0: float, t1: float) -> None:
        if self.active.any() or not len(self.queue) or not self._admission_open(t0):
            return
        if len(self.queue) < self.max_batch and t1 - self.queue.head_att_t() < self.model.fixed_batch_wait_seconds:
            return
        rows = []
        slot = 0
        prefill = 0.0
        self.memory_blocked = False
        while slot < self.max_batch and len(self.queue):
            row = self.queue.peek()
            if not self._may_admit(row, prefill):
                self.memory_blocked = True
                break
            if not self._partition_allows(row):
                break
            prefill += row[2]
            if not self.kv.try_admit(slot, row[2], row[4]):
                self.alloc_failures_total += 1
                break
            self.queue.pop()
            rows.append((slot, row))
            slot += 1
        if not rows:
            return
        # the batch is prefilled together: its prompts share the throughput, all finish with the last
        prompts = np.array([r[1][2] for r in rows], dtype=np.float64)
        throughput = self.model.prefill_tokens_per_second * self.speed
        start = max(t0, max(r[1][1] for r in rows))
        floors = prefill_floor_seconds(prompts) / self.speed
        end = start + max(float(floors.max()), float(prompts.sum()) / throughput)
        for s, row in rows:
            self._fill(s, row, start, end)
            self.pf_work[s] = 0.0  # accounted as a whole batch: first tokens come at `end`
            self.pf_end[s] = end
        self.batch_start_t = start
        self.batch_end_t = end

    def _fill_many(self, slots: np.ndarray, reqs: Requests, t0: float) -> None:
        """`_fill` for many slots at once: each request arrives at max(t0, sent_t) and draws its floor, in order."""
        arrive = np.maximum(t0, reqs.sent_t)
        self.active[slots] = True
        self.ttft_done[slots] = False
        self.prompt[slots], self.out[slots], self.max_tokens[slots] = reqs.prompt, reqs.out, reqs.max_tokens
        self.gen[slots] = 0.0
        self.admit_t[slots] = arrive
        self.pf_work[slots], self.pf_end[slots] = reqs.prompt, np.inf
        self.pf_floor[slots] = arrive + self._floor.many(reqs.prompt)
        self.orig_t[slots], self.att_t[slots] = reqs.orig_t, reqs.att_t
        self.prio[slots], self.attempt[slots], self.served[slots] = reqs.prio, reqs.attempt, reqs.served
        self.sent_t[slots], self.tenant[slots], self.malformed[slots] = reqs.sent_t, reqs.tenant, reqs.malformed
        self.prompt_tokens_total += int(np.add.reduce(reqs.prompt))

    def _fill(self, slot: int, row: tuple, admit: float, floor_end: float) -> None:
        orig_t, att_t, prompt, out, max_tokens, prio, attempt, served, sent_t, tenant, malformed = row
        self.active[slot] = True
        self.ttft_done[slot] = False
        self.prompt[slot], self.out[slot], self.max_tokens[slot] = prompt, out, max_tokens
        self.gen[slot] = 0.0
        self.admit_t[slot] = admit
        self.pf_work[slot], self.pf_floor[slot], self.pf_end[slot] = float(prompt), floor_end, np.inf
        self.orig_t[slot], self.att_t[slot] = orig_t, att_t
        self.prio[slot], self.attempt[slot], self.served[slot], self.sent_t[slot] = prio, attempt, served, sent_t
        self.tenant[slot], self.malformed[slot] = tenant, malformed
        self.prompt_tokens_total += prompt

    def _check_memory(self, t1: float, sink: TickSink) -> None:
        a = self.active
        if self.vcfg.batcher.kind == "fixed":
            # the old engine prefills the whole batch in one pass: all its prompts' activations at once
            tokens = float(self.prompt[a & (self.pf_end > t1)].sum())
        else:
            # chunked prefill: activations of at most one chunk of prompt tokens per step
            tokens = min(float(np.add.reduce(self.pf_work[a])), self.model.prefill_chunk_tokens)
        self.activation_bytes = tokens * self.act_bytes_per_token
        used = self._memory_bytes()
        self._last_memory = used / self.physical_bytes
        if self.vcfg.batcher.kind == "fixed" and self.batch_end_t is not None:
            timeout = self.vcfg.batcher.timeout_seconds
            if self.batch_end_t - self.batch_start_t > timeout and t1 >= self.batch_start_t + timeout:
                # the batch overran its timeout: dropped whole; the clients retry
                idx = (a & (self.pf_end > t1)).nonzero()[0]
                if len(idx):
                    sink.failed.append((self._take(idx), "timeout"))
                    self.kv.release_many(a.nonzero()[0])
                    self.active[:] = False
                    self.batch_end_t = None
        if used > self.physical_bytes:
            self.crash(t1, sink)

    def _take(self, idx: np.ndarray) -> Requests:
        return Requests(
            self.orig_t[idx].copy(),
            self.att_t[idx].copy(),
            self.prompt[idx].copy(),
            self.out[idx].copy(),
            self.max_tokens[idx].copy(),
            self.prio[idx].copy(),
            self.attempt[idx].copy(),
            self.served[idx] | self.ttft_done[idx],
            self.sent_t[idx].copy(),
            self.tenant[idx].copy(),
            self.malformed[idx].copy(),
        )

    def crash(self, t: float, sink: TickSink, reason: str = "oom") -> None:
        """CUDA OOM (or a kill): every request on the node fails back to its client; cold start follows."""
        lost = [self._take(self.active.nonzero()[0]), self.queue.drain()]
        sink.failed.append((Requests.concat(lost), reason))
        if reason == "oom":
            self.oom_events += 1
        self.crash_log.append(t)
        self.crash_reasons.append(reason)
        self.crash_memory.append(self._memory_bytes() / self.physical_bytes)
        self.crash_fragmentation.append(self.fragmentation(t))
        self.up = False
        self.up_at = t + self.cold_start_seconds
        self._reset_state()

    def shutdown(self) -> Requests:
        """Take the node out (standby): returns what it held so the router can re-route it."""
        lost = Requests.concat([self._take(self.active.nonzero()[0]), self.queue.drain()])
        self._reset_state()
        self.up = False
        self.up_at = float("inf")
        return lost

    def start(self, t: float, cold: bool = True) -> None:
        """Boot a stopped node: it serves after the cold start (weights load, CUDA graphs, warm-up)."""
        if self.up or self.up_at < float("inf"):
            return
        self.up_at = t + (self.cold_start_seconds if cold else 0.0)
