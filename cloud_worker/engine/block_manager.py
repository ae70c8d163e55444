"""Fixed-size KV blocks: free list, reference counts, prefix caching.

A block holds `block_size_tokens` tokens' K/V. A full block whose tokens are
all computed is *cached*: registered under the chained, tenant-salted prefix
hash of everything up to and including it, so a later sequence with the same
prefix (same tenant, same model) reuses it instead of recomputing. When its
last user leaves, a cached block keeps its content and goes to an LRU list;
it is evicted (its hash forgotten) only when a fresh block is needed and no
never-cached free block is left. Every cache change is reported as a
`BlockEvent` for the prefix-hint publisher.
"""

from collections import OrderedDict
from dataclasses import dataclass
from enum import Enum

from cloud_worker.engine.sequence import Sequence


class BlockEventKind(Enum):
    CACHED = "cached"
    EVICTED = "evicted"


@dataclass(frozen=True)
class BlockEvent:
    kind: BlockEventKind
    block_hash: bytes


@dataclass
class Block:
    block_id: int
    ref_count: int = 0
    block_hash: bytes | None = None  # set while the block is in the prefix cache
    token_ids: tuple[int, ...] = ()  # the tokens it caches (kept for invariant checks)


class BlockManager:
    def __init__(self, num_blocks: int, block_size_tokens: int) -> None:
        assert num_blocks > 0 and block_size_tokens > 0
        self.block_size_tokens = block_size_tokens
        self.blocks = [Block(i) for i in range(num_blocks)]
        self._free_uncached: list[int] = list(range(num_blocks - 1, -1, -1))  # pop() takes block 0 first
        self._free_cached: OrderedDict[int, None] = OrderedDict()  # LRU first
        self.hash_to_block: dict[bytes, int] = {}
        self.events: list[BlockEvent] = []
        self.num_hit_tokens = 0
        self.num_query_tokens = 0

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)

    @property
    def num_free_blocks(self) -> int:
        return len(self._free_uncached) + len(self._free_cached)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def drain_events(self) -> list[BlockEvent]:
        events, self.events = self.events, []
        return events

    # -- admission ------------------------------------------------------------------------------

    def match_prefix(self, seq: Sequence) -> list[int]:
        """Cached blocks holding seq's leading full blocks.

        The block holding the last token is never matched: its logits must be computed.
        """
        hashes = seq.block_hashes()[: (seq.num_tokens - 1) // self.block_size_tokens]
        matched = []
        for h in hashes:
            block_id = self.hash_to_block.get(h)
            if block_id is None:
                break
            matched.append(block_id)
        return matched

    def can_allocate(self, seq: Sequence, cached: list[int], num_new_tokens: int, headroom_blocks: int = 0) -> bool:
        reused_free = sum(1 for b in cached if self.blocks[b].ref_count == 0)
        needed = self._num_blocks_needed(len(cached), len(cached) * self.block_size_tokens + num_new_tokens)
        return needed + headroom_blocks <= self.num_free_blocks - reused_free

    def allocate(self, seq: Sequence, cached: list[int]) -> None:
        """Give a waiting sequence its cached prefix blocks; `append_slots` adds the rest."""
        assert not seq.block_table and seq.num_computed_tokens == 0
        for block_id in cached:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self._free_cached[block_id]
            block.ref_count += 1
        seq.block_table = list(cached)
        seq.num_committed_blocks = len(cached)
        seq.num_computed_tokens = len(cached) * self.block_size_tokens
        if seq.num_preemptions == 0:  # usage reports what the cache served the prompt, not recomputation
            seq.num_cached_tokens = seq.num_computed_tokens
            self.num_hit_tokens += seq.num_cached_tokens
            self.num_query_tokens += seq.num_tokens

    # -- growth ---------------------------------------------------------------------------------

    def can_append_slots(self, seq: Sequence, num_new_tokens: int) -> bool:
        needed = self._num_blocks_needed(len(seq.block_table), seq.num_computed_tokens + num_new_tokens)
        return needed <= self.num_free_blocks

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> None:
        """Make room in seq's block table for its next num_new_tokens tokens."""
        needed = self._num_blocks_needed(len(seq.block_table), seq.num_computed_tokens + num_new_tokens)
        assert needed <= self.num_free_blocks, "call can_append_slots first"
        for _ in range(needed):
            seq.block_table.append(self._take_free_block())

    def commit_computed(self, seq: Sequence) -> None:
        """Cache every full block whose tokens are now all computed."""
        num_full = seq.num_computed_tokens // self.block_size_tokens
        if num_full <= seq.num_committed_blocks:
            return
        hashes = seq.block_hashes()
        for index in range(seq.num_committed_blocks, num_full):
            block = self.blocks[seq.block_table[index]]
            h = hashes[index]
            if block.block_hash is not None or h in self.hash_to_block:
                continue  # already cached (this block, or the same prefix in another block)
            block.block_hash, block.token_ids = h, seq.block_tokens(index)
            self.hash_to_block[h] = block.block_id
            self.events.append(BlockEvent(BlockEventKind.CACHED, h))
        seq.num_committed_blocks = num_full

    # -- release --------------------------------------------------------------------------------

    def deallocate(self, seq: Sequence) -> None:
        """Release seq's blocks at once (finish, cancel or preemption); cached ones stay reusable."""
        # Tail first, so a prefix's head blocks (shared most) are the last to be evicted.
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            assert block.ref_count > 0, f"double free of block {block_id}"
            block.ref_count -= 1
            if block.ref_count == 0:
                if block.block_hash is None:
                    self._free_uncached.append(block_id)
                else:
                    self._free_cached[block_id] = None
        seq.block_table = []
        seq.num_computed_tokens = seq.num_committed_blocks = 0

    def _take_free_block(self) -> int:
        if self._free_uncached:
            block_id = self._free_uncached.pop()
        else:
            block_id, _ = self._free_cached.popitem(last=False)
            self._evict(self.blocks[block_id])
        self.blocks[block_id].ref_count = 1
        return block_id

    def _evict(self, block: Block) -> None:
        assert block.block_hash is not None and self.hash_to_block[block.block_hash] == block.block_id
        del self.hash_to_block[block.block_hash]
        self.events.append(BlockEvent(BlockEventKind.EVICTED, block.block_hash))
        block.block_hash, block.token_ids = None, ()

    def _num_blocks_needed(self, num_held: int, num_tokens: int) -> int:
        return max(0, -(-num_tokens // self.block_size_tokens) - num_held)

    # -- checks ---------------------------------------------------------------------------------

    def check_invariants(self, seqs: list[Sequence]) -> None:
        """Raise AssertionError on a leaked, double-freed or mis-cached block (tests call this)."""
        users = [0] * self.num_blocks
        for seq in seqs:
            for block_id in seq.block_table:
                users[block_id] += 1
        free_uncached = set(self._free_uncached)
        free = free_uncached | set(self._free_cached)
        assert len(free) == self.num_free_blocks, "a block is on a free list twice"
        for block in self.blocks:
            assert block.ref_count == users[block.block_id], f"block {block.block_id}: refs != users"
            assert (block.block_id in free) == (block.ref_count == 0), f"block {block.block_id} leaked or freed in use"
            if block.block_id in free_uncached:
                assert block.block_hash is None
        for h, block_id in self.hash_to_block.items():
            assert self.blocks[block_id].block_hash == h
        for seq in seqs:
            hashes = seq.block_hashes()
            for index, block_id in enumerate(seq.block_table):
                block = self.blocks[block_id]
                if block.block_hash is not None:
                    assert block.block_hash == hashes[index] and block.token_ids == seq.block_tokens(index)
