"""One inference node of the twin: a waiting queue, a KV-cache manager, a batcher, a prefill server, GPU memory.

Each tick (`step(t0, t1)`) the node, in order: advances decoding, reports first tokens, finishes requests, grows
the KV of decoding requests (preempting the youngest when no block is free: a block-allocation failure), applies
timeouts, admits waiting requests, then checks GPU memory: weights + CUDA overhead + KV footprint + prefill
activations above the card's memory is an OOM — the node crashes, its requests fail back to their clients, and
it comes back after a cold start.

Batchers (seed 000's table):
- dynamic (v4): continuous batching up to `max_batch` running requests; a request that waited longer than the
  batch timeout for its prefill is returned to the head of the queue (partial commit and retry), not dropped.
- fixed (v3.5): batches of up to `max_batch` formed when the previous batch is done, prefilled together, decoded
  until the last one finishes; a batch whose prefill overruns the timeout is dropped whole (clients retry).

The prefill server has a throughput (tokens/s, times the version's `peak_throughput_factor`) and each request a
latency floor from the seed's table (`latency.py`): request i finishes prefill at
`max(admitted_i + floor_i, server_free + prompt_i / throughput)`, which reproduces the table when the node is
quiet and queueing when it is not.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from infercast.config import GIB, PoolConfig, TwinConfig, VersionConfig
from infercast.twin.kvcache import ContiguousKV, PagedKV
from infercast.twin.latency import inter_token_seconds, prefill_floor_seconds, sample_prefill_seconds
from infercast.twin.requests import RequestQueue, Requests


@dataclass
class NodeControl:
    """Knobs the router or a controller sets on a node (None = off)."""

    stop_admit_memory: float | None = None  # stop admitting new requests above this GPU memory ratio
    release_fragmentation: float | None = None  # release queued prefills when fragmentation reaches this


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
        # counters exported as vLLM-style metrics
        self.preemptions_total = 0
        self.alloc_failures_total = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0.0
        self.success_total = 0
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
        self.pf_start = np.zeros(s, dtype=np.float64)
        self.pf_end = np.zeros(s, dtype=np.float64)
        self.orig_t = np.zeros(s, dtype=np.float64)
        self.att_t = np.zeros(s, dtype=np.float64)
        self.prio = np.zeros(s, dtype=np.int8)
        self.attempt = np.zeros(s, dtype=np.int8)
        self.served = np.zeros(s, dtype=bool)
        self.queue = RequestQueue()
        self.server_free = 0.0
        self.batch_end_t: float | None = None  # fixed batcher: a batch is running
        if self.vcfg.kv_manager == "paged":
            bt = self.vcfg.block_size_tokens
            self.kv: PagedKV | ContiguousKV = PagedKV(self.kv_capacity_tokens // bt, bt, self.slots)
        else:
            self.kv = ContiguousKV(self.kv_capacity_tokens, self.slots)
        self.activation_bytes = 0.0
        self._last_memory = self._memory_bytes() / self.physical_bytes

    # --- observations -----------------------------------------------------------------------------------
    @property
    def running(self) -> int:
        return int(self.active.sum())

    @property
    def waiting(self) -> int:
        return len(self.queue)

    @property
    def load(self) -> int:
        return self.running + self.waiting

    def _computed_tokens(self, t: float) -> np.ndarray:
        """Tokens actually holding KV per slot at time t: the computed part of the prompt plus what was generated."""
        a = self.active
        dur = np.maximum(self.pf_end - self.pf_start, 1e-9)
        frac = np.clip((t - self.pf_start) / dur, 0.0, 1.0)
        return np.where(a, self.prompt * frac + np.floor(self.gen), 0.0)

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
        held = float(self._computed_tokens(t).sum())
        return max(0.0, 1.0 - held / allocated)

    def memory_efficiency(self, t: float) -> float:
        """Seed 000's 显存效率比: memory holding live tokens and weights / memory allocated."""
        used = self._memory_bytes()
        live = self.weights_bytes + float(self._computed_tokens(t).sum()) * self.bytes_per_token
        return min(1.0, live / used) if used > 0 else 0.0

    def healthy(self, t: float) -> bool:
        """What a health check sees: the engine answers and its queue moves."""
        return self.up and (t - self.queue.head_att_t()) < self.model.health_queue_age_seconds

    # --- the tick -------------------------------------------------------------------------------------------
    def enqueue(self, reqs: Requests) -> None:
        self.queue.push(reqs)

    def step(self, t0: float, t1: float, sink: TickSink, client_timeout: float) -> None:
        if not self.up:
            if t1 < self.up_at:
                return
            self.up = True
        if not self.active.any() and not len(self.queue):
            self.activation_bytes = 0.0
            self._last_memory = self._memory_bytes() / self.physical_bytes
            return
        self._decode(t0, t1, sink)
        self._timeouts(t1, sink, client_timeout)
        if self.vcfg.batcher.kind == "dynamic":
            self._admit_dynamic(t0, t1)
        else:
            self._admit_fixed(t0, t1)
        self._check_memory(t1, sink)

    def _decode(self, t0: float, t1: float, sink: TickSink) -> None:
        a = self.active
        dec = a & (self.pf_end <= t1)
        n_dec = int(dec.sum())
        if n_dec:
            itl = inter_token_seconds(n_dec, self.model.inter_token_seconds, self.speed)
            before = self.gen[dec]
            self.gen[dec] = before + (t1 - np.maximum(self.pf_end[dec], t0)) / itl
            self.generation_tokens_total += float(np.minimum(self.gen[dec], self.out[dec]).sum() - before.sum())
        first = dec & ~self.ttft_done
        self.ttft_done[first & self.served] = True  # recomputed after preemption: its first token came earlier
        first &= ~self.served
        if first.any():
            sink.ttft.append(
                (self.orig_t[first], self.att_t[first], self.pf_end[first], self.prio[first], self.prompt[first])
            )
            self.ttft_done[first] = True
        done = dec & (self.gen >= self.out)
        if done.any():
            idx = np.flatnonzero(done)
            if self.vcfg.batcher.kind == "fixed":
                # static batching: slots free only when the whole batch is done
                if bool(np.all(~a | done)):
                    self.kv.release_many(np.flatnonzero(a))
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
        dec = self.active & (self.pf_end <= t1)
        if dec.any() and self.kv.kind == "paged":
            slots = np.flatnonzero(dec)
            tokens_now = self.prompt[slots] + np.minimum(np.floor(self.gen[slots]), self.out[slots]).astype(np.int64)
            missing = self.kv.grow(slots, tokens_now)
            if missing.any():
                self._preempt_for(slots, missing, t1)

    def _preempt_for(self, slots: np.ndarray, missing: np.ndarray, t: float) -> None:
        """No free block for decoding requests: preempt the youngest (recompute) until the rest fit."""
        need = dict(zip(slots.tolist(), missing.tolist(), strict=True))
        order = np.flatnonzero(self.active)
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
        self.kv.release(slot)
        self.active[slot] = False
        self.queue.push_front(
            (
                float(self.orig_t[slot]),
                float(self.att_t[slot]),
                int(self.prompt[slot]),
                int(self.out[slot]),
                int(self.max_tokens[slot]),
                int(self.prio[slot]),
                int(self.attempt[slot]),
                bool(self.served[slot] or self.ttft_done[slot]),
            )
        )

    def _timeouts(self, t1: float, sink: TickSink, client_timeout: float) -> None:
        gone = self.queue.drop_older_than(t1 - client_timeout)
        if len(gone):
            sink.failed.append((gone, "timeout"))
        queued = self.active & (self.pf_start > t1)
        if not queued.any():
            return
        timeout = self.vcfg.batcher.timeout_seconds
        if self.vcfg.batcher.kind == "dynamic":
            # partial commit + retry: prefills that waited past the batch timeout go back to the queue head
            late = queued & (self.admit_t + timeout < t1)
            rel = self.control.release_fragmentation
            if rel is not None and self.fragmentation(t1) >= rel:
                late = queued  # the seed's fix: release the batch when fragmentation reaches 25%
            for s in np.flatnonzero(late)[::-1]:
                self._requeue(int(s))
            if late.any():
                self._reschedule_prefills(t1)

    def _reschedule_prefills(self, t: float) -> None:
        """After releasing queued prefills the server is free earlier: recompute its horizon."""
        busy = self.active & (self.pf_start <= t)
        self.server_free = float(self.pf_end[busy].max()) if busy.any() else t

    def _admission_open(self) -> bool:
        lim = self.control.stop_admit_memory
        return lim is None or self._last_memory < lim

    def _admit_dynamic(self, t0: float, t1: float) -> None:
        if not len(self.queue) or not self._admission_open():
            return
        free = np.flatnonzero(~self.active)
        if not len(free):
            return
        throughput = self.model.prefill_tokens_per_second * self.speed
        k = 0
        while k < len(free) and len(self.queue):
            orig_t, att_t, prompt, out, max_tokens, prio, attempt, served = self.queue.peek()
            slot = int(free[k])
            if not self.kv.try_admit(slot, prompt, max_tokens):
                self.alloc_failures_total += 1
                break  # first come, first served: the head blocks the line
            self.queue.pop()
            k += 1
            arrive = max(t0, att_t)
            floor = float(sample_prefill_seconds(np.array([prompt]), self.rng, self.speed)[0])
            start = max(arrive, self.server_free)
            self.server_free = start + prompt / throughput
            end = max(arrive + floor, self.server_free)
            self._fill(slot, orig_t, att_t, prompt, out, max_tokens, prio, attempt, served, arrive, start, end)

    def _admit_fixed(self, t0: float, t1: float) -> None:
        if self.active.any() or not len(self.queue) or not self._admission_open():
            return
        if len(self.queue) < self.max_batch and t1 - self.queue.head_att_t() < self.model.fixed_batch_wait_seconds:
            return
        rows = []
        slot = 0
        while slot < self.max_batch and len(self.queue):
            row = self.queue.peek()
            if not self.kv.try_admit(slot, row[2], row[4]):
                self.alloc_failures_total += 1
                break
            self.queue.pop()
            rows.append((slot, row))
            slot += 1
        if not rows:
            return
        prompts = np.array([r[1][2] for r in rows], dtype=np.float64)
        throughput = self.model.prefill_tokens_per_second * self.speed
        start = max(t0, max(r[1][1] for r in rows))
        floors = prefill_floor_seconds(prompts) / self.speed
        end = start + max(float(floors.max()), float(prompts.sum()) / throughput)
        for s, (orig_t, att_t, prompt, out, max_tokens, prio, attempt, served) in rows:
            self._fill(s, orig_t, att_t, prompt, out, max_tokens, prio, attempt, served, start, start, end)
        self.batch_end_t = end

    def _fill(self, slot, orig_t, att_t, prompt, out, max_tokens, prio, attempt, served, admit, start, end) -> None:
        self.active[slot] = True
        self.ttft_done[slot] = False
        self.prompt[slot], self.out[slot], self.max_tokens[slot] = prompt, out, max_tokens
        self.gen[slot] = 0.0
        self.admit_t[slot], self.pf_start[slot], self.pf_end[slot] = admit, start, end
        self.orig_t[slot], self.att_t[slot] = orig_t, att_t
        self.prio[slot], self.attempt[slot], self.served[slot] = prio, attempt, served
        self.prompt_tokens_total += prompt

    def _check_memory(self, t1: float, sink: TickSink) -> None:
        a = self.active
        in_prefill = a & (self.pf_start <= t1) & (self.pf_end > t1)
        self.activation_bytes = float(self.prompt[in_prefill].sum()) * self.act_bytes_per_token
        # fixed batcher: the whole batch's prompts are in activation memory together
        used = self._memory_bytes()
        self._last_memory = used / self.physical_bytes
        if self.vcfg.batcher.kind == "fixed" and self.batch_end_t is not None:
            queued = a & (self.pf_start <= t1) & ~self.ttft_done
            timeout = self.vcfg.batcher.timeout_seconds
            if queued.any() and self.batch_end_t - float(self.pf_start[queued].min()) > timeout:
                # the batch will overrun its timeout: drop it whole; the clients retry
                idx = np.flatnonzero(a)
                sink.failed.append((self._take(idx), "timeout"))
                self.kv.release_many(idx)
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
        )

    def crash(self, t: float, sink: TickSink, reason: str = "oom") -> None:
        """CUDA OOM (or a kill): every request on the node fails back to its client; cold start follows."""
        lost = [self._take(np.flatnonzero(self.active)), self.queue.drain()]
        sink.failed.append((Requests.concat(lost), reason))
        if reason == "oom":
            self.oom_events += 1
        self.crash_log.append(t)
        self.up = False
        self.up_at = t + self.cold_start_seconds
        self._reset_state()

    def shutdown(self) -> Requests:
        """Take the node out (standby): returns what it held so the router can re-route it."""
        lost = Requests.concat([self._take(np.flatnonzero(self.active)), self.queue.drain()])
        self._reset_state()
        self.up = False
        self.up_at = float("inf")
        return lost

    def start(self, t: float, cold: bool = True) -> None:
        """Boot a stopped node: it serves after the cold start (weights load, CUDA graphs, warm-up)."""
        if self.up or self.up_at < float("inf"):
            return
        self.up_at = t + (self.cold_start_seconds if cold else 0.0)
