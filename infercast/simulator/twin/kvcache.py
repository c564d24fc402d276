"""KV-cache managers of one node: paged (v4) and contiguous pre-allocation (v3.5).  Pure bookkeeping.

Both hand out KV capacity to request *slots* (the engine's running set) and report what the catalog defines:

- usage         = capacity held by requests / total KV capacity
- fragmentation = allocated capacity that holds no token / allocated capacity
- failures      = times an allocation could not be served (the engine then preempts or stops admitting)

**Paged** (seed 000: 按需分页分配, blocks of 16 tokens allocated on demand from GPU memory).  A request gets the blocks
for its whole prompt when it is admitted (first come, first served: the seed's 先到先占), then one block per 16
generated tokens as it decodes.  Tokens count as held only once computed: blocks of a prompt still queued for
prefill hold nothing yet, nor does the unfilled tail of each last block.  So fragmentation is small when prefill
keeps up and climbs when long prompts queue — the seed's 27% under mixed long contexts.  Blocks are fungible, so a
count per slot is exact; GPU memory follows the blocks allocated (on demand, so memory can run out while prefill
activations also need room).

**Contiguous** (v3.5).  A request reserves one contiguous region for its maximum length (prompt + max_tokens) up
front, first fit in a linear arena.  Freed regions leave holes; a request that fits in the free total but in no hole
fails (external fragmentation).  GPU memory follows the arena's high-water mark.
"""

from __future__ import annotations

import numpy as np


class PagedKV:
    """Paged blocks over an on-demand pool.  The pool grows a segment at a time when the blocks in use outgrow it,
    and gives memory back only slowly (a freed block is cached for reuse, and a segment can be returned only
    once every block in it is free): so the pool ratchets up with the peaks — the seed's staircase climb — and
    the cached free blocks count as allocated capacity holding no token."""

    kind = "paged"

    def __init__(
        self,
        capacity_blocks: int,
        block_tokens: int,
        slots: int,
        segment_blocks: int = 128,
        release_seconds: float = 60.0,
    ) -> None:
        self.capacity_blocks = int(capacity_blocks)
        self.block_tokens = int(block_tokens)
        self.blocks = np.zeros(slots, dtype=np.int64)  # blocks held per slot
        self.used_blocks = 0
        self.pool_blocks = 0  # blocks the pool holds from GPU memory (>= used_blocks)
        # a segment is never larger than the pool itself: a pool smaller than one segment (the lab's 16-block
        # engines) is allocated whole, as vLLM pre-allocates its pool; without this cap, `settle` and
        # `release_cached` rounded a few blocks in use up to a whole 128-block segment, past the card (an OOM)
        self.segment_blocks = max(1, min(int(segment_blocks), self.capacity_blocks))
        self.release_seconds = float(release_seconds)
        self.failures = 0

    def _segments_for(self, blocks: int) -> int:
        """The pool that holds `blocks` in whole segments, never past the capacity."""
        seg = self.segment_blocks
        return min(self.capacity_blocks, -(-blocks // seg) * seg)

    def _grow_pool(self) -> None:
        if self.used_blocks > self.pool_blocks:
            seg = self.segment_blocks
            self.pool_blocks = min(self.capacity_blocks, -(-self.used_blocks // seg) * seg)

    def release_cached(self) -> None:
        """Give every cached free segment back to the GPU at once (what `torch.cuda.empty_cache()` does)."""
        self.pool_blocks = self._segments_for(self.used_blocks)

    def settle(self, dt: float) -> None:
        """Return free segments to the GPU at the pool's slow release rate (never below the blocks in use)."""
        if self.pool_blocks > self.used_blocks:
            shrink = self.pool_blocks * dt / self.release_seconds
            floor = self._segments_for(self.used_blocks)
            self.pool_blocks = max(floor, int(self.pool_blocks - shrink))

    @property
    def free_blocks(self) -> int:
        return self.capacity_blocks - self.used_blocks

    def blocks_for(self, tokens: np.ndarray | int) -> np.ndarray | int:
        return -(-np.asarray(tokens) // self.block_tokens)

    def footprint_if_admitted(self, prompt_tokens: int, max_tokens: int) -> int:
        """`footprint_tokens()` once a prompt of this length is admitted (the pool grows a segment at a time)."""
        used = self.used_blocks + int(self.blocks_for(prompt_tokens))
        seg = self.segment_blocks
        pool = max(self.pool_blocks, min(self.capacity_blocks, -(-used // seg) * seg))
        return pool * self.block_tokens

    def try_admit(self, slot: int, prompt_tokens: int, max_tokens: int) -> bool:
        """Allocate the prompt's blocks; False (and a failure counted) when they are not free."""
        need = int(self.blocks_for(prompt_tokens))
        if self.used_blocks + need > self.capacity_blocks:
            self.failures += 1
            return False
        self.blocks[slot] = need
        self.used_blocks += need
        self._grow_pool()
        return True

    def admit_many(self, slots: np.ndarray, prompt_tokens: np.ndarray) -> None:
        """`try_admit` for requests already known to fit, in order: the pool grows as it would one by one (the
        blocks in use only climb, so it ends where the last admission leaves it)."""
        need = self.blocks_for(prompt_tokens)
        self.blocks[slots] = need
        self.used_blocks += int(np.add.reduce(need))
        self._grow_pool()

    def grow(self, slots: np.ndarray, tokens_now: np.ndarray) -> np.ndarray:
        """Give decoding slots the blocks their token counts need; returns per-slot blocks still missing."""
        need = self.blocks_for(tokens_now) - self.blocks[slots]
        need = np.maximum(need, 0)
        total = int(np.add.reduce(need))
        if total == 0:  # no slot needs a block: nothing changes (`need` is all zeros)
            return need
        if total <= self.free_blocks:
            self.blocks[slots] += need
            self.used_blocks += total
            self._grow_pool()
            return np.zeros_like(need)
        return need

    def grant(self, slot: int, n: int) -> None:
        self.blocks[slot] += n
        self.used_blocks += n
        self._grow_pool()

    def release(self, slot: int) -> None:
        self.used_blocks -= int(self.blocks[slot])
        self.blocks[slot] = 0

    def release_many(self, slots: np.ndarray) -> None:
        self.used_blocks -= int(np.add.reduce(self.blocks[slots]))
        self.blocks[slots] = 0

    def allocated_tokens(self) -> int:
        return self.used_blocks * self.block_tokens

    def slot_tokens(self) -> np.ndarray:
        """KV tokens held per slot (whole blocks)."""
        return self.blocks * self.block_tokens

    def tokens_if_admitted(self, prompt_tokens: int, max_tokens: int) -> int:
        """KV tokens a prompt of this length takes when admitted (its blocks)."""
        return int(self.blocks_for(prompt_tokens)) * self.block_tokens

    def footprint_tokens(self) -> int:
        """KV capacity that occupies GPU memory: the pool, cached free blocks included."""
        return self.pool_blocks * self.block_tokens


class ContiguousKV:
    kind = "contiguous"

    def __init__(self, capacity_tokens: int, slots: int, granule_tokens: int = 256) -> None:
        self.capacity_tokens = int(capacity_tokens)
        self.granule = int(granule_tokens)
        self.start = np.full(slots, -1, dtype=np.int64)
        self.length = np.zeros(slots, dtype=np.int64)
        self.failures = 0
        self._regions: list[tuple[int, int, int]] = []  # (start, end, slot), sorted by start

    @property
    def used_tokens(self) -> int:
        return int(self.length.sum())

    @property
    def high_water(self) -> int:
        return self._regions[-1][1] if self._regions else 0

    def _first_fit(self, need: int) -> tuple[int | None, int]:
        """(position, index among the regions) of the first hole that holds `need` tokens; position None if none."""
        prev_end = 0
        for idx, (s, e, _) in enumerate(self._regions):
            if s - prev_end >= need:
                return prev_end, idx
            prev_end = e
        return (prev_end if self.capacity_tokens - prev_end >= need else None), len(self._regions)

    def _need(self, prompt_tokens: int, max_tokens: int) -> int:
        return -(-(prompt_tokens + max_tokens) // self.granule) * self.granule

    def footprint_if_admitted(self, prompt_tokens: int, max_tokens: int) -> int:
        need = self._need(prompt_tokens, max_tokens)
        pos, _ = self._first_fit(need)
        return self.high_water if pos is None else max(self.high_water, pos + need)

    def try_admit(self, slot: int, prompt_tokens: int, max_tokens: int) -> bool:
        need = self._need(prompt_tokens, max_tokens)
        pos, idx = self._first_fit(need)
        if pos is None:
            self.failures += 1
            return False
        self._regions.insert(idx, (pos, pos + need, slot))
        self.start[slot] = pos
        self.length[slot] = need
        return True

    def settle(self, dt: float) -> None:
        """The arena is pre-allocated per request; nothing to give back between requests."""

    def release_cached(self) -> None:
        """Nothing cached: holes below the high-water mark belong to live neighbours' layout."""

    def grow(self, slots: np.ndarray, tokens_now: np.ndarray) -> np.ndarray:
        # Reserved up front: decoding never needs more (the reservation covers max_tokens).
        return np.zeros(len(slots), dtype=np.int64)

    def release(self, slot: int) -> None:
        if self.start[slot] < 0:
            return
        s = int(self.start[slot])
        self._regions = [r for r in self._regions if r[0] != s]
        self.start[slot] = -1
        self.length[slot] = 0

    def release_many(self, slots: np.ndarray) -> None:
        gone = {int(self.start[s]) for s in slots if self.start[s] >= 0}
        self._regions = [r for r in self._regions if r[0] not in gone]
        self.start[slots] = -1
        self.length[slots] = 0

    def allocated_tokens(self) -> int:
        return self.used_tokens

    def slot_tokens(self) -> np.ndarray:
        """KV tokens reserved per slot."""
        return self.length

    def tokens_if_admitted(self, prompt_tokens: int, max_tokens: int) -> int:
        """KV tokens a request takes when admitted (its whole reservation)."""
        return self._need(prompt_tokens, max_tokens)

    def footprint_tokens(self) -> int:
        """The arena is touched up to its high-water mark: holes below it occupy memory too."""
        return self.high_water
