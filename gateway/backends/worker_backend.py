"""One backend as the gateway sees it: health, circuit breaker, and the privacy guard.

Subclasses supply the wire (`_fetch_stats`, `_stream`): `GrpcWorkerBackend` for
Tandem workers, `HttpWorkerBackend` for OpenAI-compatible servers. Errors use
gRPC status codes as their one vocabulary.
"""

import logging
from collections.abc import AsyncIterator

import grpc

from gateway import metrics, privacy
from gateway.backends.circuit_breaker import CircuitBreaker
from gateway.routing.candidate import RECENT_WINDOW_S, Candidate
from proto.gen import worker_pb2
from serving.sliding_count import SlidingCount

log = logging.getLogger(__name__)
STATS_TIMEOUT_S = 1.0
# Statuses that say the request never ran or the worker is gone: try another backend.
RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.FAILED_PRECONDITION,  # the worker runs another model than the request's (serving/worker_service.py)
}


class BackendError(Exception):
    def __init__(self, endpoint: str, code: grpc.StatusCode, details: str) -> None:
        super().__init__(f"{endpoint}: {code.name}: {details}")
        self.endpoint, self.code, self.details = endpoint, code, details

    @property
    def is_retryable(self) -> bool:
        """A failure of the backend, worth another backend; the request's own fault (a bad value, a message
        over the size limit) is not: it would fail everywhere, and it says nothing about the backend."""
        return self.code in RETRYABLE and not self.is_request_fault

    @property
    def is_request_fault(self) -> bool:
        too_large = self.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in self.details
        return too_large or self.code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE)


class WorkerBackend:
    def __init__(self, endpoint: str, model_id: str, pool_kind: str, breaker: CircuitBreaker | None = None) -> None:
        self.endpoint, self.model_id, self.pool_kind = endpoint, model_id, pool_kind
        self.breaker = breaker or CircuitBreaker()
        self.problem: str | None = None  # why it is unhealthy; None (optimistic) until a poll or call says otherwise
        self.stats: worker_pb2.StatsReply | None = None
        self.inflight = 0
        # The gauge reads the count when scraped: no second counter to keep in step on every request.
        metrics.BACKEND_INFLIGHT.labels(endpoint).set_function(lambda: self.inflight)
        self._sent = SlidingCount(RECENT_WINDOW_S)  # requests this gateway sent it lately

    @property
    def is_healthy(self) -> bool:
        return self.problem is None

    @property
    def block_size_tokens(self) -> int:
        """Its KV block size as it reports it (Stats); 0 until heard from."""
        return self.stats.block_size_tokens if self.stats else 0

    def candidate(self, prompt_blocks: int = 0, prefix_match_blocks: int = 0, prefix_recent: int = 0) -> Candidate:
        """A snapshot for routing, with this request's prefix match when the caller looked it up (built with it,
        not copied after: a copy per candidate was ~1 µs each at 256 workers)."""
        s = self.stats
        return Candidate(
            endpoint=self.endpoint,
            is_healthy=self.is_healthy and self.breaker.can_send(),
            kind=s.kind if s else None,
            queue_depth=s.queue_depth if s else 0,
            inflight=self.inflight,
            running=s.running if s else 0,
            kv_blocks_used=s.kv_blocks_used if s else 0,
            kv_blocks_total=s.kv_blocks_total if s else 0,
            block_size_tokens=s.block_size_tokens if s else 0,
            prompt_blocks=prompt_blocks,
            prefix_match_blocks=prefix_match_blocks,
            recent_requests=self._sent.count(),
            prefix_recent_requests=prefix_recent,
        )

    async def refresh(self) -> None:
        try:
            self.stats = await self._fetch_stats()
        except BackendError as exc:
            self._set_problem(f"{exc.code.name}: {exc.details}")
            return
        if self.stats.model_id != self.model_id:
            # Its tokenizer may differ from ours: the token ids we send would mean other text.
            self._set_problem(f"serves model {self.stats.model_id!r}, this gateway serves {self.model_id!r}")
        else:
            self._set_problem(None)

    def _set_problem(self, problem: str | None) -> None:
        if problem != self.problem:
            if problem is None:
                log.info("backend %s is healthy", self.endpoint)
            else:
                log.warning("backend %s unhealthy: %s", self.endpoint, problem)
        self.problem = problem

    async def generate(
        self, request: worker_pb2.GenerateRequest, timeout_s: float
    ) -> AsyncIterator[worker_pb2.GenerateChunk]:
        """Stream the worker's chunks; closing this iterator cancels the RPC."""
        # The last check before the wire. Routing never gets here; if it ever does, fail closed.
        privacy.check_before_wire(
            request.private, self.pool_kind, self.stats.kind if self.stats else None, self.endpoint
        )
        if not self.breaker.try_acquire():
            raise BackendError(
                self.endpoint, grpc.StatusCode.UNAVAILABLE, "circuit breaker open after repeated failures"
            )
        self.inflight += 1
        self._sent.add()
        answered = failed = False
        try:
            async for chunk in self._stream(request, timeout_s):
                if not answered:
                    answered = True
                    self.breaker.record_success()
                yield chunk
        except BackendError as exc:
            if exc.is_retryable and exc.code != grpc.StatusCode.CANCELLED:
                failed = True
                self.breaker.record_failure()
            raise
        finally:
            self.inflight -= 1
            if not answered and not failed:
                self.breaker.release()  # left before any answer (client gone, or our deadline): no verdict

    async def _fetch_stats(self) -> worker_pb2.StatsReply:
        raise NotImplementedError

    def _stream(self, request: worker_pb2.GenerateRequest, timeout_s: float) -> AsyncIterator[worker_pb2.GenerateChunk]:
        raise NotImplementedError

    async def close(self) -> None:
        """Release connections."""
