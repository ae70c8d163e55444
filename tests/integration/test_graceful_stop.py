"""SIGTERM under load: readiness turns false first, in-flight streams finish, then new connections are refused."""

import json
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


def held_for(port: int, head: bytes, more: bytes, every_s: float, most_s: float = 6.0) -> float:
    """How long the gateway kept a connection that sent `head`, then `more` every `every_s`, before it hung up."""
    import socket

    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(head)
        sock.settimeout(every_s)
        started = time.monotonic()
        while time.monotonic() - started < most_s:
            try:
                sock.sendall(more)
                if sock.recv(65536) == b"":
                    break
            except TimeoutError:
                continue
            except OSError:  # reset, or a broken pipe: closed too
                break
        return time.monotonic() - started


def test_connections_that_never_finish_a_request_are_closed(demo_checkpoint, tmp_path):
    """Slowloris: a connection that sends nothing, headers one at a time, or half its body, was held for ever (a
    review held a thousand, every file descriptor a desktop gives a process). Now it is closed after
    TANDEM_REQUEST_READ_TIMEOUT_S, and the gateway serves others meanwhile."""
    import socket

    start_stack(demo_checkpoint, tmp_path)
    port = free_port()
    gateway = start_gateway(demo_checkpoint, tmp_path / "policy.yaml", port, {"TANDEM_REQUEST_READ_TIMEOUT_S": "1"})
    try:
        opened = {}
        for kind, first in [
            ("idle", b""),
            ("headers", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"),
            ("body", b'POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n{"model": '),
        ]:
            opened[kind] = socket.create_connection(("127.0.0.1", port))
            opened[kind].sendall(first)
            opened[kind].settimeout(0.3)
        closed, started = set(), time.monotonic()
        while len(closed) < len(opened) and time.monotonic() - started < 6:
            for kind, sock in opened.items():
                if kind in closed:
                    continue
                try:
                    if kind == "headers":
                        sock.sendall(b"X-Slow: 1\r\n")  # one more header now and then: never a whole request
                    if sock.recv(65536) == b"":
                        closed.add(kind)
                except TimeoutError:
                    pass
                except OSError:  # reset: closed too
                    closed.add(kind)
        assert closed == set(opened), f"still open after {time.monotonic() - started:.1f} s: {set(opened) - closed}"
        assert time.monotonic() - started < 4
        assert httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200
        # A body dripped a byte at a time is cut (every byte restarted the timer: held for ever), though bytes come
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n"
        assert held_for(port, head, b" ", every_s=0.3) < 4, "a dripped body was held"
        # Nor do a chunked body's framing bytes earn time: chunk extensions at 3 KB/s, and no body byte (a review)
        head = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n1;"
        assert held_for(port, head, b"x" * 300, every_s=0.1) < 4, "a body of framing alone was held"
        # A body that keeps coming at a slow link's pace is read whole: 3 s for this one (~1 KB/s), the timeout 1 s
        body = json.dumps({"model": "tandem-demo", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        body += " " * 2900  # JSON's own whitespace: a body of 3 KB
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode())  # fmt: skip
        for i in range(0, len(body), len(body) // 10 + 1):
            time.sleep(0.3)
            slow.sendall(body[i : i + len(body) // 10 + 1].encode())
        slow.settimeout(30)
        assert slow.recv(65536).startswith(b"HTTP/1.1 200"), "a slow, steady body was cut"
        slow.close()
    finally:
        gateway.stop()
