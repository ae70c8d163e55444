"""A load generator's HTTP/1.1 client: one keep-alive connection, one request at a time, nothing else.

The benches compare what a router adds to a request, and their clients share the machine's two cores with the
routers. httpx spends about 1.4 ms of CPU a request here (a 2-vCPU VM), four times what sglang-router itself does,
so a rate measured through it is mostly the client's: every HTTP path topped out at ~200 requests/s while direct
gRPC, through grpc.aio's cheaper client, reached 1,600. This client writes a request's bytes and reads the answer's
(status line, headers, a Content-Length or chunked body) on asyncio streams, 0.3 ms a request, so the rate is the
router's. It speaks only what the benches send: a POST with a JSON body, to one host.
"""

import asyncio
import json
from urllib.parse import urlsplit


class HTTPError(Exception):
    pass


class Connection:
    """`await Connection(url).post(path, body)` -> (status, body bytes); reconnects where the server closed."""

    def __init__(self, base_url: str) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname, parts.port or 80
        self._host_header = f"{self.host}:{self.port}".encode()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def post(self, path: str, body: dict | bytes) -> tuple[int, bytes]:
        payload = body if isinstance(body, bytes) else json.dumps(body).encode()
        head = (
            b"POST " + path.encode() + b" HTTP/1.1\r\nHost: " + self._host_header
            + b"\r\nContent-Type: application/json\r\nContent-Length: " + str(len(payload)).encode() + b"\r\n\r\n"
        )  # fmt: skip
        return await self._exchange(head + payload)

    async def _exchange(self, request: bytes) -> tuple[int, bytes]:
        for attempt in (0, 1):  # a kept-alive connection the server closed meanwhile: once more on a new one
            fresh = self._writer is None
            if fresh:
                self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
            try:
                self._writer.write(request)
                return await self._answer()
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if fresh or attempt:
                    raise
        raise AssertionError("unreachable")

    async def _answer(self) -> tuple[int, bytes]:
        head = await self._reader.readuntil(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        status = int(lines[0].split(b" ", 2)[1])
        length, chunked, closing = None, False, False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding":
                chunked = b"chunked" in value.lower()
            elif name == b"connection":
                closing = value.strip().lower() == b"close"
        if chunked:
            body = await self._chunks()
        elif length is not None:
            body = await self._reader.readexactly(length)
        else:  # no length: the body runs to the connection's end
            body, closing = await self._reader.read(), True
        if closing:
            self.close()
        return status, body

    async def _chunks(self) -> bytes:
        parts = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._trailers()  # the blank line after any trailers
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)

    async def _trailers(self) -> None:
        while await self._reader.readuntil(b"\r\n") != b"\r\n":
            pass

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None


async def post_ok(connection: Connection, path: str, body: dict | bytes) -> bytes:
    """POST and return the body; an HTTPError naming the status and the body's start where it is not 2xx."""
    status, answer = await connection.post(path, body)
    if not 200 <= status < 300:
        raise HTTPError(f"{status}: {answer[:200]!r}")
    return answer
