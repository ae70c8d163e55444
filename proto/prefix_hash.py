"""The prefix-hash chain shared by the gateway and every worker (DESIGN.md §3).

A prompt's full blocks are hashed as a chain, h_i = H(h_{i-1} || ids of block i),
with h_0 derived from (model id, tenant salt), so two tenants never share or
probe each other's cache. The gateway computes the salt (`tenant_salt`, an HMAC
under its secret) and sends it with each request. H is SHA-256 truncated to 16 bytes. Token ids are
encoded as little-endian uint32 so the bytes do not depend on the platform.
"""

import hashlib
import hmac
import struct
from collections.abc import Sequence

HASH_BYTES = 16
DEFAULT_BLOCK_SIZE_TOKENS = 16


def tenant_salt(secret: bytes, tenant: str) -> str:
    """A tenant's salt: HMAC-SHA256 of its name under a server secret, so knowing the name opens nothing."""
    return hmac.new(secret, tenant.encode(), hashlib.sha256).hexdigest()[:32]


def root_hash(model_id: str, tenant_salt: str) -> bytes:
    seed = b"tandem-prefix-v1\x00" + model_id.encode() + b"\x00" + tenant_salt.encode()
    return hashlib.sha256(seed).digest()[:HASH_BYTES]


def block_hash(parent: bytes, block_token_ids: Sequence[int]) -> bytes:
    assert len(parent) == HASH_BYTES
    payload = struct.pack(f"<{len(block_token_ids)}I", *block_token_ids)
    return hashlib.sha256(parent + payload).digest()[:HASH_BYTES]


def prefix_hashes(
    token_ids: Sequence[int],
    model_id: str,
    tenant_salt: str,
    block_size_tokens: int = DEFAULT_BLOCK_SIZE_TOKENS,
) -> list[bytes]:
    """Hashes of every full block of `token_ids`; a partial last block has none."""
    assert block_size_tokens > 0
    blocks = len(token_ids) // block_size_tokens
    # One pack for the whole prompt, then a slice per block: a pack per block (its format parsed each time) was
    # half the cost (a 750-token prompt: ~100 -> ~50 µs).
    data = struct.pack(f"<{blocks * block_size_tokens}I", *token_ids[: blocks * block_size_tokens])
    step = 4 * block_size_tokens
    sha256 = hashlib.sha256
    parent = root_hash(model_id, tenant_salt)
    hashes = []
    for offset in range(0, len(data), step):
        parent = sha256(parent + data[offset : offset + step]).digest()[:HASH_BYTES]
        hashes.append(parent)
    return hashes
