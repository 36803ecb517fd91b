"""Fixed-size KV blocks: allocation, reference counts, and the prefix cache.

A block holds the keys and values of ``block_size`` consecutive positions of one sequence.
When a block is full of computed, committed tokens it is hashed by its content and its
position in the sequence (the hash chains in its predecessor's hash, as vLLM's prefix
caching does), so a later request with the same prefix reuses it instead of recomputing.
A block nobody uses goes to the free list but keeps its cached content until the
allocator needs it: least recently freed is evicted first. ``reset_prefix_cache`` forgets
every cached hash at once (vLLM's ``POST /reset_prefix_cache``).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

BlockHash = int


def block_hash(parent: BlockHash, block_tokens: Sequence[int]) -> BlockHash:
    """A full block's identity: its tokens and, through the parent's hash, all before them."""
    return hash((parent, tuple(block_tokens)))


def chain_hashes(token_ids: Sequence[int], block_size: int, num_blocks: int) -> list[BlockHash]:
    """Hashes of the first ``num_blocks`` full blocks of ``token_ids``."""
    hashes, parent = [], 0
    for b in range(num_blocks):
        parent = block_hash(parent, token_ids[b * block_size : (b + 1) * block_size])
        hashes.append(parent)
    return hashes


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: BlockHash | None = None  # set once full and registered in the prefix cache


class NoFreeBlocksError(Exception):
    """Every block is in use; the scheduler preempts a request and tries again."""


class BlockPool:
    def __init__(self, num_blocks: int, enable_prefix_caching: bool):
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.enable_prefix_caching = enable_prefix_caching
        # Unused blocks, least recently freed first; cached content survives until reuse.
        self._free: OrderedDict[int, None] = OrderedDict((i, None) for i in range(num_blocks))
        self._cached: dict[BlockHash, int] = {}  # hash -> block id

    @property
    def num_used(self) -> int:
        return len(self.blocks) - len(self._free)

    def allocate(self) -> Block:
        if not self._free:
            raise NoFreeBlocksError
        block_id, _ = self._free.popitem(last=False)
        block = self.blocks[block_id]
        if block.block_hash is not None:  # evict its cached content
            if self._cached.get(block.block_hash) == block_id:
                del self._cached[block.block_hash]
            block.block_hash = None
        block.ref_count = 1
        return block

    def allocate_many(self, count: int) -> list[Block]:
        if count > len(self._free):
            raise NoFreeBlocksError
        return [self.allocate() for _ in range(count)]

    def free(self, blocks: Sequence[Block]) -> None:
        # Tail blocks first: they are the least likely to be shared by a later prefix, so
        # they should be evicted before the head of the same sequence.
        for block in reversed(blocks):
            block.ref_count -= 1
            if block.ref_count == 0:
                self._free[block.block_id] = None

    def lookup(self, hashes: Sequence[BlockHash]) -> list[Block]:
        """The longest run of cached blocks matching ``hashes`` from the start, taken
        (reference counted) for the caller."""
        if not self.enable_prefix_caching:
            return []
        hit = []
        for h in hashes:
            block_id = self._cached.get(h)
            if block_id is None:
                break
            hit.append(self.blocks[block_id])
        for block in hit:
            if block.ref_count == 0:
                del self._free[block.block_id]
            block.ref_count += 1
        return hit

    def register(self, block: Block, block_hash: BlockHash) -> None:
        """Record a full block's content hash so later prefixes can hit it."""
        if not self.enable_prefix_caching or block.block_hash is not None:
            return
        block.block_hash = block_hash
        # An identical block computed concurrently by another request: keep the first.
        self._cached.setdefault(block_hash, block.block_id)

    def reset_prefix_cache(self) -> int:
        """Forget every cached block, so no later lookup hits; cached entries dropped.

        Blocks in use keep their content and stay with their sequences. Every block's
        hash is cleared, not only the ``_cached`` entries: ``register`` skips a block that
        has a hash, so a stale one would keep that block out of the cache for good, and
        ``allocate`` then has nothing to evict from a free block.
        """
        dropped = len(self._cached)
        self._cached.clear()
        for block in self.blocks:
            block.block_hash = None
        return dropped
