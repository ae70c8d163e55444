"""A real WorkerBackend (privacy guard, breaker and all) whose wire is scripted per endpoint."""

import asyncio

import grpc

from gateway.backends.registry import BackendRegistry
from gateway.backends.worker_backend import BackendError, WorkerBackend
from proto.gen import worker_pb2

OK, FAIL, SLOW, REJECT, STALL, SLOW_START = "ok", "fail", "slow", "reject", "stall", "slow_start"


class ScriptedBackend(WorkerBackend):
    behaviour: dict[str, str]  # endpoint -> OK | FAIL | SLOW | REJECT | STALL | SLOW_START
    reported_kind: dict[str, str]
    wire_log: list[tuple[str, str, str, bool]]

    def __init__(self, endpoint: str, model_id: str, pool_kind: str, breaker=None) -> None:
        super().__init__(endpoint, model_id, pool_kind, breaker)
        self.stats = worker_pb2.StatsReply(model_id=model_id, kind=self.reported_kind.get(endpoint, pool_kind))

    async def _fetch_stats(self):
        return self.stats

    async def _stream(self, request, timeout_s):
        self.wire_log.append((self.endpoint, self.pool_kind, self.stats.kind, request.private))
        behaviour = self.behaviour.get(self.endpoint, OK)
        if behaviour == FAIL:
            where = self.endpoint.removeprefix("grpc://")  # as gRPC's own message names the address it dialled
            raise BackendError(
                self.endpoint, grpc.StatusCode.UNAVAILABLE, f"scripted failure; last error: ipv4:{where}: refused"
            )
        if behaviour == REJECT:
            raise BackendError(self.endpoint, grpc.StatusCode.INVALID_ARGUMENT, "scripted rejection")
        if behaviour == SLOW:
            await asyncio.sleep(10)
        if behaviour == SLOW_START:  # answers, after a fifth of a second
            await asyncio.sleep(0.2)
        if behaviour == STALL:  # a first token, then silence: hung mid-answer, not dead
            yield worker_pb2.GenerateChunk(token_ids=[1], text="x")
            await asyncio.sleep(10)
        yield worker_pb2.GenerateChunk(token_ids=[1], text="x", finish_reason="length")


def scripted(behaviour: dict[str, str], reported_kind: dict[str, str] | None = None, **breaker):
    """A backend factory whose backends share one wire log (factory.wire_log)."""
    from gateway.backends.circuit_breaker import CircuitBreaker

    cls = type(
        "Backend", (ScriptedBackend,), {"behaviour": behaviour, "reported_kind": reported_kind or {}, "wire_log": []}
    )

    def factory(endpoint, model_id, pool):
        pool_kind = pool if isinstance(pool, str) else pool.kind
        return cls(endpoint, model_id, pool_kind, CircuitBreaker(**breaker) if breaker else None)

    factory.wire_log = cls.wire_log
    return factory


def registry_for(policy, factory) -> BackendRegistry:
    return BackendRegistry(policy, "m", backend_factory=factory)
