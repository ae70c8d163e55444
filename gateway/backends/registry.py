"""One client per backend endpoint, polled for health and load, following the live policy.

Requests look backends up by the endpoints of the policy they started with,
so a reload never pulls a backend from under a request: clients that a new
policy drops are closed once idle.
"""

import asyncio
import logging
from collections.abc import Callable

from gateway.backends.grpc_backend import GrpcWorkerBackend
from gateway.backends.worker_backend import WorkerBackend
from gateway.policy.schema import Policy, Pool

log = logging.getLogger(__name__)
BackendFactory = Callable[[str, str, Pool], WorkerBackend]  # (endpoint, model id, pool)
RETIRE_GRACE_S = 60.0


class BackendRegistry:
    def __init__(self, policy: Policy, model_id: str, backend_factory: BackendFactory | None = None) -> None:
        self._model_id = model_id
        self._backend_factory = backend_factory or (lambda url, model, pool: GrpcWorkerBackend(url, model, pool.kind))
        self._live: dict[tuple[str, str], WorkerBackend] = {}  # (endpoint, pool kind) -> client
        self._retiring: dict[tuple[str, str], WorkerBackend] = {}
        self._live = {key: self._new(key, pool) for key, pool in _keys(policy).items()}

    def _new(self, key: tuple[str, str], pool: Pool) -> WorkerBackend:
        return self._backend_factory(key[0], self._model_id, pool)

    async def apply(self, policy: Policy) -> None:
        """Follow a new policy: new backends are polled once before any request can see them."""
        wanted = _keys(policy)
        fresh = {key: self._new(key, pool) for key, pool in wanted.items() if key not in self._live}
        await asyncio.gather(*(b.refresh() for b in fresh.values()))
        dropped = {key: b for key, b in self._live.items() if key not in wanted}
        self._live = {key: self._live.get(key) or fresh[key] for key in wanted}
        for key, backend in dropped.items():
            self._retiring[key] = backend
            asyncio.get_running_loop().create_task(self._close_when_idle(key, backend))

    async def _close_when_idle(self, key: tuple[str, str], backend: WorkerBackend) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RETIRE_GRACE_S
        while backend.inflight and loop.time() < deadline:
            await asyncio.sleep(0.5)
        self._retiring.pop(key, None)
        await backend.close()

    def backends(self, pool: Pool) -> list[WorkerBackend]:
        """The clients for a pool of the policy a request started with."""
        keys = [(url, pool.kind) for url in pool.endpoints]
        return [b for key in keys if (b := self._live.get(key) or self._retiring.get(key)) is not None]

    def all(self) -> list[WorkerBackend]:
        return list(self._live.values())

    async def refresh_all(self) -> None:
        await asyncio.gather(*(b.refresh() for b in self.all()))

    async def poll_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.refresh_all()

    async def close(self) -> None:
        await asyncio.gather(*(b.close() for b in [*self._live.values(), *self._retiring.values()]))


def _keys(policy: Policy) -> dict[tuple[str, str], Pool]:
    return {(url, pool.kind): pool for pool in policy.pools.values() for url in pool.endpoints}
