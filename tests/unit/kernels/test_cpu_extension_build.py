"""Building and loading the C++ CPU kernels (tandem_kernels/cpu_extension.py) cannot wedge a start.

A build killed mid-compile blocks nothing: a worker then starts at once and serves on the torch references,
saying why; the next build clears what the killed one left, and a fresh process loads a published artifact
without compiling. That test starts a real compile in a directory of its own (TANDEM_CPU_KERNEL_DIR),
never the venv's build, and kills it. The others are in-process and take milliseconds.
"""

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc
import pytest

from proto.gen import worker_pb2, worker_pb2_grpc
from tandem_kernels import cpu_extension
from tests.conftest import free_port

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def root(tmp_path, monkeypatch):
    """An empty artifact root for this test, and extension() asked afresh (before and after)."""
    monkeypatch.setenv("TANDEM_CPU_KERNEL_DIR", str(tmp_path / "kernels"))
    monkeypatch.delenv("TANDEM_CPU_KERNELS", raising=False)
    cpu_extension.extension.cache_clear()
    yield tmp_path / "kernels"
    cpu_extension.extension.cache_clear()


def publish_fake(root: Path, content: bytes = b"not a shared object") -> Path:
    directory = cpu_extension.artifact_directory()
    directory.mkdir(parents=True)
    (directory / "tandem_cpu_kernels.so").write_bytes(content)
    manifest = {"module": "tandem_cpu_kernels", "file": "tandem_cpu_kernels.so", "openmp": True}
    (directory / cpu_extension.MANIFEST).write_text(json.dumps(manifest))
    return directory


def warnings_of(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == cpu_extension.__name__ and r.levelno >= logging.WARNING]


def test_without_an_artifact_the_references_serve_and_one_line_says_so(root, caplog):
    old = root / "0123456789abcdef"  # the first layout's build directory, with a lock a killed build left
    old.mkdir(parents=True)
    (old / "lock").write_text("")
    started = time.monotonic()
    assert cpu_extension.extension() is None and cpu_extension.extension() is None
    assert time.monotonic() - started < 1
    assert warnings_of(caplog) == [
        "C++ CPU kernels not built (run `python -m tandem_kernels.cpu_extension` or `make install`); using the torch references"
    ]


def test_a_failed_build_is_named_at_run_time(root, caplog):
    root.mkdir()
    (root / (cpu_extension.artifact_key() + ".failed")).write_text("Ninja is required to load C++ extensions\n")
    assert cpu_extension.extension() is None
    (line,) = warnings_of(caplog)
    assert "could not be built here (Ninja is required to load C++ extensions;" in line and "torch references" in line


def test_an_artifact_that_does_not_load_means_the_references(root, caplog):
    directory = publish_fake(root)
    assert cpu_extension.extension() is None
    (line,) = warnings_of(caplog)
    assert f"C++ CPU kernels in {directory} did not load" in line and line.endswith("using the torch references")


def test_a_load_that_hangs_is_given_up_after_a_few_seconds(root, caplog, monkeypatch):
    publish_fake(root)
    release = threading.Event()

    class Hanging:  # as a module on a file system that stopped answering
        def __init__(self, name, path):
            pass

        def create_module(self, spec):
            return None

        def exec_module(self, module):
            release.wait(30)

    monkeypatch.setattr(cpu_extension.importlib.machinery, "ExtensionFileLoader", Hanging)
    monkeypatch.setattr(cpu_extension, "LOAD_TIMEOUT_S", 0.3)
    started = time.monotonic()
    try:
        assert cpu_extension.extension() is None
        assert time.monotonic() - started < 2
    finally:
        release.set()
    (line,) = warnings_of(caplog)
    assert "did not load (loading tandem_cpu_kernels.so took over 0.3 s)" in line


def test_a_published_artifact_is_not_built_again(root, monkeypatch):
    directory = publish_fake(root)

    def no_compiling(*args, **kwargs):
        raise AssertionError("compiled again")

    monkeypatch.setattr("torch.utils.cpp_extension.load", no_compiling)
    assert cpu_extension.build() == directory


def test_the_next_build_removes_what_killed_builds_left_and_nothing_else(root):
    root.mkdir()
    dead = subprocess.Popen([sys.executable, "-c", ""])
    dead.wait()
    leftovers = [root / f"{cpu_extension.TEMP_PREFIX}{dead.pid}-x1", root / "0123456789abcdef"]
    kept = [root / f"{cpu_extension.TEMP_PREFIX}{os.getpid()}-x2", root / "fedcba9876543210", root / "notes"]
    for directory in leftovers + kept:
        directory.mkdir()
    (leftovers[0] / "variant0").mkdir()
    (leftovers[0] / "variant0" / "lock").write_text("")
    (leftovers[1] / "build.ninja").write_text("")  # the first layout's, by what torch wrote there
    (leftovers[1] / "lock").write_text("")
    old = time.time() - cpu_extension.STALE_TEMP_S - 60
    aged = root / f"{cpu_extension.TEMP_PREFIX}{os.getpid()}-x3"  # a live pid, but far too old to be building
    aged.mkdir()
    os.utime(aged, (old, old))
    cpu_extension.remove_stale_builds(root)
    assert sorted(p.name for p in root.iterdir()) == sorted(p.name for p in kept)


# -- a real build, killed -------------------------------------------------------------------------------------

LOADS_WITHOUT_COMPILING = """
import logging, time, torch
import torch.utils.cpp_extension
logging.basicConfig(level=logging.INFO)
def no_compiling(*args, **kwargs):
    raise AssertionError("compiled at run time")
torch.utils.cpp_extension.load = no_compiling
from tandem_kernels import cpu_extension
started = time.perf_counter()
ext = cpu_extension.extension()
took = time.perf_counter() - started
print("module", None if ext is None else ext.__file__)
print("took", took)
if ext is not None:
    gate, up = torch.randn(3, 257), torch.randn(3, 257)
    expected = torch.nn.functional.silu(gate) * up  # kernels.silu_and_mul_ref, without importing triton
    torch.testing.assert_close(ext.silu_and_mul(gate, up), expected, rtol=1e-5, atol=1e-6)
    print("matches the reference")
"""


def run(args: list[str], env: dict, timeout: float) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    result = subprocess.run(args, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    return result, time.monotonic() - started


def kill_a_build_mid_compile(root: Path, env: dict) -> None:
    """Start `python -m tandem_kernels.cpu_extension` and SIGKILL it, compiler included, once the compiler runs."""
    build = subprocess.Popen(
        [sys.executable, "-m", "tandem_kernels.cpu_extension"],
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


@pytest.mark.integration
def test_a_killed_build_blocks_nothing_and_an_artifact_is_loaded_without_compiling(tmp_path, demo_checkpoint):
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

    # What the next build does first: the killed build's leftovers go, and nothing else.
    cpu_extension.remove_stale_builds(root)
    assert not list(root.glob(f"{cpu_extension.TEMP_PREFIX}*")) and not old.exists()

    # A published artifact loads in a fresh process without compiling: the venv's own, which `make` built
    # (building one here again would cost this test a minute on two cores).
    published = Path(sys.prefix) / "tandem-kernels" / cpu_extension.artifact_key()
    if not (published / cpu_extension.MANIFEST).is_file():  # only then: an artifact that fails to load must fail here
        pytest.skip("no artifact in this environment (no compiler at `make` time): nothing to load")
    default_env = {k: v for k, v in env.items() if k != "TANDEM_CPU_KERNEL_DIR"}
    loaded, load_s = run([sys.executable, "-c", LOADS_WITHOUT_COMPILING], default_env, timeout=60)
    assert loaded.returncode == 0, loaded.stdout + loaded.stderr[-3000:]
    assert "matches the reference" in loaded.stdout, loaded.stdout
    extension_s = float(loaded.stdout.split("took ")[1].split()[0])
    assert extension_s < 5 and load_s < 30, (extension_s, load_s)
    print(f"worker start {start_s:.1f} s, load {extension_s:.3f} s (process {load_s:.1f} s)")
