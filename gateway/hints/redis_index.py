"""Prefix hints as the workers publish them (proto/prefix_hints.py): one MGET per lookup."""

from proto.prefix_hints import hint_key


class RedisHintIndex:
    def __init__(self, client, model_id: str) -> None:
        self._client, self._model_id = client, model_id

    async def match(self, hashes: list[bytes], worker_ids: list[str]) -> dict[str, int]:
        """Per worker, how many leading hashes it holds, in one round trip."""
        if not hashes or not worker_ids:
            return dict.fromkeys(worker_ids, 0)
        keys = [hint_key(self._model_id, w, h) for w in worker_ids for h in hashes]
        values = await self._client.mget(keys)
        matched = {}
        for i, worker in enumerate(worker_ids):
            row = values[i * len(hashes) : (i + 1) * len(hashes)]
            matched[worker] = next((n for n, v in enumerate(row) if v is None), len(hashes))
        return matched

    async def announce(self, worker_id: str, hashes: list[bytes], ttl_ms: int) -> None:
        """Pending hints: set only where the worker has not (NX), expiring soon unless the worker confirms."""
        pipe = self._client.pipeline(transaction=False)
        for h in hashes:
            pipe.set(hint_key(self._model_id, worker_id, h), b"p", px=ttl_ms, nx=True)
        await pipe.execute()
