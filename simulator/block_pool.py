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
    def __init__(self, num_blocks: int, enable_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError("the KV pool needs at least one block")
        self.num_blocks = num_blocks
        self.enable_caching = enable_caching
        self._ref = [0] * num_blocks
        self._hash: list[int | None] = [None] * num_blocks
        self._cached: dict[int, int] = {}
        # Blocks never used yet are [_fresh, num_blocks): they come first, as at the head of
        # vLLM's initial free queue, without a queue entry each (pools have ~10^6 blocks).
        self._fresh = 0
        # Blocks used before and referenced by nobody, in eviction order (front goes first).
        self._free: OrderedDict[int, None] = OrderedDict()

    @property
    def num_free(self) -> int:
        return self.num_blocks - self._fresh + len(self._free)

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
                del self._free[block]
            self._ref[block] += 1

    def allocate(self, n: int) -> list[int]:
        if n > self.num_free:
            raise RuntimeError(f"KV pool exhausted: asked {n}, {self.num_free} free")
        fresh = min(n, self.num_blocks - self._fresh)
        blocks = list(range(self._fresh, self._fresh + fresh))
        self._fresh += fresh
        for block in blocks:
            self._ref[block] = 1
        for _ in range(n - fresh):
            block, _ = self._free.popitem(last=False)
            old = self._hash[block]
            if old is not None:
                if self._cached.get(old) == block:
                    del self._cached[old]
                self._hash[block] = None
            self._ref[block] = 1
            blocks.append(block)
        return blocks

    def free(self, blocks: Sequence[int]) -> None:
        for block in reversed(blocks):
            self._ref[block] -= 1
            if self._ref[block] == 0:
                self._free[block] = None

    def cache(self, block: int, block_hash: int) -> None:
        """Mark a computed full block as reusable by later requests with the same prefix."""
        if self.enable_caching and block_hash not in self._cached:
            self._cached[block_hash] = block
            self._hash[block] = block_hash
