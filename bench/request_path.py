"""What the gateway adds to a request, against calling the cloud worker directly.

Starts the local stack (demo model) on free ports, then sends the same
one-token chat request N times, alternating (a) straight to the cloud
worker's gRPC `Generate` with pre-tokenized ids and (b) through the gateway's
HTTP API (which tokenizes, classifies, applies the policy, picks and
proxies). Last line: a JSON object with both latency distributions and
their ratio.

    python bench/request_path.py --quick
"""

import argparse
import asyncio
import json
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import grpc
import httpx
from rich.progress import track

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from proto.gen import worker_pb2, worker_pb2_grpc  # noqa: E402
from serving.openai.chat_tokenizer import ChatTokenizer  # noqa: E402
from tandem.demo_model import write_demo_checkpoint  # noqa: E402
from tandem.stack import start_local_stack  # noqa: E402

MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def direct_once(stub, prompt_ids: list[int]) -> float:
    request = worker_pb2.GenerateRequest(
        request_id="bench",
        model="tandem-demo",
        prompt_token_ids=prompt_ids,
        sampling=worker_pb2.SamplingParams(temperature=0, max_tokens=1),
    )
    started = time.perf_counter()
    async for _ in stub.Generate(request):
        pass
    return (time.perf_counter() - started) * 1000


async def gateway_once(client: httpx.AsyncClient, url: str) -> float:
    body = {"model": "tandem-demo", "messages": MESSAGES, "max_tokens": 1, "temperature": 0}
    started = time.perf_counter()
    response = await client.post(f"{url}/v1/chat/completions", json=body)
    response.raise_for_status()
    return (time.perf_counter() - started) * 1000


async def measure(url: str, cloud_endpoint: str, prompt_ids: list[int], n: int) -> tuple[list[float], list[float]]:
    direct, through = [], []
    async with grpc.aio.insecure_channel(cloud_endpoint.removeprefix("grpc://")) as channel:
        stub = worker_pb2_grpc.WorkerStub(channel)
        async with httpx.AsyncClient(timeout=30) as client:
            for _ in range(5):  # warm-up: connections, caches, allocator
                await direct_once(stub, prompt_ids)
                await gateway_once(client, url)
            for _ in track(range(n), description="requests", console=None, transient=True):
                direct.append(await direct_once(stub, prompt_ids))
                through.append(await gateway_once(client, url))
    return direct, through


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="100 requests each instead of 500")
    parser.add_argument("-n", type=int, default=None)
    args = parser.parse_args()
    n = args.n or (100 if args.quick else 500)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        model_dir = write_demo_checkpoint(work / "tandem-demo")
        cloud, edge = free_port(), free_port()
        policy = work / "policy.yaml"
        policy.write_text(
            "version: 1\n"
            f"pools:\n  cloud: {{kind: cloud, endpoints: ['grpc://127.0.0.1:{cloud}']}}\n"
            f"  edge: {{kind: edge, endpoints: ['grpc://127.0.0.1:{edge}']}}\n"
            "rules:\n  - {name: default, route: cloud}\n"
        )
        stack = start_local_stack(model_dir, policy, work, free_port())
        try:
            prompt_ids = ChatTokenizer(model_dir).encode_chat(MESSAGES)
            direct, through = asyncio.run(measure(stack.url, f"grpc://127.0.0.1:{cloud}", prompt_ids, n))
        finally:
            stack.stop()
    result = {
        "requests": n,
        "prompt_tokens": len(prompt_ids),
        "direct_p50_ms": round(statistics.median(direct), 3),
        "direct_p99_ms": round(percentile(direct, 0.99), 3),
        "gateway_p50_ms": round(statistics.median(through), 3),
        "gateway_p99_ms": round(percentile(through, 0.99), 3),
        "added_p50_ms": round(statistics.median(through) - statistics.median(direct), 3),
        "ratio_p50": round(statistics.median(through) / statistics.median(direct), 3),
    }
    print(f"direct gRPC to the cloud worker: p50 {result['direct_p50_ms']} ms, p99 {result['direct_p99_ms']} ms")
    print(f"through the gateway (HTTP):      p50 {result['gateway_p50_ms']} ms, p99 {result['gateway_p99_ms']} ms")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
