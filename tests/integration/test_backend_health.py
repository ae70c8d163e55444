"""The gateway's view of a real worker: healthy, wrong model, gone."""

import asyncio
import subprocess
import sys
import time

import pytest

from gateway.backends.grpc_backend import GrpcWorkerBackend
from tests.conftest import free_port

pytestmark = pytest.mark.integration


@pytest.fixture
def worker_announcing(demo_checkpoint):
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tandem.cli",
            "cloud-worker",
            "--model",
            str(demo_checkpoint),
            "--port",
            str(port),
            "--model-id",
            "some-other-model",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while "worker ready" not in (line := process.stdout.readline()):
        assert process.poll() is None and time.monotonic() < deadline, line
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
