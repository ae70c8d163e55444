"""Where prefix hints live in Redis: the contract between workers (writers) and gateways (readers).

One key per (model, worker, block hash), value "1", with a TTL the worker
keeps refreshing while it holds the block. An evicted block's key is
deleted; a dead worker's keys expire. A gateway asks, in one MGET, which of
a prompt's leading block hashes each candidate worker holds. Memory in Redis
is bounded by the workers' KV pools (one key per cached block).
"""

import functools
from urllib.parse import urlparse

KEY_PREFIX = "tandem:kv"
DEFAULT_HINT_TTL_S = 30.0


def hint_key(model_id: str, worker_id: str, block_hash: bytes) -> str:
    return f"{KEY_PREFIX}:{model_id}:{worker_id}:{block_hash.hex()}"


@functools.lru_cache(maxsize=65536)  # per candidate per lookup: parsing the URL each time was 3 ms at 256 workers
def worker_id_for(endpoint: str) -> str:
    """A worker's id is the host:port the gateway dials (grpc://host:port or host:port)."""
    parsed = urlparse(endpoint if "://" in endpoint else f"grpc://{endpoint}")
    return f"{parsed.hostname}:{parsed.port}"
