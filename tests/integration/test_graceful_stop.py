"""SIGTERM under load: readiness turns false first, in-flight streams finish, then new connections are refused."""

import signal
import threading
import time

import httpx
import pytest

from tests.conftest import free_port
from tests.stack import start_gateway, start_stack

pytestmark = pytest.mark.integration
STREAM = {"model": "tandem-demo", "max_tokens": 48, "stream": True, "messages": [{"role": "user", "content": "hi"}]}


def test_sigterm_drains_before_it_stops(demo_checkpoint, tmp_path):
    stack = start_stack(demo_checkpoint, tmp_path)  # workers (and a gateway we leave alone)
    port = free_port()
    gateway = start_gateway(demo_checkpoint, tmp_path / "policy.yaml", port, {"TANDEM_DRAIN_DELAY_S": "1.5"})
    url = f"http://127.0.0.1:{port}"
    finished = []

    def stream():
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=STREAM, timeout=30) as reply:
            lines = [line for line in reply.iter_lines() if line]
        finished.append(lines[-1])

    try:
        threads = [threading.Thread(target=stream) for _ in range(4)]
        for t in threads:
            t.start()
        time.sleep(0.05)
        gateway.children[0].process.send_signal(signal.SIGTERM)
        time.sleep(0.2)
        ready = httpx.get(f"{url}/readyz", timeout=5)
        assert ready.status_code == 503 and ready.json() == {"ready": False, "draining": True}
        assert httpx.get(f"{url}/healthz", timeout=5).status_code == 200  # still serving during the delay
        for t in threads:
            t.join(timeout=30)
        assert finished == ["data: [DONE]"] * 4  # every in-flight stream ran to its end
        deadline = time.monotonic() + 10
        while gateway.children[0].process.poll() is None:
            assert time.monotonic() < deadline, "the gateway did not stop"
            time.sleep(0.1)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/healthz", timeout=2)
    finally:
        gateway.stop()
        stack.stop()
