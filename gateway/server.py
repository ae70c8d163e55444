"""`tandem gateway`: run the FastAPI app under uvicorn with tracing, and drain it on SIGTERM.

SIGTERM: `/readyz` turns 503 at once, requests are still served for
`TANDEM_DRAIN_DELAY_S` (load balancers see the readiness change and stop
sending), then the listening socket closes (new connections are refused) and
in-flight requests get `TANDEM_SHUTDOWN_GRACE_S` to finish. SIGINT (Ctrl-C), or
a second signal, skips the delay.
"""

import signal
import sys
import threading

import uvicorn

from gateway.config import Settings
from gateway.lifespan import ConfigError, preflight
from gateway.main import create_app
from serving.telemetry import setup_tracing, shutdown_tracing


def run(settings: Settings, log_level: str = "info") -> None:
    try:
        preflight(settings)  # refuse before binding the port, with the reason (the lifespan reads them once more)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    setup_tracing("tandem-gateway")
    app = create_app(settings)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        timeout_graceful_shutdown=settings.shutdown_grace_s,
    )
    try:
        _DrainingServer(config, settings.drain_delay_s).run()
    finally:
        shutdown_tracing()


class _DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain_delay_s: float) -> None:
        super().__init__(config)
        self._drain_delay_s = drain_delay_s
        self._draining = False

    def handle_exit(self, sig: int, frame) -> None:
        state = getattr(self.config.app.state, "gateway", None)
        if state is not None:
            state.draining = True  # /readyz says so from now on
        if sig == signal.SIGTERM and not self._draining and self._drain_delay_s > 0:
            self._draining = True
            timer = threading.Timer(self._drain_delay_s, super().handle_exit, (sig, frame))
            timer.daemon = True
            timer.start()
            return
        super().handle_exit(sig, frame)
