"""CORS, for the origins `TANDEM_CORS_ORIGINS` names: none by default, so a page on another origin cannot call the
API from a browser until an operator opens it in so many words (a browser app with openai-node's
`dangerouslyAllowBrowser`, a playground). Preflights are answered before the API key is asked for, as browsers send
them without one; the requests that follow need their key as any other."""

from collections.abc import Callable

from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send

# What a browser page may read of an answer besides the body: the ids a client reports, and when to retry.
EXPOSED_HEADERS = ["X-Request-Id", "X-Trace-Id", "Retry-After"]


class CorsForConfiguredOrigins:
    def __init__(self, app: ASGIApp, origins: Callable[[], list[str]]) -> None:
        """`origins`: read on each request (the gateway's settings exist once its lifespan has run)."""
        self.app, self._origins = app, origins
        self._built: tuple[tuple[str, ...], CORSMiddleware] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origins = tuple(self._origins()) if scope["type"] == "http" else ()
        if not origins:
            await self.app(scope, receive, send)
            return
        if self._built is None or self._built[0] != origins:
            cors = CORSMiddleware(
                self.app,
                allow_origins=list(origins),
                allow_methods=["GET", "POST"],
                allow_headers=["*"],  # the request's own (openai-node sends x-stainless-* besides Authorization)
                expose_headers=EXPOSED_HEADERS,
                max_age=600,
            )
            self._built = (origins, cors)
        await self._built[1](scope, receive, send)
