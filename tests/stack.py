"""Start the real processes (cloud worker, edge agent, gateway) on free loopback ports."""

import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import yaml

from tests.conftest import free_port

READY_TIMEOUT_S = 120


@dataclass
class Stack:
    url: str
    cloud_port: int
    edge_port: int
    processes: dict[str, subprocess.Popen] = field(default_factory=dict)
    log_dir: Path | None = None

    def stop(self, name: str | None = None) -> None:
        for proc_name, process in self.processes.items():
            if name in (None, proc_name) and process.poll() is None:
                process.terminate()
                process.wait(timeout=20)

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(self.log_dir.glob("*.log")))


def write_policy(path: Path, cloud_port: int, edge_port: int) -> Path:
    policy = yaml.safe_load((Path(__file__).parents[1] / "policies" / "default.yaml").read_text())
    policy["pools"]["cloud"]["endpoints"] = [f"grpc://127.0.0.1:{cloud_port}"]
    policy["pools"]["edge"]["endpoints"] = [f"grpc://127.0.0.1:{edge_port}"]
    path.write_text(yaml.safe_dump(policy))
    return path


def start_stack(model_dir: Path, work_dir: Path, otlp_endpoint: str | None = None) -> Stack:
    cloud_port, edge_port, gateway_port = free_port(), free_port(), free_port()
    policy = write_policy(work_dir / "policy.yaml", cloud_port, edge_port)
    env = os.environ | {"OTEL_BSP_SCHEDULE_DELAY": "100", "PYTHONUNBUFFERED": "1"}
    if otlp_endpoint:
        env |= {
            "OTEL_TRACES_EXPORTER": "otlp",
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_endpoint,
            "OTEL_EXPORTER_OTLP_INSECURE": "true",
        }
    stack = Stack(f"http://127.0.0.1:{gateway_port}", cloud_port, edge_port, log_dir=work_dir)
    commands = {
        "cloud": ["cloud-worker", "--model", str(model_dir), "--port", str(cloud_port)],
        "edge": [
            "edge-agent",
            "--model",
            str(model_dir),
            "--port",
            str(edge_port),
            "--cache-dir",
            str(work_dir / "edge-cache"),
        ],
        "gateway": ["gateway", "--model", str(model_dir), "--policy", str(policy), "--port", str(gateway_port)],
    }
    for name, args in commands.items():
        log = open(work_dir / f"{name}.log", "w")  # noqa: SIM115 - owned by the child
        stack.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "tandem.cli", *args], stdout=log, stderr=subprocess.STDOUT, env=env
        )
    try:
        _wait_ready(stack)
    except Exception:
        stack.stop()
        raise
    return stack


def _wait_ready(stack: Stack) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for name, process in stack.processes.items():
            if process.poll() is not None:
                raise RuntimeError(f"{name} exited with {process.returncode}:\n{stack.logs()}")
        try:
            body = httpx.get(f"{stack.url}/readyz", timeout=1).json()
            if all(b["healthy"] for b in body["backends"].values()):
                return
        except (httpx.HTTPError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"stack not ready after {READY_TIMEOUT_S} s:\n{stack.logs()}")
