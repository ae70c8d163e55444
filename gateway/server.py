"""`tandem gateway`: run the FastAPI app under uvicorn with tracing."""

import sys

import uvicorn

from gateway.config import Settings
from gateway.main import ConfigError, create_app, load_tenants
from gateway.tenants import TenantsError
from tandem.telemetry import setup_tracing, shutdown_tracing


def run(settings: Settings, log_level: str = "info") -> None:
    try:
        load_tenants(settings)  # refuse before binding the port, with the reason
    except (ConfigError, TenantsError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
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
