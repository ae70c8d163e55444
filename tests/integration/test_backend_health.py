"""The gateway's view of a real worker: healthy, wrong model, gone."""

import asyncio

import pytest

from gateway.backends.grpc_backend import GrpcWorkerBackend
from tests.conftest import free_port
from tests.stack import start_worker_process

pytestmark = pytest.mark.integration


@pytest.fixture
def worker_announcing(demo_checkpoint):
    port = free_port()
    args = ["cloud-worker", "--model", str(demo_checkpoint), "--port", str(port), "--model-id", "some-other-model"]
    process = start_worker_process(args)
    yield f"grpc://127.0.0.1:{port}", process
    process.terminate()
    process.wait(timeout=10)


def test_a_worker_serving_another_model_is_not_used_and_readyz_says_why(worker_announcing):
    endpoint, process = worker_announcing

    async def check():
        backend = GrpcWorkerBackend(endpoint, "tandem-demo", "cloud")
        await backend.refresh()
        mismatch = (backend.is_healthy, backend.problem)
        right = GrpcWorkerBackend(endpoint, "some-other-model", "cloud")
        await right.refresh()
        process.terminate()
        process.wait(timeout=10)
        await right.refresh()
        await backend.close()
        await right.close()
        return mismatch, right

    (healthy, problem), gone = asyncio.run(check())
    assert not healthy and "serves model 'some-other-model'" in problem
    assert not gone.is_healthy and "UNAVAILABLE" in gone.problem
