"""The real processes on free loopback ports, through the same launcher as `tandem up`."""

import os
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tandem.stack import LocalStack, local_env, spawn, start_local_stack
from tests.conftest import free_port

DEFAULT_POLICY = Path(__file__).parents[1] / "policies" / "default.yaml"


def write_policy(path: Path, cloud_port: int, edge_port: int) -> Path:
    """The default policy with its endpoints moved to the given ports."""
    policy = yaml.safe_load(DEFAULT_POLICY.read_text())
    policy["pools"]["cloud"]["endpoints"] = [f"grpc://127.0.0.1:{cloud_port}"]
    policy["pools"]["edge"]["endpoints"] = [f"grpc://127.0.0.1:{edge_port}"]
    path.write_text(yaml.safe_dump(policy))
    return path


def otlp_env(otlp_endpoint: str) -> dict[str, str]:
    """Environment that makes a Tandem process export its spans to `otlp_endpoint` within ~0.1 s."""
    return {
        "OTEL_BSP_SCHEDULE_DELAY": "100",
        "OTEL_TRACES_EXPORTER": "otlp",
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_endpoint,
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        # The tests find a request's spans by the trace id they send in its traceparent: the callers are trusted
        "TANDEM_TRUST_TRACE_CONTEXT": "true",
    }


def start_stack(
    model_dir: Path,
    work_dir: Path,
    otlp_endpoint: str | None = None,
    env: dict[str, str] | None = None,
    gateway_port: int | None = None,
) -> LocalStack:
    policy = write_policy(work_dir / "policy.yaml", free_port(), free_port())
    full_env = (otlp_env(otlp_endpoint) if otlp_endpoint else {}) | (env or {})
    return start_local_stack(model_dir, policy, work_dir, gateway_port or free_port(), full_env)


def endpoint_of(stack: LocalStack, pool: str) -> str:
    return next(c.endpoint for c in stack.children if c.pool == pool)


def start_gateway(
    model_dir: Path, policy: Path, port: int, env: dict[str, str] | None = None, log_dir: Path | None = None
):
    """One more gateway process (a replica, or a front gateway), ready when its backends are; stop it with .stop()."""
    import os
    import tempfile

    log_dir = log_dir or Path(tempfile.mkdtemp())
    log_dir.mkdir(parents=True, exist_ok=True)
    url = f"http://127.0.0.1:{port}"
    args = ["gateway", "--model", str(model_dir), "--policy", str(policy), "--port", str(port)]
    full_env = local_env({**os.environ, **(env or {})})
    stack = LocalStack(
        url, [spawn(f"gateway-{port}", None, url, args, log_dir, full_env)], full_env.get("TANDEM_OPS_TOKEN")
    )
    stack.wait_ready()
    return stack


def start_worker_process(args: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """`tandem <args>` (a cloud worker or edge agent), returned once it prints that it is ready."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", *args],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + 60
    while "worker ready" not in (line := process.stdout.readline()):
        assert process.poll() is None and time.monotonic() < deadline, line
    return process
