"""The paged KV pool: fixed-size blocks, reference counts and a prefix cache by block hash.

Modelled on vLLM v1's BlockPool: freed blocks keep their hash and stay reusable until they
are evicted, least recently freed first; a request frees its blocks tail first, so a
prompt's later blocks are evicted before the shared prefix they extend.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence


def prompt_block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of the prompt's full blocks: equal prefixes give equal hash chains."""
    hashes: list[int] = []
    parent = 0
    for start in range(0, len(token_ids) - block_size + 1, block_size):
        parent = hash((parent, tuple(token_ids[start : start + block_size])))
        hashes.append(parent)
    return hashes


class BlockPool:
    """vLLM's free queue, kept without an entry per uncached block.

    vLLM's queue starts as every block in id order; allocation takes from its head, a freed
    block goes to its tail. Only a block holding a cached hash is told apart by what it
    holds; any other free block is as good as any other. So the queue is kept as the count
    of never-used blocks at its head, then `_queue`: cached blocks by id (key >= 0) and runs
    of uncached blocks (key < 0, value: how many), in vLLM's order. Which uncached block an
    allocation hands out is a free id from `_spare` (used before), else the next never-used
    one: cached blocks are evicted exactly when vLLM evicts them, and memory stays what the
    blocks in use and the prefix cache need, however many requests came and went.
    """

    def __init__(self, num_blocks: int, enable_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError("the KV pool needs at least one block")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}
        self._head = num_blocks  # uncached blocks at the head of the queue
        self._queue: OrderedDict[int, int] = OrderedDict()
        self._next_run = -1  # key of the next run of uncached blocks in _queue
        self._spare: list[int] = []  # free uncached blocks used before
        self._fresh = 0  # blocks [_fresh, num_blocks) were never used
        self._free = num_blocks

    @property
    def num_free(self) -> int:
        return self._free

    @property
    def usage(self) -> float:
        """Share of blocks in use, as vLLM's kv_cache_usage_perc (cached-but-free is free)."""
        return 1.0 - self.num_free / self.num_blocks

    def find_cached(self, hashes: Sequence[int]) -> list[int]:
        """Blocks holding the longest cached prefix of `hashes` (not yet referenced)."""
        if not self.enable_caching:
            return []
        found: list[int] = []
        for h in hashes:
            block = self._cached.get(h)
            if block is None:
                break
            found.append(block)
        return found

    def can_allocate(self, new_blocks: int, hits: Sequence[int] = ()) -> bool:
        # Hit blocks sitting in the free queue stop being evictable once we take them.
        reclaimed = sum(1 for b in hits if self._ref[b] == 0)
        return new_blocks <= self.num_free - reclaimed

    def take(self, hits: Sequence[int]) -> None:
        """Reference cached blocks found by find_cached."""
        for block in hits:
            if self._ref[block] == 0:
                del self._queue[block]
                self._free -= 1
            self._ref[block] += 1

    def allocate(self, n: int) -> list[int]:
        if n > self.num_free:
            raise RuntimeError(f"KV pool exhausted: asked {n}, {self.num_free} free")
        blocks = [self._evict() for _ in range(n)]
        for block in blocks:
            self._ref[block] = 1
        self._free -= n
        return blocks

    def _evict(self) -> int:
        """The block at the head of the queue, taken off it (its cached hash forgotten)."""
        if self._head:
            self._head -= 1
            return self._uncached()
        key = next(iter(self._queue))
        if key < 0:  # a run of uncached blocks
            left = self._queue[key] - 1
            if left:
                self._queue[key] = left
            else:
                del self._queue[key]
            return self._uncached()
        del self._queue[key]
        old = self._hash[key]
        if old is not None and self._cached.get(old) == key:
            del self._cached[old]
        self._hash[key] = None
        return key

    def _uncached(self) -> int:
        if self._spare:
            return self._spare.pop()
        self._fresh += 1
        return self._fresh - 1

    def free(self, blocks: Sequence[int]) -> None:
        for block in reversed(blocks):
            self._ref[block] -= 1
            if self._ref[block] != 0:
                continue
            self._free += 1
            if self._hash[block] is not None:
                self._queue[block] = 0
                continue
            self._spare.append(block)
            if not self._queue:  # every free block is uncached: one run, at the head
                self._head += 1
                continue
            tail = next(reversed(self._queue))
            if tail < 0:
                self._queue[tail] += 1
            else:
                self._queue[self._next_run] = 1
                self._next_run -= 1

    def cache(self, block: int, block_hash: int) -> None:
        """Mark a computed full block as reusable by later requests with the same prefix."""
        if self.enable_caching and block_hash not in self._cached:
            self._cached[block_hash] = block
            self._hash[block] = block_hash
