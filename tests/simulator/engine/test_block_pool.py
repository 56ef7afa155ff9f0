import pytest

from simulator.engine.block_pool import BlockPool, prompt_block_hashes


def test_equal_prefixes_share_hashes_until_they_differ():
    a = prompt_block_hashes(list(range(64)), 16)
    b = prompt_block_hashes(list(range(48)) + [9] * 16, 16)
    assert a[:3] == b[:3] and a[3] != b[3]
    assert len(prompt_block_hashes(list(range(20)), 16)) == 1  # partial blocks not hashed


def test_freed_cached_blocks_are_reused_until_evicted():
    pool = BlockPool(4)
    blocks = pool.allocate(2)
    pool.cache(blocks[0], 111)
    pool.free(blocks)
    assert pool.num_free == 4 and pool.find_cached([111]) == [blocks[0]]
    pool.allocate(4)  # evicts everything
    assert pool.find_cached([111]) == []


def test_taking_a_free_cached_block_counts_against_capacity():
    pool = BlockPool(2)
    b = pool.allocate(1)
    pool.cache(b[0], 5)
    pool.free(b)
    hits = pool.find_cached([5])
    assert pool.can_allocate(1, hits) and not pool.can_allocate(2, hits)
    pool.take(hits)
    assert pool.num_free == 1 and pool.usage == 0.5


def test_exhausted_pool_raises_and_caching_off_finds_nothing():
    pool = BlockPool(1, enable_caching=False)
    b = pool.allocate(1)
    pool.cache(b[0], 1)
    assert pool.find_cached([1]) == []
    with pytest.raises(RuntimeError, match="exhausted"):
        pool.allocate(1)
    with pytest.raises(ValueError):
        BlockPool(0)
