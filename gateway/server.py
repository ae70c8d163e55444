"""`tandem gateway`: run the FastAPI app under uvicorn with tracing, and drain it on SIGTERM.

SIGTERM: `/readyz` turns 503 at once, requests are still served for
`TANDEM_DRAIN_DELAY_S` (load balancers see the readiness change and stop
sending), then the listening socket closes (new connections are refused) and
in-flight requests get `TANDEM_SHUTDOWN_GRACE_S` to finish. SIGINT (Ctrl-C), or
a second signal, skips the delay.
"""

import signal
import threading

import uvicorn

from gateway.config import Settings
from gateway.main import create_app
from serving import heap
from serving.telemetry import setup_tracing, shutdown_tracing


def run(settings: Settings, log_level: str = "info") -> None:
    """The gateway until it is stopped; its settings checked already (gateway.lifespan.preflight: `tandem gateway`
    runs it before this, and the lifespan reads them once more)."""
    setup_tracing("tandem-gateway", encode_on_loop=True)  # its spans end on the event loop: encoded there
    app = create_app(settings)
    config = uvicorn_config(app, settings, log_level)
    try:
        _DrainingServer(config, settings.drain_delay_s).run()
    finally:
        shutdown_tracing()


def uvicorn_config(app, settings: Settings, log_level: str = "info") -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_level=log_level,
        access_log=settings.access_log,  # 60-80 µs of the event loop's ~1.3 ms a request, as much as tokenizing
        timeout_graceful_shutdown=settings.shutdown_grace_s,
        http=timed_requests(settings.request_read_timeout_s),
        # uvicorn read X-Forwarded-For from 127.0.0.1 unless told: any local process named the client (a review)
        proxy_headers=bool(settings.forwarded_allow_ips.strip()),
        forwarded_allow_ips=settings.forwarded_allow_ips.strip() or None,
    )


MIN_BODY_BYTES_PER_S = 500


def timed_requests(read_timeout_s: float) -> type:
    """uvicorn's HTTP protocol, with a connection closed where a request's line and headers do not arrive within
    `read_timeout_s` of the connection or the request starting, or its body stops coming for that long. uvicorn has
    no such timeout: a connection that sent nothing, headers one a second, or half a body, was held for ever, and a
    thousand of them (before any key is checked) took every file descriptor a desktop gives a process (a review).
    A body that keeps coming is read whole if it comes at MIN_BODY_BYTES_PER_S on average (a 1 MB upload over a slow
    link is; a byte every 29 s is not: `read_timeout_s` plus a second for each MIN_BODY_BYTES_PER_S bytes received,
    as Apache's mod_reqtimeout counts); and while the server itself has paused reading (a pipelined request waiting
    behind an answer), the wait is not the client's."""
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

    class TimedRequests(HttpToolsProtocol):
        _read_timer = None
        _in_body = False
        _body_deadline = 0.0  # loop time: read_timeout_s from the headers, and a second per MIN_BODY_BYTES_PER_S

        def _arm(self) -> None:
            self._disarm()
            delay = read_timeout_s
            if self._in_body:
                delay = max(0.0, min(delay, self._body_deadline - self.loop.time()))
            self._read_timer = self.loop.call_later(delay, self._too_slow)

        def _disarm(self) -> None:
            if self._read_timer is not None:
                self._read_timer.cancel()
                self._read_timer = None

        def _too_slow(self) -> None:
            self._read_timer = None
            if self.flow is not None and self.flow.read_paused:  # the server's own wait, not the client's
                self._body_deadline = max(self._body_deadline, self.loop.time() + read_timeout_s)
                self._arm()
            elif not self.transport.is_closing():
                client = self.client or ("?", 0)
                if self._in_body and self.loop.time() >= self._body_deadline:
                    self.logger.info("%s:%s sent its body slower than %d bytes/s: connection closed", *client,
                                     MIN_BODY_BYTES_PER_S)  # fmt: skip
                else:
                    self.logger.info("%s:%s sent no whole request within %g s: connection closed", *client,
                                     read_timeout_s)  # fmt: skip
                self.transport.close()

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)  # the parser first: the body's bytes in it move the deadline (on_body)
            if self._in_body and not self.transport.is_closing():  # bytes that keep coming: waited for, up to it
                self._arm()

        def on_body(self, body: bytes) -> None:
            # The body's own bytes earn time, not what frames them: a chunked body of chunk extensions or trailers
            # at 600 bytes/s grew no body and held the connection for ever (a review).
            self._body_deadline += len(body) / MIN_BODY_BYTES_PER_S
            super().on_body(body)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_body = False
            self._arm()  # the line and the headers: within read_timeout_s in all

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            self._in_body = True
            self._body_deadline = self.loop.time() + read_timeout_s
            self._arm()

        def on_message_complete(self) -> None:
            self._in_body = False
            self._disarm()
            super().on_message_complete()

        def connection_lost(self, exc) -> None:
            self._disarm()
            super().connection_lost(exc)

    return TimedRequests


class _DrainingServer(uvicorn.Server):
    def __init__(self, config: uvicorn.Config, drain_delay_s: float) -> None:
        super().__init__(config)
        self._drain_delay_s = drain_delay_s
        self._draining = False

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)  # a failed start exits here
        heap.settle()  # start-up's objects out of every later collection (serving/heap.py)

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
