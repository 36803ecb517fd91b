"""The block pool and the paged attention, against plain implementations."""

import pytest
import torch
import torch.nn.functional as F

from moeperf.targets.serving.engine.block_pool import BlockPool, NoFreeBlocksError, chain_hashes
from moeperf.targets.serving.engine.kv_cache import KVCache
from moeperf.targets.serving.engine.paged_attention import PagedAttention, Segment


def test_freed_blocks_are_reused_least_recently_freed_first():
    pool = BlockPool(4, enable_prefix_caching=True)
    a, b, c, _ = pool.allocate_many(4)
    with pytest.raises(NoFreeBlocksError):
        pool.allocate()
    pool.free([a, b])  # freed tail first: b, then a
    pool.free([c])
    assert [pool.allocate().block_id for _ in range(3)] == [b.block_id, a.block_id, c.block_id]
    assert pool.num_used == 4


def test_prefix_lookup_takes_cached_blocks_until_the_first_miss():
    pool = BlockPool(8, enable_prefix_caching=True)
    tokens = list(range(12))
    hashes = chain_hashes(tokens, 4, 3)
    blocks = pool.allocate_many(3)
    for block, h in zip(blocks, hashes, strict=True):
        pool.register(block, h)
    pool.free(blocks)
    assert pool.num_used == 0  # free, yet still cached
    other = chain_hashes([*range(8), 99, 99, 99, 99], 4, 3)
    hit = pool.lookup(other)
    assert [b.block_id for b in hit] == [blocks[0].block_id, blocks[1].block_id]
    assert all(b.ref_count == 1 for b in hit) and pool.num_used == 2
    # Same tokens at another position: a different hash, no hit.
    assert pool.lookup(chain_hashes([*range(4, 8), *range(4)], 4, 2)) == []


def test_eviction_forgets_a_cached_block():
    pool = BlockPool(1, enable_prefix_caching=True)
    block = pool.allocate()
    pool.register(block, chain_hashes([1, 2], 2, 1)[0])
    pool.free([block])
    pool.allocate()  # reuses, so evicts, the only block
    assert pool.lookup(chain_hashes([1, 2], 2, 1)) == []


def test_reset_forgets_every_cached_block_and_keeps_blocks_in_use():
    pool = BlockPool(4, enable_prefix_caching=True)
    hashes = chain_hashes(list(range(8)), 4, 2)
    held, freed = pool.allocate_many(2)
    pool.register(held, hashes[0])
    pool.register(freed, hashes[1])
    pool.free([freed])  # free, yet still cached
    assert pool.reset_prefix_cache() == 2
    assert pool.lookup(hashes) == []
    assert held.ref_count == 1 and pool.num_used == 1  # still its sequence's
    assert pool.reset_prefix_cache() == 0
    # Every block can be cached again, the one in use included, and allocate still
    # takes the free ones, least recently freed first.
    pool.register(held, hashes[0])
    assert pool.lookup(hashes) == [held] and held.ref_count == 2
    pool.free([held, held])
    taken = pool.allocate_many(4)
    assert taken[0] is not held and held in taken
    assert pool.lookup(hashes) == []  # reusing the block evicted it
    with pytest.raises(NoFreeBlocksError):
        pool.allocate()


def test_prefix_caching_off_never_hits():
    pool = BlockPool(2, enable_prefix_caching=False)
    block = pool.allocate()
    pool.register(block, 123)
    pool.free([block])
    assert pool.lookup([123]) == []


@pytest.mark.parametrize("num_queries", [1, 3, 20])  # batched short segments and a long one
def test_paged_attention_equals_dense_causal_attention(num_queries):
    torch.manual_seed(0)
    heads, kv_heads, dim, block_size = 4, 2, 8, 4
    cache = KVCache(
        num_attention_slots=1, num_blocks=32, block_size=block_size, num_kv_heads=kv_heads,
        head_dim=dim, hidden_size=8, keep_hidden=False, dtype=torch.float32,
    )  # fmt: skip
    lengths = [9, 23, 5]  # three sequences, blocks scattered over the cache
    tables = [[7, 2, 30], [1, 5, 9, 11, 4, 3], [20, 21]]
    q_all, k_all, v_all, segments, write, row = [], [], [], [], [], 0
    dense = []
    for length, table in zip(lengths, tables, strict=True):
        q = torch.randn(length, heads, dim)
        k, v = torch.randn(length, kv_heads, dim), torch.randn(length, kv_heads, dim)
        dense.append(F.scaled_dot_product_attention(
            q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), is_causal=True,
            enable_gqa=True,
        ).transpose(0, 1))  # fmt: skip
        # Earlier positions are already in the cache; the last num_queries are this step's.
        n = min(num_queries, length)
        slots = cache.slots(table, 0, length)
        cache.k[0][slots[: length - n]] = k[: length - n]
        cache.v[0][slots[: length - n]] = v[: length - n]
        segments.append(Segment(row, n, length - n, slots))
        write.append(slots[length - n :])
        q_all.append(q[length - n :])
        k_all.append(k[length - n :])
        v_all.append(v[length - n :])
        row += n
    attend = PagedAttention(cache, torch.cat(write), segments)
    out = attend(0, torch.cat(q_all), torch.cat(k_all), torch.cat(v_all))
    expected = torch.cat([d[len(d) - min(num_queries, len(d)) :] for d in dense])
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
