"""Refuse a request body over the limit before anything parses it (413, OpenAI's error shape), and one sent
compressed (415 naming Content-Encoding: nothing here decompresses, and a gzip body was a 400 about JSON encodings
while a `Content-Encoding: br` on a plain one was ignored).

A pure ASGI middleware: it reads the body as it arrives (Content-Length, when
given, is checked first), stops at the limit, and hands the buffered body on.
Later `receive` calls go to the server, so a client's disconnect still reaches
a streaming response.
"""

import asyncio
import json
from collections.abc import Callable

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class BodyLimit:
    def __init__(
        self, app: ASGIApp, max_bytes: int | Callable[[], int], setting: str = "TANDEM_MAX_BODY_BYTES"
    ) -> None:
        """`max_bytes`: the limit, or a function read on each request (the gateway's comes from its settings,
        which exist once its lifespan has run)."""
        self.app, self._max_bytes, self.setting = app, max_bytes, setting

    @property
    def max_bytes(self) -> int:
        return self._max_bytes() if callable(self._max_bytes) else self._max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        if scope["method"] in ("GET", "HEAD", "OPTIONS") and not _declares_a_body(headers):
            await self.app(scope, receive, send)
            return
        max_bytes = self.max_bytes
        # A client that waits for `100 Continue` before its body (curl past 1 MB, .NET, Java) sends none if answered
        # first: reading would ask it for the body refused (a review: 64 MiB sent for a 413, a whole body for a 415)
        waits = b"100-continue" in headers.get(b"expect", b"").lower()
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding not in (b"identity", b""):
            shown = encoding.decode("latin-1")[:32]
            message = f"Content-Encoding {shown!r} is not supported: send the request body uncompressed"
            await _refuse(receive, send, 415, message, "Content-Encoding", "unsupported_content_encoding", waits=waits)
            return
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_bytes):
            await self._too_large(receive, send, declared.decode(errors="replace"), max_bytes, waits=waits)
            return
        chunks, total = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before sending its body
            chunks.append(message.get("body", b""))
            total += len(chunks[-1])
            if total > max_bytes:
                ended = not message.get("more_body", False)
                await self._too_large(receive, send, f"more than {total}", max_bytes, ended)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, replayed(b"".join(chunks), receive), send)

    async def _too_large(
        self, receive: Receive, send: Send, size: str, max_bytes: int, ended: bool = False, waits: bool = False
    ) -> None:
        message = f"request body is {size} bytes; this server takes at most {max_bytes} ({self.setting})"
        await _refuse(receive, send, 413, message, None, "request_too_large", ended, waits)


# A body refused is read on and dropped this long (and this much) before the answer, as nginx's lingering close: a
# client still sending would have its answer lost to the reset a close with unread data makes. One that has not
# ended by then has its connection closed after the answer: a declared terabyte sent at a trickle held it, read
# and dropped, for as long as the client liked (a review).
LINGER_S = 5.0
LINGER_BYTES = 64 * 2**20


async def _refuse(
    receive: Receive,
    send: Send,
    status: int,
    message: str,
    param: str | None,
    code: str,
    ended: bool = False,
    waits: bool = False,
) -> None:
    """The refusal, once the body has ended or been read on for LINGER_S; `waits`: the client sends no body before
    `100 Continue`, so it is answered at once and its connection closed."""
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    ).encode()
    if not ended and not waits:
        ended = await _drained(receive)
        if ended is None:
            return  # the client left
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    if not ended:
        headers.append((b"connection", b"close"))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _drained(receive: Receive) -> bool | None:
    """Read the rest of the body and drop it, for at most LINGER_S and LINGER_BYTES: True when it ended, False when
    it goes on, None when the client left."""
    loop, dropped = asyncio.get_running_loop(), 0
    deadline = loop.time() + LINGER_S
    while dropped <= LINGER_BYTES and (left := deadline - loop.time()) > 0:
        try:
            message = await asyncio.wait_for(receive(), left)
        except TimeoutError:
            return False
        if message["type"] != "http.request":
            return None
        dropped += len(message.get("body", b""))
        if not message.get("more_body", False):
            return True
    return False


def _declares_a_body(headers: dict[bytes, bytes]) -> bool:
    """A GET, HEAD or OPTIONS that says a body follows (most have none): held to the limit as any request is (a
    review: `GET /healthz` with a terabyte declared was answered, then its body read and dropped for hours)."""
    return headers.get(b"content-length", b"0").strip() not in (b"0", b"") or b"transfer-encoding" in headers


def replayed(body: bytes, receive: Receive) -> Receive:
    """A `receive` that gives `body` (read already) once, then goes to the server's."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed
