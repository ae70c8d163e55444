"""Prefix hints as the workers publish them (proto/prefix_hints.py): one script call per lookup."""

from proto.prefix_hints import HOLD_SCRIPT, MATCH_SCRIPT, block_key


class RedisHintIndex:
    def __init__(self, client, model_id: str) -> None:
        self._model_id = model_id
        self._match = client.register_script(MATCH_SCRIPT)
        self._hold = client.register_script(HOLD_SCRIPT)

    async def match(self, hashes: list[bytes], worker_ids: list[str]) -> dict[str, int]:
        """Per candidate holding the first hash, how many leading hashes it holds; one left out holds none.

        One round trip over the prompt's block keys: Redis follows the candidates holding the first block, block by
        block, and stops at the first block none of them holds, so the work is bounded by the candidates and the
        prompt, not by who else holds it (reading every worker's first block took ~1 ms at 256 workers,
        docs/benchmarks.md)."""
        if not hashes or not worker_ids:
            return {}
        reply = await self._match(keys=[block_key(self._model_id, h) for h in hashes], args=worker_ids)
        return {  # only candidates: the script's ARGV
            (worker.decode() if isinstance(worker, bytes) else worker): int(held)
            for worker, held in zip(reply[::2], reply[1::2], strict=True)
        }

    async def announce(self, worker_id: str, hashes: list[bytes], ttl_ms: int) -> None:
        """Pending hints: added only where the worker is not a member yet (NX), expiring soon unless it confirms."""
        await self._hold(keys=[block_key(self._model_id, h) for h in hashes], args=[worker_id, ttl_ms, "nx"])
