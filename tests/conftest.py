"""Shared fixtures: the demo checkpoint, free ports, a real redis-server."""

import itertools
import os
import random
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

# The kernel tests run Triton's interpreter on CPU. It must be on before triton is first imported in a test process
# (triton.language's own functions are defined at import), and any test module may import it first: transformers'
# modeling classes import torch._dynamo, which imports triton. So it is set here, before anything is collected.
os.environ.setdefault("TRITON_INTERPRET", "1")

from tandem.demo_model import write_demo_checkpoint  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def local_token_file(tmp_path_factory) -> Path:
    """The local agent's token file of this test session (never the user's ~/.tandem): agents and SDK clients
    started by the tests, in this process or as children, all read TANDEM_LOCAL_TOKEN_FILE."""
    path = tmp_path_factory.mktemp("device") / "local-agent.token"
    os.environ["TANDEM_LOCAL_TOKEN_FILE"] = str(path)
    # Every gateway the tests start shares one cache-salt secret, as replicas in a deployment do.
    os.environ.setdefault("TANDEM_CACHE_SALT_SECRET", secrets.token_hex(16))
    # Every edge agent a stack starts shares one export cache: the demo model is exported to ONNX once.
    os.environ.setdefault("TANDEM_EDGE_CACHE_DIR", str(tmp_path_factory.mktemp("edge-exports")))
    return path


@pytest.fixture(scope="session")
def demo_checkpoint(tmp_path_factory) -> Path:
    return write_demo_checkpoint(tmp_path_factory.mktemp("models") / "tandem-demo")


def free_port() -> int:
    """A loopback port no one holds, for a server a test starts. Taken from below the kernel's ephemeral range,
    which every outgoing connection draws from: a port the kernel handed out (port 0) and the test released could
    be an outgoing connection's before the server binds it ("address already in use", seen in make test). Each
    pytest-xdist worker (and a bench) walks its own share of the range in turn, so no two callers get one port."""
    while True:
        port = next(_PORTS, None)
        if port is None:  # no room below the ephemeral range: the kernel's choice
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                return s.getsockname()[1]
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue  # held by something else
            return port


def _port_share():
    """This process's ports: its share of [10000, ephemeral start), one share per xdist worker (PYTEST_XDIST_WORKER
    gw0, gw1, ...; the main process and benches take the last), walked from a random point."""
    try:
        ephemeral_start = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_start = 49152  # IANA's, and macOS's and Windows' default
    low, high = 10000, ephemeral_start
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) + 1  # + the share of processes outside xdist
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    index = int(worker[2:]) if worker.startswith("gw") and worker[2:].isdigit() else workers - 1
    size = (high - low) // workers
    if size <= 0:
        return iter(())
    start = low + index * size
    first = start + random.randrange(size)  # two processes sharing a share (two benches) start apart
    return itertools.chain(range(first, start + size), range(start, first))


_PORTS = _port_share()


def start_redis_server(workdir: Path, port: int | None = None) -> tuple[str, subprocess.Popen]:
    """A redis-server of our own on `port` (default: a free one); the caller terminates it."""
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError(
            "redis-server not found: install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis) or set REDIS_URL"
        )
    port = port or free_port()
    process = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(workdir)],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError(f"redis-server did not start on port {port}")
        time.sleep(0.05)
    return f"redis://127.0.0.1:{port}/0", process


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory) -> str:
    """REDIS_URL if set, else a redis-server of our own on a free port."""
    if os.environ.get("REDIS_URL"):
        yield os.environ["REDIS_URL"]
        return
    url, process = start_redis_server(tmp_path_factory.mktemp("redis"))
    yield url
    process.terminate()
    process.wait(timeout=10)


@pytest.fixture(scope="module")
def collector():
    """An OTLP/gRPC trace collector on loopback, for the processes a test module starts."""
    from tests.otlp_collector import OtlpCollector  # here: the GPU suite runs where opentelemetry may be missing

    c = OtlpCollector()
    yield c
    c.stop()


# Files that start processes or run Triton's interpreter take most of make test's time, so they go first:
# make test has pytest-xdist hand files to its workers in collection order (--no-loadscope-reorder; by default it
# sorts them by test count, which left these few-test files for the end, one worker running them for minutes while
# the other idled).
SLOW_FIRST = ("tests/integration/", "tests/unit/kernels/", "tests/unit/tandem/")


def pytest_collection_modifyitems(config, items):
    root = Path(str(config.rootpath))

    def slow(item) -> bool:
        return Path(str(item.path)).relative_to(root).as_posix().startswith(SLOW_FIRST)

    items.sort(key=lambda item: not slow(item))  # stable: files and tests keep their order within each group
