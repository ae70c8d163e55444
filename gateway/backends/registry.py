"""The backends of every pool, one client per endpoint, polled for health and load."""

import asyncio
import logging
from collections.abc import Callable

from gateway.backends.worker_backend import WorkerBackend
from gateway.policy.schema import Policy

log = logging.getLogger(__name__)
BackendFactory = Callable[[str, str, str], WorkerBackend]  # (endpoint, model id, pool kind)


class BackendRegistry:
    def __init__(self, policy: Policy, model_id: str, backend_factory: BackendFactory = WorkerBackend) -> None:
        self._model_id, self._backend_factory = model_id, backend_factory
        self._by_endpoint: dict[str, WorkerBackend] = {}
        self._pools: dict[str, list[WorkerBackend]] = {}
        self.apply(policy)

    def apply(self, policy: Policy) -> None:
        """Point the pools at a policy's endpoints, reusing open channels."""
        for name, pool in policy.pools.items():
            self._pools[name] = [self._backend(url, pool.kind) for url in pool.endpoints]
        self._pools = {name: backends for name, backends in self._pools.items() if name in policy.pools}

    def _backend(self, endpoint: str, pool_kind: str) -> WorkerBackend:
        backend = self._by_endpoint.get(endpoint)
        if backend is None or backend.pool_kind != pool_kind:
            backend = self._by_endpoint[endpoint] = self._backend_factory(endpoint, self._model_id, pool_kind)
        return backend

    def pool(self, name: str) -> list[WorkerBackend]:
        return self._pools.get(name, [])

    def all(self) -> list[WorkerBackend]:
        return list(self._by_endpoint.values())

    async def refresh_all(self) -> None:
        await asyncio.gather(*(b.refresh() for b in self.all()))

    async def poll_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            await self.refresh_all()

    async def close(self) -> None:
        await asyncio.gather(*(b.close() for b in self.all()))
