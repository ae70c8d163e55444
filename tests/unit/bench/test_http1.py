"""bench/http1.py, the client bench/gateway_overhead.py measures every HTTP path through, against a local asyncio
server answering as uvicorn, Starlette's streamed responses and a closing server do."""

import asyncio
import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location("http1", Path(__file__).resolve().parents[3] / "bench" / "http1.py")
http1 = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(http1)


async def serve(answers: list[bytes]):
    """A server that reads each request whole and writes the next canned answer; returns it and what it read."""
    seen: list[bytes] = []
    connections = []

    async def handle(reader, writer):
        connections.append(writer)
        while answers:
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(next(line for line in head.split(b"\r\n") if line.lower().startswith(b"content-length"))
                         .split(b":")[1])  # fmt: skip
            seen.append(head + await reader.readexactly(length))
            answer = answers.pop(0)
            writer.write(answer)
            await writer.drain()
            if b"Connection: close" in answer:
                writer.close()
                return

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, seen, connections


async def test_lengths_chunks_and_a_closed_connection():
    answers = [
        b'HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{"ok":true}',
        b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4;ext=1\r\n{"a"\r\n3\r\n:1}\r\n0\r\nX-T: 1\r\n\r\n',
        b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
    ]
    server, seen, connections = await serve(answers)
    port = server.sockets[0].getsockname()[1]
    async with server:
        client = http1.Connection(f"http://127.0.0.1:{port}")
        assert await http1.post_ok(client, "/v1/completions", {"prompt": "東京 ✓"}) == b'{"ok":true}'
        assert await http1.post_ok(client, "/generate", b"{}") == b'{"a":1}'  # chunk extensions and trailers
        with pytest.raises(http1.HTTPError, match="503: b'busy'"):
            await http1.post_ok(client, "/x", b"{}")
        assert await http1.post_ok(client, "/y", b"{}") == b"ok"  # on a new connection: the server closed the last
        client.close()
    assert len(connections) == 2  # kept alive across the first three answers
    assert seen[0].startswith(b"POST /v1/completions HTTP/1.1\r\n") and seen[0].endswith(
        b'{"prompt": "\\u6771\\u4eac \\u2713"}'
    )
    assert b"Content-Length: 2\r\n" in seen[1]
