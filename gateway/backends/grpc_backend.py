"""A Tandem worker (cloud or edge) over the `Worker` gRPC service."""

from collections.abc import AsyncIterator
from urllib.parse import urlparse

import grpc
from opentelemetry.instrumentation.grpc import aio_client_interceptors, filters

from gateway.backends.circuit_breaker import CircuitBreaker
from gateway.backends.worker_backend import BackendError, WorkerBackend
from proto.gen import worker_pb2, worker_pb2_grpc

STATS_TIMEOUT_S = 1.0
# gRPC's own reconnect backoff grows towards two minutes: a worker restarted after an outage would wait that
# long for its first health poll. One second at most.
CHANNEL_OPTIONS = [("grpc.initial_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 1000)]


class GrpcWorkerBackend(WorkerBackend):
    def __init__(self, endpoint: str, model_id: str, pool_kind: str, breaker: CircuitBreaker | None = None) -> None:
        super().__init__(endpoint, model_id, pool_kind, breaker)
        parsed = urlparse(endpoint)
        self._channel = grpc.aio.insecure_channel(
            f"{parsed.hostname}:{parsed.port}",
            options=CHANNEL_OPTIONS,
            interceptors=aio_client_interceptors(filter_=filters.negate(filters.method_name("Stats"))),
        )
        self._stub = worker_pb2_grpc.WorkerStub(self._channel)

    async def _fetch_stats(self) -> worker_pb2.StatsReply:
        try:
            return await self._stub.Stats(worker_pb2.StatsRequest(), timeout=STATS_TIMEOUT_S)
        except grpc.aio.AioRpcError as exc:
            raise BackendError(self.endpoint, exc.code(), exc.details() or "") from exc

    async def _stream(
        self, request: worker_pb2.GenerateRequest, timeout_s: float
    ) -> AsyncIterator[worker_pb2.GenerateChunk]:
        call = self._stub.Generate(request, timeout=timeout_s)
        try:
            async for chunk in call:
                yield chunk
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.UNAVAILABLE:
                self._set_problem(f"UNAVAILABLE: {exc.details()}")
            raise BackendError(self.endpoint, exc.code(), exc.details() or "") from exc
        finally:
            call.cancel()  # no-op when finished; tells the worker to free the sequence otherwise

    async def close(self) -> None:
        await self._channel.close()
