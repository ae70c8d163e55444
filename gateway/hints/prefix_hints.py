"""Which backend holds how much of a prompt's prefix: Redis hints when they work, routing history otherwise.

The mode is visible: `tandem_prefix_hint_mode` says which is active, and
every switch is logged once. A Redis failure never fails a request: the
lookup falls back to the approximate index at once and tries Redis again
after `retry_after_s`. The approximate index is fed on every routed request
in both modes, so it is warm when it is needed.
"""

import logging
import time

from gateway import metrics
from gateway.hints.approximate_index import ApproximateIndex
from gateway.hints.redis_index import RedisHintIndex
from proto.prefix_hash import DEFAULT_BLOCK_SIZE_TOKENS, prefix_hashes
from proto.prefix_hints import worker_id_for

log = logging.getLogger(__name__)
MAX_LOOKUP_BLOCKS = 256  # prompts longer than 4096 tokens (at 16 per block) are matched on their first 4096


class PrefixHints:
    def __init__(self, model_id: str, redis_client=None, retry_after_s: float = 5.0) -> None:
        self.model_id = model_id
        self.approximate = ApproximateIndex()
        self._redis = RedisHintIndex(redis_client, model_id) if redis_client is not None else None
        self._retry_after_s = retry_after_s
        self._redis_down_until = 0.0
        self._set_mode("redis" if self._redis else "approximate", reason="REDIS_URL not set" if not self._redis else "")

    @property
    def mode(self) -> str:
        return self._mode

    def hashes(self, tenant: str, token_ids, block_size_tokens: int) -> list[bytes]:
        size = block_size_tokens or DEFAULT_BLOCK_SIZE_TOKENS
        return prefix_hashes(list(token_ids[: MAX_LOOKUP_BLOCKS * size]), self.model_id, tenant, size)

    async def match(self, hashes: list[bytes], endpoints: list[str]) -> dict[str, int]:
        """Per endpoint, the number of leading blocks of `hashes` it is known (or believed) to hold."""
        workers = {e: worker_id_for(e) for e in endpoints}
        if self._redis is not None and time.monotonic() >= self._redis_down_until:
            try:
                by_worker = await self._redis.match(hashes, list(workers.values()))
            except Exception as exc:  # noqa: BLE001 - any Redis trouble: route on history instead
                self._redis_down_until = time.monotonic() + self._retry_after_s
                self._set_mode("approximate", reason=f"Redis failed: {exc}")
            else:
                self._set_mode("redis")
                return {e: by_worker[w] for e, w in workers.items()}
        by_worker = self.approximate.match(hashes, list(workers.values()))
        return {e: by_worker[w] for e, w in workers.items()}

    def record(self, endpoint: str, hashes: list[bytes]) -> None:
        self.approximate.record(worker_id_for(endpoint), hashes)

    def _set_mode(self, mode: str, reason: str = "") -> None:
        if getattr(self, "_mode", None) == mode:
            return
        self._mode = mode
        for m in ("redis", "approximate"):
            metrics.PREFIX_HINT_MODE.labels(m).set(1 if m == mode else 0)
        if mode == "redis":
            log.info("prefix hints: reading workers' hints from Redis")
        else:
            log.warning(
                "prefix hints: routing on this gateway's own history (approximate)%s", f": {reason}" if reason else ""
            )
