"""Which backend holds how much of a prompt's prefix: Redis hints when they work, routing history otherwise.

In Redis mode the gateway's routing of the last `pending_s` seconds counts
too (see approximate_index.py). The mode is visible: `tandem_gateway_prefix_hint_mode` says which is active, and
every switch is logged once. A Redis failure never fails a request: the
lookup falls back to the approximate index at once and tries Redis again
after `retry_after_s`. The approximate index is fed on every routed request
in both modes, so it is warm when it is needed.
"""

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Sequence

from gateway import metrics
from gateway.hints.approximate_index import ApproximateIndex
from gateway.hints.redis_index import RedisHintIndex
from gateway.redis_client import RETRY_AFTER_S, STALLED, RedisWatch
from gateway.routing.candidate import RECENT_WINDOW_S
from proto.prefix_hash import DEFAULT_BLOCK_SIZE_TOKENS, prefix_hashes
from proto.prefix_hints import worker_id_for
from serving.sliding_count import SlidingCount

log = logging.getLogger(__name__)
# How long this gateway trusts its own routing over Redis: a prefill's duration plus a publish flush.
PENDING_S = 2.0
MAX_FLOW_PREFIXES = 10_000
MAX_LOOKUP_BLOCKS = 256  # prompts longer than 4096 tokens (at 16 per block) are matched on their first 4096


class PrefixHints:
    def __init__(
        self,
        model_id: str,
        redis_client=None,
        retry_after_s: float = RETRY_AFTER_S,
        pending_s: float = PENDING_S,
        unreachable: str | None = None,
        watch: RedisWatch | None = None,
    ) -> None:
        self.model_id = model_id
        self.approximate = ApproximateIndex()
        self._redis = RedisHintIndex(redis_client, model_id) if redis_client is not None else None
        self._pending_s = pending_s
        self._watch = watch or RedisWatch(retry_after_s, redis_client)  # shared with the rate limits in the gateway
        self._pending_writes: set[asyncio.Task] = set()
        self._flow: OrderedDict[bytes, SlidingCount] = OrderedDict()  # first block hash -> requests lately
        self._mode: str | None = None
        if self._redis is None:
            self._set_mode("approximate", reason="REDIS_URL not set")
        elif unreachable:  # the gateway's start found Redis silent: history first, Redis again once it answers
            self._watch.failed(unreachable)
            self._set_mode("approximate", reason=unreachable)
        else:
            self._set_mode("redis")

    @property
    def mode(self) -> str:
        return self._mode

    def hashes(self, salt: str, token_ids, block_size_tokens: int) -> list[bytes]:
        size = block_size_tokens or DEFAULT_BLOCK_SIZE_TOKENS
        return prefix_hashes(list(token_ids[: MAX_LOOKUP_BLOCKS * size]), self.model_id, salt, size)

    async def match(self, hashes: list[bytes], endpoints: list[str]) -> dict[str, int]:
        """Per endpoint, the number of leading blocks of `hashes` it is known (or believed) to hold."""
        workers = [worker_id_for(e) for e in endpoints]
        by_worker = await self.match_workers(hashes, workers)
        return {e: by_worker.get(w, 0) for e, w in zip(endpoints, workers, strict=True)}

    async def match_workers(self, hashes: list[bytes], workers: Sequence[str]) -> dict[str, int]:
        """Per worker id holding the first block, how many leading blocks it holds; one left out holds none (at
        256 candidates, a dict of every one was a measurable part of a decision: bench/scaling.py)."""
        if not hashes or not workers:  # nothing to ask, and no word on Redis (a short prompt flapped the mode)
            return {}
        if self._redis is not None and self._watch.usable():
            try:
                by_worker = await self._watch.ask(self._redis.match(hashes, workers))
            except Exception as exc:  # noqa: BLE001 - any Redis trouble: route on history instead
                if self._mode != "approximate":
                    reason = STALLED if isinstance(exc, TimeoutError) else await self._redis.explain(exc)
                    self._set_mode("approximate", reason=reason)
            else:
                self._set_mode("redis")
                # Prompts routed moments ago may still be in prefill, their blocks not yet announced.
                for w, n in self.approximate.match(hashes, workers, max_age_s=self._pending_s).items():
                    by_worker[w] = max(n, by_worker.get(w, 0))
                return by_worker
        elif self._redis is not None and self._mode != "approximate":  # the rate limits found it failing
            self._set_mode("approximate", reason=self._watch.why_not())
        return self.approximate.match(hashes, workers)

    def flow(self, hashes: list[bytes]) -> int:
        """Requests routed in the last RECENT_WINDOW_S whose prompt starts with the same block."""
        recent = self._flow.get(hashes[0]) if hashes else None
        return recent.count() if recent is not None else 0

    def record(self, endpoint: str, hashes: list[bytes], already_held: int = 0) -> None:
        """This gateway just sent a prompt with these block hashes to endpoint.

        Besides its own history, it announces the blocks the worker did not hold yet as
        *pending* hints in Redis: the worker's own sets, added with a short expiry only where
        it is no member yet (NX). Other replicas then see the prompt before the worker has
        computed (and announced) it; the worker's own write later pushes the expiry out, and NX
        never shortens a worker's hint.
        """
        worker = worker_id_for(endpoint)
        self.approximate.record(worker, hashes)
        if hashes:
            self._flow.setdefault(hashes[0], SlidingCount(RECENT_WINDOW_S)).add()
            self._flow.move_to_end(hashes[0])
            while len(self._flow) > MAX_FLOW_PREFIXES:
                self._flow.popitem(last=False)
        if self._redis is not None and self._mode == "redis" and len(hashes) > already_held:
            task = asyncio.get_running_loop().create_task(self._announce_pending(worker, hashes[already_held:]))
            self._pending_writes.add(task)
            task.add_done_callback(self._pending_writes.discard)

    async def _announce_pending(self, worker: str, hashes: list[bytes]) -> None:
        try:
            await self._redis.announce(worker, hashes, int(self._pending_s * 1000))
        except Exception as exc:  # noqa: BLE001 - a lost announcement costs a hit, never a request
            log.debug("pending hints not written: %s", exc)

    def _set_mode(self, mode: str, reason: str = "") -> None:
        if self._mode == mode:
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
