"""A real cloud worker publishing prefix hints to a real Redis, and reporting cache hits over gRPC."""

import asyncio
import signal
import time

import grpc
import pytest
import redis

from proto.gen import worker_pb2, worker_pb2_grpc
from proto.prefix_hash import prefix_hashes
from proto.prefix_hints import block_key
from tests.conftest import free_port
from tests.stack import start_worker_process

pytestmark = pytest.mark.integration
PROMPT = list(range(300, 340))  # 40 tokens: two full blocks of 16 and a partial one
TTL_S = 2.0


def start_worker(checkpoint, redis_url: str, port: int):
    args = ["cloud-worker", "--model", str(checkpoint), "--port", str(port), "--num-kv-blocks", "64"]
    args += ["--hint-ttl-s", str(TTL_S)]
    return start_worker_process(args, {"REDIS_URL": redis_url})


async def generate(port: int, tenant: str) -> worker_pb2.GenerateChunk:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        stub = worker_pb2_grpc.WorkerStub(channel)
        request = worker_pb2.GenerateRequest(
            request_id="r", tenant=tenant, prompt_token_ids=PROMPT, sampling=worker_pb2.SamplingParams(max_tokens=4)
        )
        chunks = [c async for c in stub.Generate(request)]
        return chunks[-1]


async def stats(port: int) -> worker_pb2.StatsReply:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        return await worker_pb2_grpc.WorkerStub(channel).Stats(worker_pb2.StatsRequest())


def wait_for(predicate, timeout_s: float = 10.0):
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_hints_appear_hits_are_reported_and_a_dead_workers_hints_expire(demo_checkpoint, redis_url):
    port = free_port()
    client = redis.Redis.from_url(redis_url)
    keys = [block_key("tandem-demo", h) for h in prefix_hashes(PROMPT, "tandem-demo", "acme")]
    worker_id = f"127.0.0.1:{port}"
    assert len(keys) == 2
    worker = start_worker(demo_checkpoint, redis_url, port)
    try:
        cold = asyncio.run(generate(port, "acme"))
        assert cold.usage.cached_prompt_tokens == 0
        wait_for(lambda: client.exists(*keys) == 2)  # the gateway's hash function finds the worker's blocks
        assert all(client.zscore(key, worker_id) for key in keys)  # this worker holds them
        assert 0 < client.pttl(keys[0]) <= TTL_S * 1000
        warm = asyncio.run(generate(port, "acme"))
        assert warm.usage.cached_prompt_tokens == 32
        other_tenant = asyncio.run(generate(port, "globex"))
        assert other_tenant.usage.cached_prompt_tokens == 0  # tenants never share blocks
        s = asyncio.run(stats(port))
        assert (s.kv_blocks_total, s.block_size_tokens) == (64, 16)
        assert (s.prefix_hit_tokens, s.prefix_query_tokens) == (32, 120)
        time.sleep(TTL_S * 1.5)
        assert client.exists(*keys) == 2  # refreshed while the worker lives
    finally:
        worker.send_signal(signal.SIGKILL)  # no clean shutdown: the hints must expire on their own
        worker.wait(timeout=10)
    wait_for(lambda: client.exists(*keys) == 0, timeout_s=TTL_S * 3)


def test_a_clean_shutdown_deletes_the_workers_hints_at_once(demo_checkpoint, redis_url):
    port = free_port()
    client = redis.Redis.from_url(redis_url)
    keys = [block_key("tandem-demo", h) for h in prefix_hashes(PROMPT, "tandem-demo", "t")]
    worker = start_worker(demo_checkpoint, redis_url, port)
    asyncio.run(generate(port, "t"))
    wait_for(lambda: client.exists(*keys) == 2)
    worker.terminate()
    worker.wait(timeout=15)
    assert client.exists(*keys) == 0
