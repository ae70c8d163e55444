"""A worker's hint publisher through a Redis outage: it tries again at a falling rate, not every flush, and writes
everything it holds once Redis is back."""

import socket
import time

import pytest
import redis

from cloud_worker.engine.block_manager import BlockEvent, BlockEventKind
from cloud_worker.hint_publisher import MAX_RETRY_S, HintPublisher
from proto.prefix_hints import block_key
from tests.conftest import start_redis_server

pytestmark = pytest.mark.integration


class Counted(HintPublisher):
    """Counts the writes it sends (each rebuilds every held block's write after an outage)."""

    tries = 0

    def flush(self) -> None:
        retry_at = self._retry_at
        super().flush()
        if self._retry_at != retry_at or self.is_connected:
            Counted.tries += 1


def test_an_outage_is_retried_at_a_falling_rate_and_resynced_after(tmp_path):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens there yet: connection refused
    hashes = [i.to_bytes(16, "big") for i in range(300)]
    publisher = Counted(f"redis://127.0.0.1:{port}", "tandem-demo", "127.0.0.1:7001", ttl_s=30)
    server = None
    try:
        publisher.publish([BlockEvent(BlockEventKind.CACHED, h) for h in hashes])
        time.sleep(2.0)  # flushes every 50 ms: 40 chances to rebuild 300 writes
        assert publisher.is_connected is False
        assert Counted.tries <= 4, Counted.tries  # 0.5 s, 1 s, 2 s apart: three or four tries, not forty
        publisher.publish([BlockEvent(BlockEventKind.EVICTED, hashes[0])])  # still tracked while Redis is down
        url, server = start_redis_server(tmp_path, port)
        deadline = time.monotonic() + MAX_RETRY_S + 5
        client = redis.Redis.from_url(url)
        while not publisher.is_connected:
            assert time.monotonic() < deadline, "no resync after Redis came back"
            time.sleep(0.1)
        held = [client.zscore(block_key("tandem-demo", h), "127.0.0.1:7001") is not None for h in hashes]
        assert held == [False] + [True] * 299
    finally:
        publisher.close()
        if server is not None:
            server.terminate()
            server.wait(timeout=10)


def test_hints_a_redis_lost_without_an_error_are_written_again_within_a_second(redis_url):
    """(a review) After a FLUSHALL (or a restart between two flushes) the worker's hints were gone until its next
    refresh, TTL/3 later, and every gateway routed without them meanwhile. A marker written with them says so."""
    client = redis.Redis.from_url(redis_url)
    hashes = [(7_000_000 + i).to_bytes(16, "big") for i in range(20)]
    keys = [block_key("tandem-flush", h) for h in hashes]
    publisher = HintPublisher(redis_url, "tandem-flush", "127.0.0.1:7009", ttl_s=30)
    try:
        publisher.publish([BlockEvent(BlockEventKind.CACHED, h) for h in hashes])
        deadline = time.monotonic() + 5
        while client.exists(*keys) < len(keys):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        client.delete(*keys, "tandem:kvw:tandem-flush:127.0.0.1:7009")  # what a FLUSHALL does to this worker's
        deadline = time.monotonic() + 3  # CHECK_S, and a flush: not the 10 s of a refresh
        while client.exists(*keys) < len(keys):
            assert time.monotonic() < deadline, "the hints were not written again"
            time.sleep(0.05)
    finally:
        publisher.close()
    assert client.exists(*keys, "tandem:kvw:tandem-flush:127.0.0.1:7009") == 0  # a clean shutdown takes all
