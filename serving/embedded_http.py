"""An HTTP app served by uvicorn inside a process whose asyncio loop (and signals) belong to gRPC."""

import asyncio
import contextlib

import uvicorn


class _EmbeddedServer(uvicorn.Server):
    @contextlib.contextmanager
    def capture_signals(self):
        yield  # the gRPC side owns SIGTERM/SIGINT and the shutdown


async def serve_http(app, host: str, port: int) -> None:
    """Serve until cancelled (the worker's `serve` cancels its background task on shutdown), then stop as uvicorn
    stops: cancelling its task outright threw the cancellation into the app's lifespan, and every clean stop wrote
    an ERROR traceback into the log."""
    from serving.worker_service import shutdown_grace_s  # the gRPC side's grace: one setting for the worker

    grace_s = shutdown_grace_s()
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", timeout_graceful_shutdown=grace_s)
    server = _EmbeddedServer(config)
    serving = asyncio.ensure_future(server.serve())
    try:
        await asyncio.shield(serving)
    except asyncio.CancelledError:
        server.should_exit = True
        with contextlib.suppress(Exception):
            await asyncio.wait_for(serving, grace_s + 3)
        raise
