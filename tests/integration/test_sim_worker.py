"""`tandem sim-worker`: the real block manager behind both gRPC and SGLang's HTTP API, with simulated time."""

import asyncio
import time

import grpc
import httpx
import pytest

from gateway.backends.worker_backend import BackendError
from proto.gen import worker_pb2, worker_pb2_grpc
from tests.conftest import free_port
from tests.stack import start_worker_process

pytestmark = pytest.mark.integration
TEXT = "The gateway routes each request to the worker that already holds its prefix. " * 4


@pytest.fixture
def sim_worker(demo_checkpoint):
    port, http_port = free_port(), free_port()
    args = ["sim-worker", "--model", str(demo_checkpoint), "--port", str(port), "--http-port", str(http_port)]
    args += ["--num-kv-blocks", "64", "--prefill-us-per-token", "2000", "--decode-us-per-token", "1000"]
    process = start_worker_process(args)
    url = f"http://127.0.0.1:{http_port}"
    deadline = time.monotonic() + 30  # "ready" is the gRPC side's; the HTTP side starts right after it
    while True:
        try:
            httpx.get(f"{url}/health", timeout=1)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline, "the sim worker's HTTP port never opened"
            time.sleep(0.05)
    yield port, url
    process.terminate()
    process.wait(timeout=10)


def generate(url: str, max_new_tokens: int = 4, text: str = TEXT) -> tuple[dict, float]:
    started = time.perf_counter()
    reply = httpx.post(
        f"{url}/generate", json={"text": text, "sampling_params": {"max_new_tokens": max_new_tokens}}, timeout=30
    )
    reply.raise_for_status()
    return reply.json(), time.perf_counter() - started


def test_cached_prefixes_are_served_by_the_real_block_manager_and_cost_less_time(sim_worker):
    port, url = sim_worker
    pairs = [(generate(url, text=text), generate(url, text=text)) for text in (TEXT, "A " + TEXT, "B " + TEXT)]
    for (cold, _), (warm, _) in pairs:
        prompt = cold["meta_info"]["prompt_tokens"]
        assert cold["meta_info"]["cached_tokens"] == 0
        assert warm["meta_info"]["cached_tokens"] == (prompt - 1) // 16 * 16 > 0
        assert warm["meta_info"]["completion_tokens"] == 4
    # Simulated prefill is 2 ms per uncached token: the warm run skips most of the prompt's cost. The fastest of three
    # prompts each way: one request's wall time on a shared CI machine once had the warm run 0.1 s slower.
    cold_s = min(cold_s for (_, cold_s), _ in pairs)
    warm_s = min(warm_s for _, (_, warm_s) in pairs)
    cached = min(warm["meta_info"]["cached_tokens"] for _, (warm, _) in pairs)
    assert cold_s - warm_s > 0.5 * 0.002 * cached

    async def stats():
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            return await worker_pb2_grpc.WorkerStub(channel).Stats(worker_pb2.StatsRequest())

    s = asyncio.run(stats())
    assert (s.execution_provider, s.kv_blocks_total) == ("simulated", 64)
    hits = sum(warm["meta_info"]["cached_tokens"] for _, (warm, _) in pairs)
    queried = sum(2 * cold["meta_info"]["prompt_tokens"] for (cold, _), _ in pairs)
    assert (s.prefix_hit_tokens, s.prefix_query_tokens) == (hits, queried)


def test_a_small_pool_evicts_and_the_prefix_is_lost(sim_worker):
    _, url = sim_worker
    generate(url)
    for i in range(6):  # other long prompts push the first one's blocks out of a 64-block pool
        httpx.post(f"{url}/generate", json={"text": f"{i} other text " * 60, "sampling_params": {"max_new_tokens": 1}})
    again, _ = generate(url)
    assert again["meta_info"]["cached_tokens"] == 0


def test_a_request_for_another_model_is_refused_as_the_workers_fault(sim_worker):
    """A worker swapped for another model's, behind a gateway that polled it before: it says so, and the gateway
    tries another backend (FAILED_PRECONDITION is retryable) instead of answering with the wrong model."""
    port, _ = sim_worker

    async def ask(model: str) -> grpc.StatusCode:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            request = worker_pb2.GenerateRequest(request_id="m", model=model, prompt_token_ids=[1, 2, 3])
            request.sampling.max_tokens = 2
            try:
                async for _ in worker_pb2_grpc.WorkerStub(channel).Generate(request):
                    pass
            except grpc.aio.AioRpcError as exc:
                return exc.code()
            return grpc.StatusCode.OK

    assert asyncio.run(ask("tandem-demo")) == grpc.StatusCode.OK
    assert asyncio.run(ask("")) == grpc.StatusCode.OK  # no model named: callers that know the worker
    assert asyncio.run(ask("other-model")) == grpc.StatusCode.FAILED_PRECONDITION
    assert BackendError("w", grpc.StatusCode.FAILED_PRECONDITION, "").is_retryable


def test_a_second_worker_on_a_port_in_use_fails_and_a_clean_stop_logs_no_error(sim_worker, demo_checkpoint):
    """gRPC binds with SO_REUSEPORT by default on Linux: a second worker on the same port would share it silently
    (the kernel splitting connections with a leftover one). It must refuse and say why. And a worker stopped
    cleanly, with its HTTP side up, writes no ERROR traceback (its embedded uvicorn was cancelled mid-lifespan)."""
    import subprocess
    import sys

    port, _ = sim_worker
    second = subprocess.run(
        [sys.executable, "-m", "tandem.cli", "sim-worker", "--model", str(demo_checkpoint), "--port", str(port)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert second.returncode != 0 and "port in use" in second.stdout + second.stderr, second.stdout + second.stderr
    http_port = free_port()
    args = ["sim-worker", "--model", str(demo_checkpoint), "--port", str(free_port()), "--http-port", str(http_port)]
    process = start_worker_process(args)
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(f"http://127.0.0.1:{http_port}/health", timeout=1)
            break
        except httpx.TransportError:
            assert time.monotonic() < deadline
            time.sleep(0.05)
    process.terminate()
    out, _ = process.communicate(timeout=30)
    assert process.returncode == 0 and "Traceback" not in out and "ERROR" not in out, out


def test_a_client_reading_slowly_over_real_grpc_is_not_the_workers_fault(sim_worker):
    """The worker answers 40 tokens in ~0.1 s of its own time; the gateway's client takes 2 s to read them. Before,
    the call's gRPC deadline (TANDEM_BACKEND_TIMEOUT_S) covered the time spent waiting on the client: the answer was
    cut with DEADLINE_EXCEEDED and counted against the worker's breaker (a review)."""
    from gateway.backends.circuit_breaker import CircuitBreaker
    from gateway.backends.grpc_backend import GrpcWorkerBackend

    port, _ = sim_worker

    async def read_slowly() -> tuple[int, str]:
        backend = GrpcWorkerBackend(f"grpc://127.0.0.1:{port}", "tandem-demo", "cloud", CircuitBreaker(1))
        request = worker_pb2.GenerateRequest(request_id="slow", model="tandem-demo", prompt_token_ids=[1, 2, 3])
        request.sampling.max_tokens, request.sampling.ignore_eos = 40, True
        tokens = 0
        try:
            async for chunk in backend.generate(request, timeout_s=0.5):
                tokens += len(chunk.token_ids)
                await asyncio.sleep(0.05)
        finally:
            await backend.close()
        return tokens, backend.breaker.state

    assert asyncio.run(read_slowly()) == (40, "closed")
