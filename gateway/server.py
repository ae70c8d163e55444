"""`tandem gateway`: run the FastAPI app under uvicorn with tracing."""

import uvicorn

from gateway.config import Settings
from gateway.main import create_app
from tandem.telemetry import setup_tracing, shutdown_tracing


def run(settings: Settings, log_level: str = "info") -> None:
    setup_tracing("tandem-gateway")
    try:
        uvicorn.run(
            create_app(settings),
            host=settings.host,
            port=settings.port,
            log_level=log_level,
            timeout_graceful_shutdown=5,
        )
    finally:
        shutdown_tracing()
