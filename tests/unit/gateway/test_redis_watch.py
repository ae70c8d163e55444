"""What the gateway says of a REDIS_URL that cannot work: a hint that works when pasted."""

import pytest
import redis

from gateway.redis_client import connect, with_password


@pytest.mark.parametrize(
    ("url", "hint"),
    [
        ("redis://10.0.0.5:6379/2", "redis://:PASSWORD@10.0.0.5:6379/2"),
        ("rediss://cache.internal:6380/0", "rediss://:PASSWORD@cache.internal:6380/0"),
        ("unix:///run/redis.sock?db=3", "unix:///run/redis.sock?db=3&password=PASSWORD"),
        ("redis://[::1]:6379", "redis://:PASSWORD@[::1]:6379/0"),
    ],
)
def test_the_password_hint_keeps_the_urls_scheme_socket_and_database(url, hint):
    """It said redis://:PASSWORD@host for every URL: pasted for a rediss:// one, the next start refused it as TLS;
    for a Unix socket it named localhost:6379, another Redis (a review)."""
    assert with_password(redis.Redis.from_url(url)) == with_password(connect(url)) == hint
    kwargs = redis.asyncio.connection.parse_url(hint.replace("PASSWORD", "pw"))
    assert kwargs["password"] == "pw" and kwargs.get("db", 0) == redis.asyncio.connection.parse_url(url).get("db", 0)
