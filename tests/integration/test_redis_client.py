"""The gateway's Redis client packs commands with hiredis: the same bytes on the wire as redis-py's own packer,
its errors for what neither takes, and the same answers from a real Redis."""

import asyncio

import pytest
import redis.asyncio
from redis.asyncio.connection import Connection, UnixDomainSocketConnection
from redis.exceptions import DataError

from gateway.redis_client import _hiredis_packing, connect

ARGS = [
    ("SET", "k", "v"),
    ("CONFIG GET", "maxmemory"),  # two words in the name: sent as two arguments
    (b"CLIENT SETNAME", b"x"),
    ("EVALSHA", "a" * 40, 2, "tandem:kvb:m:00ff", "k2", "10.0.0.1:50051", 30_000, "gt"),
    ("SET", "ключ", "значение — 値 🙂", "PX", 1500),
    ("SET", "f", 1.5),
    ("SET", b"\x00\xff", bytearray(b"\x01"), memoryview(b"\x02")),
]


@pytest.mark.parametrize("args", ARGS, ids=[str(a[0]) for a in ARGS])
def test_the_bytes_are_redis_pys(args):
    plain = Connection()
    packed = _hiredis_packing(Connection)()
    assert b"".join(packed.pack_command(*args)) == b"".join(plain.pack_command(*args))
    assert b"".join(packed.pack_commands([args, args])) == b"".join(plain.pack_commands([args, args]))


def test_what_redis_py_refuses_it_refuses_the_same_way():
    with pytest.raises(DataError):
        _hiredis_packing(Connection)().pack_command("SET", "k", None)


def test_the_schemes_connection_class_is_kept(redis_url, tmp_path):
    assert connect(redis_url).connection_pool.connection_class.__mro__[1] is Connection
    unix = connect(f"unix://{tmp_path}/redis.sock").connection_pool.connection_class
    assert issubclass(unix, UnixDomainSocketConnection)


def test_a_real_redis_answers_through_it(redis_url):
    async def run():
        client = connect(redis_url)
        plain = redis.asyncio.from_url(redis_url)
        try:
            await client.set("tandem:test:ключ", "値 🙂", px=60_000)
            got = await plain.get("tandem:test:ключ")
            script = client.register_script("return {KEYS[1], ARGV[1], ARGV[2]}")
            echoed = await script(keys=["tandem:test:k"], args=["10.0.0.1:50051", 7])
            return got, echoed
        finally:
            await client.aclose()
            await plain.aclose()

    got, echoed = asyncio.run(run())
    assert got.decode() == "値 🙂"
    assert echoed == [b"tandem:test:k", b"10.0.0.1:50051", b"7"]
