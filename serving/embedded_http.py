"""An HTTP app served by uvicorn inside a process whose asyncio loop (and signals) belong to gRPC."""

import contextlib

import uvicorn


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):
        yield  # the gRPC side owns SIGTERM/SIGINT and the shutdown


async def serve_http(app, host: str, port: int) -> None:
    """Serve until cancelled (the worker's `serve` cancels its background task on shutdown)."""
    server = _EmbeddedServer(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    try:
        await server.serve()
    finally:
        server.should_exit = True
