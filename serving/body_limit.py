"""Refuse a request body over the limit before anything parses it (413, OpenAI's error shape), and one sent
compressed (415 naming Content-Encoding: nothing here decompresses, and a gzip body was a 400 about JSON encodings
while a `Content-Encoding: br` on a plain one was ignored).

A pure ASGI middleware: it reads the body as it arrives (Content-Length, when
given, is checked first), stops at the limit, and hands the buffered body on.
Later `receive` calls go to the server, so a client's disconnect still reaches
a streaming response.
"""

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
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        max_bytes = self.max_bytes
        headers = dict(scope["headers"])
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding not in (b"identity", b""):
            shown = encoding.decode("latin-1")[:32]
            message = f"Content-Encoding {shown!r} is not supported: send the request body uncompressed"
            await _refuse(send, 415, message, "Content-Encoding", "unsupported_content_encoding")
            return
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_bytes):
            await self._too_large(send, declared.decode(errors="replace"), max_bytes)
            return
        chunks, total = [], 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return  # the client left before sending its body
            chunks.append(message.get("body", b""))
            total += len(chunks[-1])
            if total > max_bytes:
                await self._too_large(send, f"more than {total}", max_bytes)
                return
            if not message.get("more_body", False):
                break
        await self.app(scope, replayed(b"".join(chunks), receive), send)

    async def _too_large(self, send: Send, size: str, max_bytes: int) -> None:
        message = f"request body is {size} bytes; this server takes at most {max_bytes} ({self.setting})"
        await _refuse(send, 413, message, None, "request_too_large")


async def _refuse(send: Send, status: int, message: str, param: str | None, code: str) -> None:
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": param, "code": code}}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


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
