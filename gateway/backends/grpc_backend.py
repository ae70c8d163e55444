"""A Tandem worker (cloud or edge) over the `Worker` gRPC service."""

import logging
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import grpc
from opentelemetry import trace
from opentelemetry.propagate import inject

from gateway.backends.circuit_breaker import CircuitBreaker
from gateway.backends.worker_backend import BackendError, WorkerBackend
from gateway.policy.schema import GrpcTls
from proto.gen import worker_pb2, worker_pb2_grpc
from serving import spans

log = logging.getLogger(__name__)
STATS_TIMEOUT_S = 1.0
_SERVICE = worker_pb2.DESCRIPTOR.services_by_name["Worker"].full_name
GENERATE = f"/{_SERVICE}/Generate"
tracer = spans.get_tracer(__name__)  # the SDK's spans at a fraction of their cost (serving/spans.py)
# gRPC's own reconnect backoff grows towards two minutes: a worker restarted after an outage would wait that
# long for its first health poll. One second at most.
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 1000)]


_GENERATE_ATTRIBUTES = {
    "rpc.system": "grpc",
    "rpc.service": _SERVICE,
    "rpc.method": "Generate",
    "rpc.grpc.status_code": grpc.StatusCode.OK.value[0],
}


class GrpcWorkerBackend(WorkerBackend):
    def __init__(
        self,
        endpoint: str,
        model_id: str,
        pool_kind: str,
        breaker: CircuitBreaker | None = None,
        tls: GrpcTls | None = None,
    ) -> None:
        super().__init__(endpoint, model_id, pool_kind, breaker)
        parsed = urlparse(endpoint)
        host = f"[{parsed.hostname}]" if ":" in (parsed.hostname or "") else parsed.hostname  # an IPv6 address
        target = f"{host}:{parsed.port}"
        self._unreadable: str | None = None  # why this client has no channel: its TLS files went missing
        if tls is None:
            self._channel = grpc.aio.insecure_channel(target, options=CHANNEL_OPTIONS)
        else:  # the files are read here, once per client: a pool's new certificates take a reload that changes it
            try:
                roots, key, chain = tls.read()
            except OSError as exc:  # gone since the policy loaded (a secret swapped): no channel, never plaintext
                self._unreadable = f"TLS files unreadable since the policy loaded: {exc}"
                log.error(
                    "%s: %s; it gets no requests until a reload or restart reads them", endpoint, self._unreadable
                )
                self._channel = None
                return
            credentials = grpc.ssl_channel_credentials(
                root_certificates=roots, private_key=key, certificate_chain=chain
            )
            name = [("grpc.ssl_target_name_override", tls.server_name)] if tls.server_name else []
            self._channel = grpc.aio.secure_channel(target, credentials, options=CHANNEL_OPTIONS + name)
        self._stub = worker_pb2_grpc.WorkerStub(self._channel)

    async def _fetch_stats(self) -> worker_pb2.StatsReply:
        if self._unreadable is not None:
            raise BackendError(self.endpoint, grpc.StatusCode.UNAVAILABLE, self._unreadable)
        try:
            return await self._stub.Stats(worker_pb2.StatsRequest(), timeout=STATS_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise BackendError(self.endpoint, exc.code(), exc.details() or "") from exc

    async def _stream(
        self, request: worker_pb2.GenerateRequest, timeout_s: float
    ) -> AsyncIterator[worker_pb2.GenerateChunk]:
        # The RPC's client span, and its context in the call's metadata (W3C traceparent), made here rather than by
        # OpenTelemetry's gRPC interceptor: grpc.aio runs an intercepted call through an extra task and wrapper
        # objects, about a tenth of the gateway's CPU per request (bench/gateway_overhead.py, docs/benchmarks.md).
        # The span is the one that interceptor makes (name, kind, rpc.* attributes); Stats polls stay untraced.
        if self._unreadable is not None:
            raise BackendError(self.endpoint, grpc.StatusCode.UNAVAILABLE, self._unreadable)
        span = tracer.start_span(GENERATE, kind=trace.SpanKind.CLIENT, attributes=_GENERATE_ATTRIBUTES)
        carrier: dict[str, str] = {}
        inject(carrier, context=trace.set_span_in_context(span))
        # No deadline on the call: `WorkerBackend.generate` counts the worker's time only, not the time this gateway
        # waits on a client that reads slowly (a deadline on the whole call blamed the worker for it).
        call = self._stub.Generate(request, metadata=tuple(carrier.items()))
        try:
            async for chunk in call:
                yield chunk
        except grpc.aio.AioRpcError as exc:
            span.set_attribute("rpc.grpc.status_code", exc.code().value[0])
            span.set_status(trace.StatusCode.ERROR, f"{exc.code().name}: {exc.details()}")
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                self._set_problem(f"UNAVAILABLE: {exc.details()}")
            raise BackendError(self.endpoint, exc.code(), exc.details() or "") from exc
        finally:
            call.cancel()  # no-op when finished; tells the worker to free the sequence otherwise
            span.end()

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
