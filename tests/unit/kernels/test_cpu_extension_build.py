"""A build of the C++ CPU kernels killed mid-compile blocks nothing: a worker then starts at once and serves on the
torch references, saying why; the next build completes, and a fresh process loads its artifact without compiling.

It compiles the real source once, in a directory of its own (TANDEM_CPU_KERNEL_DIR), never the venv's build:
about a minute on two cores.
"""

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from kernels import cpu_extension
from proto.gen import worker_pb2, worker_pb2_grpc
from tests.conftest import free_port

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[3]

LOADS_WITHOUT_COMPILING = """
import logging, time, torch
import torch.utils.cpp_extension
logging.basicConfig(level=logging.INFO)
def no_compiling(*args, **kwargs):
    raise AssertionError("compiled at run time")
torch.utils.cpp_extension.load = no_compiling
from kernels import cpu_extension
from kernels.silu_and_mul import silu_and_mul_ref
started = time.perf_counter()
ext = cpu_extension.extension()
took = time.perf_counter() - started
print("module", None if ext is None else ext.__file__)
print("took", took)
if ext is not None:
    gate, up = torch.randn(3, 257), torch.randn(3, 257)
    torch.testing.assert_close(ext.silu_and_mul(gate, up), silu_and_mul_ref(gate, up), rtol=1e-5, atol=1e-6)
    print("matches the reference")
"""


def run(args: list[str], env: dict, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return result, time.monotonic() - started


def kill_a_build_mid_compile(root: Path, env: dict) -> None:
    """Start `python -m kernels.cpu_extension` and SIGKILL it, compiler included, once the compiler runs."""
    build = subprocess.Popen(
        [sys.executable, "-m", "kernels.cpu_extension"],
        env=env,
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # its own process group: killed whole, as Ctrl-C or a stopped container does
    )
    try:
        deadline = time.monotonic() + 60
        while not list(root.glob(f"{cpu_extension.TEMP_PREFIX}*/*/build.ninja")):  # torch's lock is taken by now
            assert build.poll() is None and time.monotonic() < deadline, "the build never started compiling"
            time.sleep(0.05)
        time.sleep(1.0)  # the compiler is running
        assert build.poll() is None, "the build finished before it could be killed"
    finally:
        os.killpg(build.pid, signal.SIGKILL)
        build.wait(timeout=10)


def start_worker(model: Path, port: int, env: dict) -> tuple[subprocess.Popen, list[str], float]:
    started = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", "cloud-worker", "--model", str(model), "--port", str(port)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines = []
    deadline = started + 60
    while "worker ready" not in (line := process.stdout.readline()):
        lines.append(line)
        assert process.poll() is None and time.monotonic() < deadline, "".join(lines[-20:])
    return process, lines, time.monotonic() - started


async def generate(port: int) -> list[int]:
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        request = worker_pb2.GenerateRequest(
            request_id="after-a-killed-build",
            tenant="t",
            model="tandem-demo",
            prompt_token_ids=list(range(3, 40)),
            sampling=worker_pb2.SamplingParams(max_tokens=4, ignore_eos=True),
        )
        tokens = []
        async for chunk in worker_pb2_grpc.WorkerStub(channel).Generate(request, timeout=30):
            tokens += chunk.token_ids
        return tokens


def test_a_killed_build_blocks_nothing_and_the_next_build_is_loaded_without_compiling(tmp_path, demo_checkpoint):
    root = tmp_path / "kernels"
    env = {**os.environ, "TANDEM_CPU_KERNEL_DIR": str(root)}
    env.pop("TANDEM_CPU_KERNELS", None)
    old = root / "0123456789abcdef"  # what the first layout's killed build left: torch's lock, never released
    old.mkdir(parents=True)
    (old / "build.ninja").write_text("")
    (old / "lock").write_text("")

    kill_a_build_mid_compile(root, env)
    assert list(root.glob(f"{cpu_extension.TEMP_PREFIX}*/*/lock")), "the killed build left torch's lock behind"

    port = free_port()
    worker, lines, start_s = start_worker(demo_checkpoint, port, env)
    try:
        assert start_s < 30, f"the worker took {start_s:.1f} s to start"
        assert any("C++ CPU kernels not built" in line and "torch references" in line for line in lines), lines
        assert len(asyncio.run(generate(port))) == 4
    finally:
        worker.terminate()
        worker.wait(timeout=15)

    built, build_s = run([sys.executable, "-m", "kernels.cpu_extension"], env, timeout=600)
    assert built.returncode == 0 and "tandem CPU kernels: built" in built.stdout, built.stdout + built.stderr[-3000:]
    assert not list(root.glob(f"{cpu_extension.TEMP_PREFIX}*")) and not old.exists()  # the killed build's leftovers
    (artifact,) = [p for p in root.iterdir() if (p / cpu_extension.MANIFEST).is_file()]

    loaded, load_s = run([sys.executable, "-c", LOADS_WITHOUT_COMPILING], env, timeout=60)
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr[-3000:]
    assert f"module {artifact}" in loaded.stdout and "matches the reference" in loaded.stdout, loaded.stdout
    extension_s = float(loaded.stdout.split("took ")[1].split()[0])
    assert extension_s < 5 and load_s < 30, (extension_s, load_s)
    print(f"worker start {start_s:.1f} s, build {build_s:.1f} s, load {extension_s:.3f} s (process {load_s:.1f} s)")
