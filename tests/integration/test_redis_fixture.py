"""Tests that need Redis get a real redis-server of their own (or REDIS_URL)."""

import redis


def test_redis_server_answers(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.set("tandem:probe", b"ok", ex=10)
    assert client.get("tandem:probe") == b"ok"
    assert client.ttl("tandem:probe") > 0
