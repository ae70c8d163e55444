"""The prefix hash is a wire contract: gateways and workers of different
versions must agree, so its output is pinned by golden vectors."""

import pytest

from proto.prefix_hash import HASH_BYTES, block_hash, prefix_hashes, root_hash

GOLDEN_ROOT = "d97ccb2970269d534277d31e6be3ee9d"
GOLDEN_CHAIN = ["4f18822be54ba582057d885d722142b9", "e28cef43876f28eab8069c5dd2aa5317"]


def test_golden_vectors():
    assert root_hash("tandem-demo", "tenant-a").hex() == GOLDEN_ROOT
    assert [h.hex() for h in prefix_hashes(list(range(40)), "tandem-demo", "tenant-a", 16)] == GOLDEN_CHAIN


def test_is_a_chain_over_full_blocks_only():
    ids = list(range(100, 150))
    hashes = prefix_hashes(ids, "m", "t", 16)
    assert len(hashes) == 3  # 50 tokens: 3 full blocks, the partial one is not hashed
    assert hashes[1] == block_hash(hashes[0], ids[16:32])
    assert all(len(h) == HASH_BYTES for h in hashes)


def test_shared_prefix_shares_hashes_until_it_diverges():
    a = prefix_hashes(list(range(48)), "m", "t", 16)
    b = prefix_hashes(list(range(32)) + [999] * 16, "m", "t", 16)
    assert a[:2] == b[:2] and a[2] != b[2]


@pytest.mark.parametrize("other", [("m", "other-tenant"), ("other-model", "t")])
def test_tenant_and_model_salt_the_whole_chain(other):
    ids = list(range(32))
    assert set(prefix_hashes(ids, "m", "t")).isdisjoint(prefix_hashes(ids, *other))
