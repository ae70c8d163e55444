"""Block manager: table-driven cases for prefix caching, and a seeded random walk checking invariants."""

import random

import pytest

from cloud_worker.engine.block_manager import BlockEventKind, BlockManager
from cloud_worker.engine.sequence import Sequence
from proto.prefix_hash import prefix_hashes
from serving.engine_api import GenerationRequest

B = 4


def make_seq(tokens, tenant="t") -> Sequence:
    return Sequence(GenerationRequest("r", tuple(tokens), tenant=tenant), "m", B, seed=0)


def run_prefill(bm: BlockManager, seq: Sequence) -> None:
    """Admit seq with whatever the cache holds, compute the rest of its tokens, cache its full blocks."""
    cached = bm.match_prefix(seq)
    bm.allocate(seq, cached)
    bm.append_slots(seq, seq.num_uncomputed_tokens)
    seq.num_computed_tokens = seq.num_tokens
    bm.commit_computed(seq)


@pytest.mark.parametrize(
    ("first", "second", "tenant2", "cached_tokens"),
    [
        (range(10), range(10), "t", 8),  # two full blocks shared, the partial third is not
        (range(8), range(8), "t", 4),  # block boundary: the last block holds the last token, so it is recomputed
        (range(12), list(range(8)) + [99, 98, 97], "t", 8),  # diverges in block 3
        (range(12), [5] + list(range(1, 12)), "t", 0),  # diverges in block 1: the chain breaks at once
        (range(10), range(10), "other-tenant", 0),  # tenants never share blocks
        (range(3), range(3), "t", 0),  # no full block
    ],
)
def test_prefix_cache_hits(first, second, tenant2, cached_tokens):
    bm = BlockManager(16, B)
    a = make_seq(first)
    run_prefill(bm, a)
    b = make_seq(second, tenant=tenant2)
    run_prefill(bm, b)
    assert b.num_cached_tokens == cached_tokens
    assert b.block_table[: cached_tokens // B] == a.block_table[: cached_tokens // B]
    bm.check_invariants([a, b])


def test_cache_events_carry_the_shared_prefix_hash():
    bm = BlockManager(4, B)
    seq = make_seq(range(9))
    run_prefill(bm, seq)
    cached = [e.block_hash for e in bm.drain_events()]
    assert cached == prefix_hashes(list(range(9)), "m", "t", B)  # the gateway computes the same hashes


def test_freed_cached_blocks_are_reused_and_evicted_least_recently_used_first():
    bm = BlockManager(4, B)
    old, new = make_seq(range(100, 108)), make_seq(range(200, 208))
    for seq in (old, new):
        run_prefill(bm, seq)
        bm.deallocate(seq)
    bm.drain_events()
    assert bm.num_free_blocks == 4 and len(bm.hash_to_block) == 4
    # A fresh sequence needing 2 blocks takes the least recently freed: old's.
    fresh = make_seq(range(300, 307))
    run_prefill(bm, fresh)
    evicted = {e.block_hash for e in bm.drain_events() if e.kind is BlockEventKind.EVICTED}
    assert evicted == set(prefix_hashes(list(range(100, 108)), "m", "t", B))
    bm.deallocate(fresh)
    again = make_seq(range(200, 209))
    run_prefill(bm, again)
    assert again.num_cached_tokens == 8  # new's blocks survived
    bm.check_invariants([again])


def test_deallocate_frees_at_once_and_double_free_is_caught():
    bm = BlockManager(8, B)
    seq = make_seq(range(6))
    run_prefill(bm, seq)
    table = list(seq.block_table)
    bm.deallocate(seq)
    assert bm.num_free_blocks == 8
    seq.block_table = table
    with pytest.raises(AssertionError, match="double free"):
        bm.deallocate(seq)


def test_random_operations_keep_the_invariants():
    """At least 100,000 allocate / append / free / cancel / evict operations, invariants checked after each."""
    rng = random.Random(1234)
    bm = BlockManager(24, B)
    prefixes = [[rng.randrange(50) for _ in range(rng.randrange(4, 14))] for _ in range(4)]
    live: list[Sequence] = []
    counts = dict.fromkeys(("allocate", "append", "free", "cancel", "evict"), 0)
    while sum(counts.values()) < 100_000:
        op = rng.choice(("allocate", "allocate", "append", "append", "append", "free", "cancel"))
        if op == "allocate" or not live:
            tenant = rng.choice(("a", "b"))
            tokens = rng.choice(prefixes)[: rng.randrange(1, 14)] + [rng.randrange(50) for _ in range(rng.randrange(3))]
            seq = make_seq(tokens or [1], tenant)
            cached = bm.match_prefix(seq)
            num_new = rng.randrange(1, seq.num_tokens - len(cached) * B + 1)  # a prefill chunk
            if not bm.can_allocate(seq, cached, num_new):
                continue
            evictions_before = sum(e.kind is BlockEventKind.EVICTED for e in bm.events)
            bm.allocate(seq, cached)
            bm.append_slots(seq, num_new)
            seq.num_computed_tokens += num_new
            bm.commit_computed(seq)
            live.append(seq)
            counts["evict" if sum(e.kind is BlockEventKind.EVICTED for e in bm.events) > evictions_before else op] += 1
        elif op == "append":
            seq = rng.choice(live)
            if seq.num_uncomputed_tokens == 0:
                seq.token_ids.append(rng.randrange(50))  # a sampled token
            num_new = rng.randrange(1, seq.num_uncomputed_tokens + 1)
            if not bm.can_append_slots(seq, num_new):
                continue
            bm.append_slots(seq, num_new)
            seq.num_computed_tokens += num_new
            bm.commit_computed(seq)
            counts[op] += 1
        else:  # free a finished sequence or cancel one mid-flight: both release every block now
            seq = live.pop(rng.randrange(len(live)))
            bm.deallocate(seq)
            counts[op] += 1
        bm.check_invariants(live)
        bm.drain_events()
    assert all(n > 1000 for n in counts.values()), counts
