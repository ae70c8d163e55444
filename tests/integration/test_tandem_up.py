"""`tandem up` (what `make up` runs): builds the demo model, serves, stops cleanly on Ctrl-C."""

import os
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from tests.conftest import free_port
from tests.stack import write_policy

pytestmark = pytest.mark.integration


def is_listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_up_serves_both_routes_and_stops_on_ctrl_c(tmp_path):
    cloud_port, edge_port, gateway_port = free_port(), free_port(), free_port()
    policy = write_policy(tmp_path / "policy.yaml", cloud_port, edge_port)
    process = subprocess.Popen(
        [sys.executable, "-m", "tandem.cli", "up", "--state-dir", str(tmp_path / "state"), "--policy", str(policy)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ | {"TANDEM_PORT": str(gateway_port), "TANDEM_LOCAL_AGENT_PORT": str(free_port()), "COLUMNS": "200"},
    )
    try:
        banner = []
        deadline = time.monotonic() + 120
        while not any("Tandem is up" in line for line in banner):
            assert time.monotonic() < deadline and process.poll() is None, "".join(banner)
            banner.append(process.stdout.readline())
        url = f"http://127.0.0.1:{gateway_port}/v1/chat/completions"
        body = {"model": "tandem-demo", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
        private = httpx.post(url, json=body | {"metadata": {"privacy": "pii"}}, timeout=30)
        assert private.headers["x-tandem-route"] == "edge; rule=private"
        long_body = body | {"messages": [{"role": "user", "content": "tell me more. " * 100}]}
        long = httpx.post(url, json=long_body, headers={"X-Tandem-Device": '{"npu": true}'}, timeout=30)
        assert long.headers["x-tandem-route"] == "cloud; rule=default"
        assert (tmp_path / "state" / "models" / "tandem-demo" / "model.safetensors").is_file()
    finally:
        process.send_signal(signal.SIGINT)
        output, _ = process.communicate(timeout=30)
    assert process.returncode == 0, output
    assert "stopped." in output
    assert not any(is_listening(p) for p in (cloud_port, edge_port, gateway_port))
