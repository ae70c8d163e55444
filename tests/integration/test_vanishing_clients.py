"""Clients that vanish leak nothing: 500 streams, each dropped at a random moment.

Moments: right after sending the request (before the response headers), a few
milliseconds later (between dispatch and the first byte), and mid-stream after
some tokens. Afterwards the gateway's in-flight gauges read 0 for every tenant
and backend, and every worker reports no running sequence and no KV block in
use.
"""

import asyncio
import json
import random
import re
import time

import grpc
import httpx
import pytest

from proto.gen import worker_pb2, worker_pb2_grpc
from tests.stack import endpoint_of, start_stack

pytestmark = pytest.mark.integration
STREAMS, AT_ONCE = 500, 32
MOMENTS = ("before_headers", "before_first_byte", "mid_stream")


def request_bytes(port: int, body: bytes, headers: dict[str, str]) -> bytes:
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n{extra}\r\n")  # fmt: skip
    return head.encode() + body


def body_for(rng: random.Random) -> tuple[bytes, dict[str, str]]:
    long = "tell me more. " * rng.randint(1, 60)
    kind = rng.choice(["public", "private", "edge"])
    privacy = ', "metadata": {"privacy": "pii"}' if kind == "private" else ""
    headers = {"X-Tandem-Device": '{"npu": true}'} if kind == "edge" else {}
    n = rng.choice([1, 1, 1, 3])  # some ask for several choices: one stream over several worker sequences
    body = (f'{{"model": "tandem-demo", "max_tokens": 16, "stream": true, "temperature": 1, "n": {n}, '
            f'"messages": [{{"role": "user", "content": "{long}"}}]{privacy}}}')  # fmt: skip
    return body.encode(), headers


async def vanish(port: int, rng: random.Random, moment: str) -> None:
    body, headers = body_for(rng)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(request_bytes(port, body, headers))
    await writer.drain()
    if moment == "before_first_byte":
        await asyncio.sleep(rng.uniform(0.001, 0.03))
    elif moment == "mid_stream":
        for _ in range(rng.randint(1, 12)):  # some chunks of the SSE body
            if not await reader.read(256):
                break
    writer.transport.abort()  # a reset, as a client that is killed, not a polite close


def gateway_gauges(url: str) -> list[float]:
    text = httpx.get(f"{url}/metrics").text
    return [float(v) for v in re.findall(r"^tandem_gateway_(?:inflight_requests|backend_inflight)\{[^}]*\} (\S+)$",
                                         text, re.M)]  # fmt: skip


def requests_by_status(url: str) -> dict[str, float]:
    totals: dict[str, float] = {}
    for status, value in re.findall(r'^tandem_gateway_requests_total\{[^}]*status="([^"]+)"[^}]*\} (\S+)$',
                                    httpx.get(f"{url}/metrics").text, re.M):  # fmt: skip
        totals[status] = totals.get(status, 0) + float(value)
    return totals


def worker_stats(endpoint: str) -> worker_pb2.StatsReply:
    with grpc.insecure_channel(endpoint.removeprefix("grpc://")) as channel:
        return worker_pb2_grpc.WorkerStub(channel).Stats(worker_pb2.StatsRequest(), timeout=5)


@pytest.fixture(scope="module")
def stack(demo_checkpoint, tmp_path_factory):
    s = start_stack(demo_checkpoint, tmp_path_factory.mktemp("vanish"))
    yield s
    s.stop()


def test_five_hundred_vanished_clients_leave_nothing_behind(stack):
    port = int(stack.url.rsplit(":", 1)[1])
    rng = random.Random(11)
    plan = [(random.Random(rng.random()), rng.choice(MOMENTS)) for _ in range(STREAMS)]

    async def run():
        limit = asyncio.Semaphore(AT_ONCE)

        async def one(r, moment):
            async with limit:
                await vanish(port, r, moment)

        await asyncio.gather(*(one(r, m) for r, m in plan))

    asyncio.run(run())
    assert {m for _, m in plan} == set(MOMENTS)
    deadline = time.monotonic() + 30
    while True:
        gauges = gateway_gauges(stack.url)
        stats = {pool: worker_stats(endpoint_of(stack, pool)) for pool in ("cloud", "edge")}
        idle = all(s.running == 0 and s.queue_depth == 0 and s.kv_blocks_used == 0 for s in stats.values())
        if gauges and not any(gauges) and idle:
            break
        assert time.monotonic() < deadline, (gauges, stats)
        time.sleep(0.2)
    assert stats["cloud"].requests_total > 0 and stats["edge"].requests_total > 0  # both kinds saw some
    outcomes = requests_by_status(stack.url)
    assert outcomes.get("client_gone", 0) > 0, outcomes  # counted, where before a vanished client was nowhere
    assert "backend_error" not in outcomes, outcomes  # and never as a backend's failure
    for child in stack.children:  # a vanished client is no error: no tracebacks in any log (a review found 26)
        assert "Traceback" not in child.log_path.read_text(), child.log_path
    reply = httpx.post(
        f"{stack.url}/v1/chat/completions",
        timeout=30,
        json={"model": "tandem-demo", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]},
    )
    assert reply.status_code == 200  # fmt: skip


@pytest.mark.parametrize("n", [1, 3])
def test_a_client_that_leaves_a_non_streamed_request_frees_its_work(stack, n):
    """Not streamed, the gateway only heard of the client leaving when it tried to answer: a request for 1,500
    tokens held the worker's sequence, its KV blocks and the tenant's slot for its whole generation."""
    port = int(stack.url.rsplit(":", 1)[1])
    body = (f'{{"model": "tandem-demo", "max_tokens": 1500, "ignore_eos": true, "n": {n}, '
            '"messages": [{"role": "user", "content": "tell me a long story"}]}').encode()  # fmt: skip

    async def leave() -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request_bytes(port, body, {}))
        await writer.drain()
        deadline = time.monotonic() + 30
        while worker_stats(endpoint_of(stack, "cloud")).running == 0:  # generating now
            assert time.monotonic() < deadline, "the request never reached the worker"
            await asyncio.sleep(0.05)
        writer.transport.abort()

    asyncio.run(leave())
    left = time.monotonic()
    while True:
        stats = worker_stats(endpoint_of(stack, "cloud"))
        if not any(gateway_gauges(stack.url)) and stats.running == 0 and stats.kv_blocks_used == 0:
            break
        assert time.monotonic() - left < 5, (gateway_gauges(stack.url), stats)  # 1,500 tokens take far longer
        time.sleep(0.1)


@pytest.mark.parametrize("shape", ["n", "private batch"])
def test_a_client_that_leaves_a_stream_of_several_choices_stops_them_all(stack, shape):
    """A stream of several choices dropped mid-answer went on generating every started choice to max_tokens (the
    response's cancellation cut short the cleanup that stops them; a review), and a later choice queued on the edge
    behind them stayed queued as long."""
    port = int(stack.url.rsplit(":", 1)[1])
    if shape == "n":
        path, pool, headers = "/v1/chat/completions", "cloud", {}
        ask = {"n": 2, "messages": [{"role": "user", "content": "tell me a long story"}]}
    else:
        path, pool, headers = "/v1/completions", "edge", {"X-Tandem-Privacy": "pii"}
        ask = {"prompt": ["tell me a long story", "and another one"]}
    body = json.dumps({"model": "tandem-demo", "max_tokens": 1500, "ignore_eos": True, "stream": True} | ask)

    async def leave() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        writer.write(
            f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
            f"{extra}\r\n{body}".encode()
        )
        seen = b""
        while seen.count(b"data:") < 20:  # some chunks of the answer
            seen += await asyncio.wait_for(reader.read(4096), 30)
        writer.transport.abort()

    asyncio.run(leave())
    left = time.monotonic()
    while True:
        stats = worker_stats(endpoint_of(stack, pool))
        idle = stats.running == 0 and stats.queue_depth == 0 and stats.kv_blocks_used == 0
        if not any(gateway_gauges(stack.url)) and idle:
            break
        assert time.monotonic() - left < 5, (gateway_gauges(stack.url), stats)  # 1,500 tokens take far longer
        time.sleep(0.1)
