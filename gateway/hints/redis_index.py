"""Prefix hints as the workers publish them (proto/prefix_hints.py): one script call per lookup, its arguments the
candidates and the prompt's block hashes, not their keys."""

from collections.abc import Sequence

import redis

from proto.prefix_hash import HASH_BYTES
from proto.prefix_hints import HOLD_SCRIPT, MATCH_SCRIPT, block_key, key_prefix, match_args, too_old


class RedisHintIndex:
    def __init__(self, client, model_id: str) -> None:
        self._model_id, self._client = model_id, client
        self._prefix = key_prefix(model_id)
        self._match = client.register_script(MATCH_SCRIPT)
        self._hold = client.register_script(HOLD_SCRIPT)
        self._args: tuple[Sequence[str] | None, list] = (None, [])  # the last candidates and their ARGV

    async def match(self, hashes: list[bytes], worker_ids: Sequence[str]) -> dict[str, int]:
        """Per candidate holding the first hash, how many leading hashes it holds; one left out holds none.

        One round trip over the prompt's blocks: Redis takes the candidates holding the first block and bisects
        the blocks (proto/prefix_hints.py), so the work grows with the log of the prompt's length and with the
        candidates holding it, not with who else holds it or the pool (docs/benchmarks.md)."""
        if not hashes or not worker_ids:
            return {}
        listed, args = self._args
        if worker_ids is not listed:  # a pool's list is kept between its requests (BackendRegistry.pool): reuse
            self._args = worker_ids, (args := match_args(worker_ids))  # its ARGV (~20 µs to join at 256)
        reply = await self._match(keys=(), args=[*args, self._prefix, b"".join(hashes), HASH_BYTES])
        return {  # only candidates: the script's ARGV
            (worker.decode() if isinstance(worker, bytes) else worker): int(held)
            for worker, held in zip(reply[::2], reply[1::2], strict=True)
        }

    async def announce(self, worker_id: str, hashes: list[bytes], ttl_ms: int) -> None:
        """Pending hints: added only where the worker is not a member yet (NX), expiring soon unless it confirms."""
        await self._hold(keys=[block_key(self._model_id, h) for h in hashes], args=[worker_id, ttl_ms, "nx"])

    async def explain(self, exc: Exception) -> str:
        """Why a lookup failed, in words: Redis's own error, or its version where that is the cause."""
        if isinstance(exc, redis.ResponseError):  # Redis answered, and refused: is it one too old for the scripts?
            try:
                reason = too_old(str((await self._client.info("server")).get("redis_version", "")))
            except Exception:  # noqa: BLE001 - the first error is the one to report
                reason = None
            if reason:
                return reason
        return f"Redis failed: {exc}"
