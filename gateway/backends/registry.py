"""One client per backend endpoint, polled for health and load, following the live policy.

Requests look backends up by the endpoints of the policy they started with,
so a reload never pulls a backend from under a request: clients that a new
policy drops are closed once idle.

A `dns://name:port` endpoint stands for every address the name resolves to
(a Kubernetes headless Service: one address per ready worker pod). It is
resolved again every `DNS_REFRESH_S`, so workers an autoscaler adds are used
within seconds and removed ones are retired like endpoints a reload drops.
"""

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from urllib.parse import urlparse

from gateway.backends.grpc_backend import GrpcWorkerBackend
from gateway.backends.worker_backend import WorkerBackend
from gateway.policy.schema import GrpcTls, Policy, Pool

log = logging.getLogger(__name__)
BackendFactory = Callable[[str, str, Pool], WorkerBackend]  # (endpoint, model id, pool)
Key = tuple[str, str, str, GrpcTls | None]  # (endpoint, pool kind, model id, how it is dialled)
Resolver = Callable[[str, int], Awaitable[list[str]]]  # (host, port) -> addresses
RETIRE_GRACE_S = 60.0
DNS_REFRESH_S = 5.0


@dataclass(frozen=True)
class PoolBackends:
    """A pool's clients as its requests see them, built once per policy and pool until the backends change
    (listing 256 of them per request, with their endpoint map, was ~60 µs of a routing decision). Read-only."""

    backends: tuple[WorkerBackend, ...]
    labels: Mapping[str, str]  # endpoint -> what callers are shown for it (`backend_label`)
    by_endpoint: Mapping[str, WorkerBackend] = field(init=False)
    worker_ids: tuple[str, ...] = field(init=False)  # each backend's, in order: what a prefix-hint lookup asks about
    positions: Mapping[str, tuple[int, ...]] = field(init=False)  # worker id -> its backends' places in `backends`

    def __post_init__(self) -> None:
        positions: dict[str, tuple[int, ...]] = {}
        for i, b in enumerate(self.backends):
            positions[b.worker_id] = (*positions.get(b.worker_id, ()), i)
        object.__setattr__(self, "by_endpoint", MappingProxyType({b.endpoint: b for b in self.backends}))
        object.__setattr__(self, "worker_ids", tuple(b.worker_id for b in self.backends))
        object.__setattr__(self, "positions", MappingProxyType(positions))


def backend_label(pool_name: str, entry: int, address: int | None = None) -> str:
    """What callers are shown for a backend where its address is not theirs to see (X-Tandem-Backend, explain,
    error messages): its pool and its place in the pool's `endpoints` (`cloud/0`), and for a `dns://` entry the
    place of its address among those the name resolves to, in sorted order (`cloud/1.3`). The same on every
    gateway replica that reads the same policy and DNS answer; it says how many workers a pool has, nothing of
    where they are."""
    return f"{pool_name}/{entry}" if address is None else f"{pool_name}/{entry}.{address}"


async def resolve_addresses(host: str, port: int) -> list[str]:
    """The name's addresses, IPv4 only when it has any (a dual-stack name would list each pod twice)."""
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    v4 = sorted({info[4][0] for info in infos if info[0] == socket.AF_INET})
    return v4 or sorted({info[4][0] for info in infos})


class BackendRegistry:
    def __init__(
        self,
        policy: Policy,
        default_model: str,
        backend_factory: BackendFactory | None = None,
        resolver: Resolver = resolve_addresses,
    ) -> None:
        self._default_model = default_model  # what every pool's workers run when the policy names no models
        self._backend_factory = backend_factory or (
            lambda url, model, pool: GrpcWorkerBackend(url, model, pool.kind, tls=pool.tls)
        )
        self._resolver = resolver
        self._policy = policy
        self._resolved: dict[str, list[str]] = {}  # dns:// endpoint -> grpc://address:port, as last resolved
        self._resolved_at = float("-inf")
        self._live: dict[Key, WorkerBackend] = {}
        self._retiring: dict[Key, WorkerBackend] = {}
        self._pools: dict[str, tuple[Policy, PoolBackends]] = {}  # pool name -> (its policy, its clients)
        self.contexts: dict[str, int] = {}  # model -> the longest context its backends reported (context_of)
        self._mixed_sizes: dict[str, tuple[int, ...]] = {}  # pool -> its healthy backends' block sizes, as last said
        self._applying = asyncio.Lock()
        self._live = {key: self._new(key, pool) for key, pool in self._keys(policy).items()}
        self._name(policy)

    def _name(self, policy: Policy) -> None:
        """Each live client's labels in this policy (one per pool listing it): its log lines and /readyz name it so."""
        named: dict[str, list[str]] = {}
        for name, pool in policy.pools.items():
            for url, label in self._labelled(name, pool):
                named.setdefault(url, []).append(label)
        for key, backend in self._live.items():
            backend.labels = tuple(named.get(key[0], ()))

    def _new(self, key: Key, pool: Pool) -> WorkerBackend:
        return self._backend_factory(key[0], key[2], pool)

    async def apply(self, policy: Policy | None = None) -> None:
        """Follow a new policy (None: the current one, with fresh DNS answers): new backends are polled once before
        any request can see them. One at a time, the current policy read inside: a DNS refresh that overlapped a
        reload raised KeyError (and its poller died with it), or put the reloaded policy's backends back."""
        async with self._applying:
            await self._apply(policy or self._policy)

    async def _apply(self, policy: Policy) -> None:
        self._policy = policy
        await self._resolve(policy)
        wanted = self._keys(policy)
        fresh = {key: self._new(key, pool) for key, pool in wanted.items() if key not in self._live}
        await asyncio.gather(*(b.refresh() for b in fresh.values()))
        dropped = {key: b for key, b in self._live.items() if key not in wanted}
        self._live = {key: self._live.get(key) or fresh[key] for key in wanted}
        self._pools.clear()
        self._name(policy)
        for key, backend in dropped.items():
            self._retiring[key] = backend
            asyncio.get_running_loop().create_task(self._close_when_idle(key, backend))

    async def _close_when_idle(self, key: Key, backend: WorkerBackend) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + RETIRE_GRACE_S
        while backend.inflight and loop.time() < deadline:
            await asyncio.sleep(0.5)
        if self._retiring.get(key) is backend:  # (not a later client of the same key, retired since)
            del self._retiring[key]
            self._pools.clear()
        await backend.close()

    def backends(self, policy: Policy, pool_name: str) -> list[WorkerBackend]:
        """The clients for a pool of the policy a request started with."""
        return list(self.pool(policy, pool_name).backends)

    def pool(self, policy: Policy, pool_name: str) -> PoolBackends:
        """The clients for a pool of the policy a request started with, as routing reads them (kept between
        requests: a reload, a DNS answer or a retired client builds them again)."""
        kept = self._pools.get(pool_name)
        if kept is not None and kept[0] is policy:
            return kept[1]
        pool, model = policy.pools[pool_name], policy.model_of(pool_name, self._default_model)
        labels: dict[str, str] = {}
        for url, label in self._labelled(pool_name, pool):
            labels.setdefault(url, label)  # once each: an address listed and also resolved by DNS
        keys = [(url, pool.kind, model, pool.tls) for url in labels]
        found = (b for key in keys if (b := self._live.get(key) or self._retiring.get(key)) is not None)
        built = PoolBackends(tuple(dict.fromkeys(found)), MappingProxyType(labels))
        self._pools[pool_name] = (policy, built)
        return built

    def all(self) -> list[WorkerBackend]:
        return list(self._live.values())

    async def refresh_all(self) -> None:
        """Poll every backend's health; first re-resolve dns:// endpoints when they are due."""
        if self._has_dns(self._policy) and time.monotonic() - self._resolved_at >= DNS_REFRESH_S:
            await self.apply()
        await asyncio.gather(*(b.refresh() for b in self.all()))
        self.contexts = self._contexts()
        self._say_mixed_block_sizes()

    def _contexts(self) -> dict[str, int]:
        """Per model, the longest context its healthy backends report (a worker's is its model's, or its KV pool's
        where that holds fewer tokens). A model with a healthy backend that reports none (an OpenAI-compatible HTTP
        server), or with no healthy backend, is absent: its checkpoint's context stands. A dead worker's last Stats
        do not count, nor does a server that says nothing bound the others (a review found both)."""
        longest: dict[str, int] = {}
        unbounded: set[str] = set()
        for backend in self.all():
            stats = backend.stats
            if stats is None or backend.problem is not None or stats.model_id != backend.model_id:
                continue
            if stats.max_context_tokens <= 0:
                unbounded.add(backend.model_id)
            else:
                longest[backend.model_id] = max(longest.get(backend.model_id, 0), stats.max_context_tokens)
        return {model: tokens for model, tokens in longest.items() if model not in unbounded}

    def _say_mixed_block_sizes(self) -> None:
        """A pool whose healthy backends report different KV block sizes (a rolling change of `--block-size`) has
        its prompts hashed by the first one's: the others' prefix hints match nothing meanwhile. Said once per
        change (a review: nothing said it)."""
        for name in self._policy.pools:
            backends = self.pool(self._policy, name).backends
            sizes = tuple(sorted({b.block_size_tokens for b in backends if b.is_healthy and b.block_size_tokens}))
            if len(sizes) > 1 and self._mixed_sizes.get(name) != sizes:
                log.warning("pool %s: its backends report KV block sizes %s; prompts are hashed by one of them, so "
                            "the others' prefix hints match nothing until they agree", name, sizes)  # fmt: skip
            self._mixed_sizes[name] = sizes

    def context_of(self, model_id: str, configured: int) -> int:
        """A model's context as this gateway serves it: its checkpoint's, or less where no backend of it can hold
        that many tokens. A worker whose KV pool held 160 tokens refused a 60-token prompt with the default
        max_tokens of 128, which the gateway had sized by the checkpoint's 2,048 (and /v1/models said so: a
        review)."""
        return min(configured, self.contexts.get(model_id, configured))

    @staticmethod
    def _has_dns(policy: Policy) -> bool:
        return any(url.startswith("dns://") for pool in policy.pools.values() for url in pool.endpoints)

    async def _resolve(self, policy: Policy) -> None:
        names = {url for pool in policy.pools.values() for url in pool.endpoints if url.startswith("dns://")}
        for url in names:
            parsed = urlparse(url)
            try:
                addresses = await self._resolver(parsed.hostname, parsed.port)
            except OSError as exc:  # keep the last known addresses: a DNS hiccup must not empty a pool
                log.warning(
                    "cannot resolve %s (%s); keeping %d known address(es)", url, exc, len(self._resolved.get(url, []))
                )
                continue
            found = [f"grpc://{a if ':' not in a else f'[{a}]'}:{parsed.port}" for a in addresses]
            if found != self._resolved.get(url):
                log.info("%s resolves to %s", url, found or "nothing")
            self._resolved[url] = found
        self._resolved_at = time.monotonic()

    def _expand(self, pool: Pool) -> list[str]:
        return [url for url, _ in self._labelled("", pool)]

    def _labelled(self, pool_name: str, pool: Pool) -> list[tuple[str, str]]:
        """The pool's addresses, each with its label (`backend_label`), a `dns://` entry's in the order resolved."""
        out = []
        for i, url in enumerate(pool.endpoints):
            if not url.startswith("dns://"):
                out.append((url, backend_label(pool_name, i)))
                continue
            out.extend((target, backend_label(pool_name, i, j)) for j, target in enumerate(self._resolved.get(url, [])))
        return out

    def _keys(self, policy: Policy) -> dict[Key, Pool]:
        return {
            (url, pool.kind, policy.model_of(name, self._default_model), pool.tls): pool
            for name, pool in policy.pools.items()
            for url in self._expand(pool)
        }

    async def poll_forever(self, interval_s: float) -> None:
        while True:
            await asyncio.sleep(interval_s)
            try:
                await self.refresh_all()
            except Exception:  # noqa: BLE001 - one bad round must not end health polling for the gateway's life
                log.exception("backend health poll failed; polling again in %g s", interval_s)

    async def close(self) -> None:
        await asyncio.gather(*(b.close() for b in [*self._live.values(), *self._retiring.values()]))
