"""The local stack behind `make up`: demo model, one worker per policy endpoint, gateway.

Workers listen where the policy's pools say (loopback only), so the policy
file is the one place ports are set; the gateway's port is TANDEM_PORT
(default 8000). Ctrl-C or SIGTERM stops every child and waits for it.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import httpx
from rich.console import Console

from gateway.policy.loader import PolicyError, load_policy
from tandem.demo_model import write_demo_checkpoint

console = Console()
READY_TIMEOUT_S = 180.0
STOP_TIMEOUT_S = 10.0


@dataclass
class Child:
    name: str
    process: subprocess.Popen
    log_path: Path

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def _port_is_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex((host, port)) != 0


def _start(name: str, args: list[str], log_dir: Path) -> Child:
    log_path = log_dir / f"{name}.log"
    log_file = open(log_path, "w")  # noqa: SIM115 - the child owns it for its lifetime
    process = subprocess.Popen([sys.executable, "-m", "tandem.cli", *args], stdout=log_file, stderr=subprocess.STDOUT)
    return Child(name, process, log_path)


def _stop(children: list[Child]) -> None:
    for child in children:
        if child.process.poll() is None:
            child.process.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    for child in children:
        try:
            child.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            child.process.kill()
            child.process.wait()


def _wait_ready(url: str, children: list[Child]) -> bool:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        for child in children:
            if child.process.poll() is not None:
                console.print(
                    f"[red]{child.name} exited with code {child.process.returncode}[/red]; last lines of {child.log_path}:"
                )
                console.print(child.tail(), markup=False, highlight=False)
                return False
        try:
            if httpx.get(f"{url}/readyz", timeout=1).json().get("ready") and _all_backends_ready(url):
                return True
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    console.print(f"[red]not ready after {READY_TIMEOUT_S:.0f} s[/red]; logs are in {children[0].log_path.parent}")
    return False


def _all_backends_ready(url: str) -> bool:
    backends = httpx.get(f"{url}/readyz", timeout=1).json()["backends"]
    return all(b["healthy"] for b in backends.values())


def run_stack(state_dir: Path, policy_path: Path) -> int:
    try:
        policy = load_policy(policy_path)
    except PolicyError as exc:
        console.print(f"[red]error:[/red] {exc}", markup=True)
        return 1
    model_dir = state_dir / "models" / "tandem-demo"
    if not (model_dir / "config.json").is_file():
        console.print(f"building the demo model in {model_dir} (first run only)")
        write_demo_checkpoint(model_dir)
    log_dir = state_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    gateway_port = int(os.environ.get("TANDEM_PORT", "8000"))

    workers = []
    for pool_name, pool in policy.pools.items():
        for endpoint in pool.endpoints:
            parsed = urlparse(endpoint)
            command = "cloud-worker" if pool.kind == "cloud" else "edge-agent"
            extra = ["--cache-dir", str(state_dir / "edge")] if pool.kind == "edge" else []
            args = [command, "--model", str(model_dir), "--host", parsed.hostname, "--port", str(parsed.port), *extra]
            workers.append((f"{pool_name}-{parsed.port}", args, parsed.port))
    busy = [port for port in [gateway_port, *(port for _, _, port in workers)] if not _port_is_free("127.0.0.1", port)]
    if busy:
        console.print(
            f"[red]error:[/red] port(s) {busy} already in use (another `make up`?). Stop it, or set TANDEM_PORT / edit {policy_path}."
        )
        return 1

    children = [_start(name, args, log_dir) for name, args, _ in workers]
    children.append(
        _start(
            "gateway",
            ["gateway", "--model", str(model_dir), "--policy", str(policy_path), "--port", str(gateway_port)],
            log_dir,
        )
    )
    url = f"http://127.0.0.1:{gateway_port}"
    stop_requested = False

    def _on_sigterm(signum, frame):
        nonlocal stop_requested
        stop_requested = True
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with console.status("starting gateway, cloud worker and edge agent…"):
            ready = _wait_ready(url, children)
        if not ready:
            return 1
        _print_banner(url, log_dir, policy_path)
        while all(c.process.poll() is None for c in children):
            time.sleep(0.5)
        dead = next(c for c in children if c.process.poll() is not None)
        console.print(f"[red]{dead.name} stopped (code {dead.process.returncode})[/red]; last lines:")
        console.print(dead.tail(), markup=False, highlight=False)
        return 1
    except KeyboardInterrupt:
        console.print("\nstopping…")
        return 0
    finally:
        _stop(children)
        if not stop_requested:
            console.print("stopped.")


def _print_banner(url: str, log_dir: Path, policy_path: Path) -> None:
    body_private = json.dumps(
        {
            "model": "tandem-demo",
            "messages": [{"role": "user", "content": "My card is 4111 1111 1111 1111. Is it safe?"}],
            "max_tokens": 16,
            "metadata": {"privacy": "pii"},
        }
    )
    long_text = "Summarise this document. " + "The gateway routes each request to the right place. " * 60
    body_long = json.dumps(
        {"model": "tandem-demo", "messages": [{"role": "user", "content": long_text}], "max_tokens": 16}
    )
    console.print(f"\n[bold green]Tandem is up[/bold green] at [bold]{url}[/bold] (OpenAI API under {url}/v1)")
    console.print(f"policy: {policy_path}   logs: {log_dir}/   Ctrl-C stops everything\n")
    console.print("A private request (answered on the edge):", style="bold")
    console.print(
        f"curl -si {url}/v1/chat/completions -H 'Content-Type: application/json' -d '{body_private}'\n",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    console.print("A long request (answered in the cloud):", style="bold")
    console.print(
        f"curl -si {url}/v1/chat/completions -H 'Content-Type: application/json' -d '{body_long}'\n",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    console.print("The X-Tandem-Route response header says where each went and which rule sent it there.")
