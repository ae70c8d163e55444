"""Publishes the engine's block-cached / block-evicted events to Redis as prefix hints.

The engine thread hands events over without waiting; a publisher thread
batches them into one pipeline per flush, and re-scores every held hash each
TTL/3 so hints outlive no worker by more than a TTL (proto/prefix_hints.py:
one sorted set per block, this worker a member of each it holds). Redis trouble never
reaches requests: the publisher logs once per outage, keeps its picture of
what is held, tries again after 0.5 s doubling to 5 s, and writes it all again when Redis is back. A Redis that lost
them without an error (FLUSHALL, a restart between two flushes, eviction) is found within CHECK_S by a marker key
written with them, and they are written again (a review: affinity was lost until the next refresh, TTL/3). On a
clean shutdown it removes its hints at once.
"""

import logging
import threading
import time

import redis

from cloud_worker.engine.block_manager import BlockEvent, BlockEventKind
from proto.prefix_hints import DEFAULT_HINT_TTL_S, HOLD_SCRIPT, block_key, too_old

log = logging.getLogger(__name__)
FLUSH_INTERVAL_S = 0.05
# A script call blocks Redis while it runs (~5 us a key): a worker's whole cache goes in slices of ~1 ms, so a
# gateway's lookup never waits long behind a refresh.
KEYS_PER_SCRIPT_CALL = 200
# While Redis is down, a try every 0.5 s, doubling to 5 s: every try rebuilds the whole cache's writes (every
# 50 ms, that was the publisher thread holding the GIL beside the engine for the whole outage).
FIRST_RETRY_S, MAX_RETRY_S = 0.5, 5.0
CHECK_S = 1.0  # how often a connected publisher holding blocks asks whether Redis still has its marker


class HintPublisher:
    def __init__(self, redis_url: str, model_id: str, worker_id: str, ttl_s: float = DEFAULT_HINT_TTL_S) -> None:
        self.model_id, self.worker_id, self.ttl_s = model_id, worker_id, ttl_s
        self._redis = redis.Redis.from_url(redis_url, socket_timeout=2, socket_connect_timeout=2)
        self._hold = self._redis.register_script(HOLD_SCRIPT)
        self._lock = threading.Lock()
        self._pending: list[BlockEvent] = []
        self._held: set[bytes] = set()
        self._resync = True  # write every held hash on the next flush (first run, or after an outage)
        self._last_refresh = 0.0
        self._marker = f"tandem:kvw:{model_id}:{worker_id}"  # written with every refresh, expiring with the hints
        self._checked_at = 0.0
        self._retry_at, self._backoff_s = 0.0, FIRST_RETRY_S  # while Redis is down: when to try again
        self.is_connected: bool | None = None  # None until the first write
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="hint-publisher", daemon=True)
        self._thread.start()

    def publish(self, events: list[BlockEvent]) -> None:
        """Called from the engine thread: never blocks on Redis."""
        with self._lock:
            self._pending.extend(events)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        try:
            pipe = self._redis.pipeline(transaction=False)
            for block_hash in self._held:
                pipe.zrem(self._key(block_hash), self.worker_id)
            pipe.delete(self._marker)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("could not remove prefix hints at shutdown (they expire in %.0f s): %s", self.ttl_s, exc)
        self._redis.close()

    def _too_old(self, exc: redis.RedisError) -> str | None:
        """Redis's version, where a refusal is because it is too old for the scripts (else None)."""
        if not isinstance(exc, redis.ResponseError):
            return None
        try:
            return too_old(str(self._redis.info("server").get("redis_version", "")))
        except redis.RedisError:
            return None

    def _key(self, block_hash: bytes) -> str:
        return block_key(self.model_id, block_hash)

    def _run(self) -> None:
        while not self._stop.wait(FLUSH_INTERVAL_S):
            self.flush()

    def flush(self) -> None:
        with self._lock:
            events, self._pending = self._pending, []
        cached: dict[bytes, None] = {}  # in order; a block's last event within one flush is what is written
        evicted: set[bytes] = set()
        for event in events:
            if event.kind is BlockEventKind.CACHED:
                self._held.add(event.block_hash)
                cached[event.block_hash] = None
                evicted.discard(event.block_hash)
            else:
                self._held.discard(event.block_hash)
                cached.pop(event.block_hash, None)
                evicted.add(event.block_hash)
        now = time.monotonic()
        if self.is_connected is False and now < self._retry_at:
            return  # Redis is down: the picture above stays current, and the next try writes all of it
        if self.is_connected and self._held and now - self._checked_at >= CHECK_S:
            self._checked_at = now
            try:
                if not self._redis.exists(self._marker):
                    log.info("prefix hints: Redis no longer has them (flushed or restarted); writing them again")
                    self._resync = True
            except redis.RedisError:
                pass  # the writes below find the trouble and say it
        pipe = self._redis.pipeline(transaction=False)
        if self._resync or now - self._last_refresh >= self.ttl_s / 3:
            cached = dict.fromkeys(self._held)
            self._last_refresh = now
            if self._held:
                pipe.set(self._marker, 1, px=int(self.ttl_s * 1000))
        for block_hash in evicted:
            pipe.zrem(self._key(block_hash), self.worker_id)
        keys = [self._key(h) for h in cached]
        for start in range(0, len(keys), KEYS_PER_SCRIPT_CALL):
            self._hold(keys[start : start + KEYS_PER_SCRIPT_CALL], [self.worker_id, int(self.ttl_s * 1000), "gt"], pipe)
        if not len(pipe):
            return
        try:
            pipe.execute()
        except redis.RedisError as exc:
            if self.is_connected is not False:  # once per outage
                if reason := self._too_old(exc):
                    log.error("prefix hints not published: %s; serving on without them", reason)
                else:
                    log.warning("prefix hints: Redis unavailable (%s); serving on, will resync when it is back", exc)
            self._backoff_s = min(MAX_RETRY_S, self._backoff_s * 2) if self.is_connected is False else FIRST_RETRY_S
            self._retry_at = time.monotonic() + self._backoff_s
            self.is_connected, self._resync = False, True
            return
        if not self.is_connected:
            log.info("prefix hints: publishing %d held blocks to Redis as %s", len(self._held), self.worker_id)
        self.is_connected, self._resync = True, False
