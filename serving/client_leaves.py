"""A non-streamed answer's work stops when its client leaves: the gateway's and the engine's OpenAI routes.

A streamed answer is cancelled by its response when the client goes; a non-streamed one ran to its last token,
holding KV blocks and (in the gateway) the tenant's slot, and on a device its one-at-a-time engine: abandoned
calls after an app's timeouts queued up (a review: 8 of them made the next 5-token request wait 3.5 s).
"""

import asyncio
from collections.abc import Awaitable
from contextlib import suppress
from typing import TypeVar

from starlette.requests import Request
from starlette.responses import Response

T = TypeVar("T")


async def unless_the_client_leaves(request: Request, work: Awaitable[T]) -> T | None:
    """The work's result; None once the client has disconnected, the work cancelled, and with it the engine's or
    the workers' generation (closing an answer's stream cancels it)."""
    answer = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait((answer, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not answer.done():
            answer.cancel()
        gone.cancel()
    if not answer.cancelled() and answer.done():
        return answer.result()
    with suppress(asyncio.CancelledError):
        await answer
    return None


async def _disconnected(request: Request) -> None:
    """Returns when the client has gone: the server's next message after the body is `http.disconnect`."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def client_gone() -> Response:
    return Response(status_code=499)  # nginx's "client closed request": no one reads it; the span records it
