"""dns://name:port endpoints: one backend per address the name resolves to, followed as it changes."""

import asyncio

import pytest

from gateway.backends import registry as registry_module
from gateway.backends.registry import BackendRegistry, resolve_addresses
from gateway.backends.worker_backend import WorkerBackend
from gateway.policy.loader import PolicyError, parse_policy
from proto.gen import worker_pb2

POLICY = """
version: 1
pools:
  edge: {kind: edge, endpoints: ["grpc://127.0.0.1:50061"]}
  cloud: {kind: cloud, endpoints: ["dns://workers.tandem.svc:50051"]}
rules:
  - {name: private, match: {privacy: [private, pii, confidential]}, route: edge, fallback: []}
  - {name: default, route: cloud}
"""


class Answering(WorkerBackend):
    """A backend whose Stats call answers at once: these tests are about which backends exist."""

    async def _fetch_stats(self) -> worker_pb2.StatsReply:
        return worker_pb2.StatsReply(model_id=self.model_id, kind=self.pool_kind)


class Dns:
    def __init__(self, *addresses: str) -> None:
        self.addresses, self.fail = list(addresses), False

    async def __call__(self, host: str, port: int) -> list[str]:
        assert (host, port) == ("workers.tandem.svc", 50051)
        if self.fail:
            raise OSError("Temporary failure in name resolution")
        return self.addresses


def make(dns: Dns) -> tuple[BackendRegistry, object]:
    policy = parse_policy(POLICY, "test")
    registry = BackendRegistry(policy, "m", lambda url, model, pool: Answering(url, model, pool.kind), dns)
    return registry, policy


def endpoints(registry: BackendRegistry, policy, pool: str) -> list[str]:
    return [b.endpoint for b in registry.backends(policy, pool)]


async def test_a_dns_endpoint_becomes_one_backend_per_address(monkeypatch):
    monkeypatch.setattr(registry_module, "DNS_REFRESH_S", 0.0)
    dns = Dns("10.0.0.7", "10.0.0.5")
    registry, policy = make(dns)
    assert endpoints(registry, policy, "cloud") == []  # nothing known before the first resolution
    await registry.refresh_all()
    assert endpoints(registry, policy, "cloud") == ["grpc://10.0.0.7:50051", "grpc://10.0.0.5:50051"]
    assert endpoints(registry, policy, "edge") == ["grpc://127.0.0.1:50061"]

    dns.addresses = ["10.0.0.5", "10.0.0.9"]  # the autoscaler replaced a pod
    await registry.refresh_all()
    assert endpoints(registry, policy, "cloud") == ["grpc://10.0.0.5:50051", "grpc://10.0.0.9:50051"]
    assert "grpc://10.0.0.7:50051" not in [b.endpoint for b in registry.all()]  # retired once idle

    dns.fail = True  # a DNS outage keeps the last known workers instead of emptying the pool
    await registry.refresh_all()
    assert endpoints(registry, policy, "cloud") == ["grpc://10.0.0.5:50051", "grpc://10.0.0.9:50051"]
    await registry.close()


async def test_resolution_waits_for_its_interval():
    dns = Dns("10.0.0.5")
    registry, policy = make(dns)
    await registry.refresh_all()
    dns.addresses = ["10.0.0.6"]
    await registry.refresh_all()  # within DNS_REFRESH_S of the last resolution: not asked again
    assert endpoints(registry, policy, "cloud") == ["grpc://10.0.0.5:50051"]
    await registry.close()


async def test_a_dns_refresh_overlapping_a_reload_neither_fails_nor_undoes_it(monkeypatch):
    """The health poller re-resolves dns:// names while the policy watcher may be applying a reload: the two ran
    interleaved, and the refresh raised KeyError (which ended the poller) or put the old policy's backends back."""
    monkeypatch.setattr(registry_module, "DNS_REFRESH_S", 0.0)

    class SlowDns(Dns):
        async def __call__(self, host: str, port: int) -> list[str]:
            await asyncio.sleep(0.05)
            return await super().__call__(host, port)

    registry, _ = make(SlowDns("10.0.0.7"))
    refresh = asyncio.create_task(registry.refresh_all())  # as the poller does, every interval
    await asyncio.sleep(0.01)  # it is waiting for DNS now
    reloaded = parse_policy(POLICY.replace("dns://workers.tandem.svc:50051", "grpc://10.0.0.2:50051"), "test")
    await registry.apply(reloaded)
    await refresh
    assert endpoints(registry, reloaded, "cloud") == ["grpc://10.0.0.2:50051"]
    assert sorted(b.endpoint for b in registry.all()) == ["grpc://10.0.0.2:50051", "grpc://127.0.0.1:50061"]
    await registry.close()


async def test_a_failed_poll_round_does_not_end_polling(monkeypatch):
    registry, _ = make(Dns("10.0.0.7"))
    rounds = []

    async def refresh_all():
        rounds.append(1)
        if len(rounds) == 1:
            raise RuntimeError("a bug in one round")

    monkeypatch.setattr(registry, "refresh_all", refresh_all)
    poller = asyncio.create_task(registry.poll_forever(0.005))
    async with asyncio.timeout(5):  # (a poller that died never gets there)
        while len(rounds) < 3:
            await asyncio.sleep(0.005)
    poller.cancel()
    await registry.close()


async def test_the_real_resolver_prefers_ipv4():
    assert await resolve_addresses("localhost", 50051) == ["127.0.0.1"]


def test_a_dns_endpoint_needs_a_port():
    with pytest.raises(PolicyError, match="needs a port"):
        parse_policy(POLICY.replace("workers.tandem.svc:50051", "workers.tandem.svc"), "test")


async def test_callers_know_a_backend_by_its_pool_and_place_the_same_on_every_replica(monkeypatch):
    """X-Tandem-Backend, explain and error messages name a backend by a label, not its address: its entry in the
    pool's `endpoints`, and for a dns:// entry its address's place in the answer (which resolve_addresses sorts)."""
    monkeypatch.setattr(registry_module, "DNS_REFRESH_S", 0.0)
    replicas = [make(Dns("10.0.0.5", "10.0.0.7")) for _ in range(2)]
    for registry, _ in replicas:
        await registry.refresh_all()
    for registry, policy in replicas:
        assert dict(registry.pool(policy, "cloud").labels) == {
            "grpc://10.0.0.5:50051": "cloud/0.0",
            "grpc://10.0.0.7:50051": "cloud/0.1",
        }
        assert dict(registry.pool(policy, "edge").labels) == {"grpc://127.0.0.1:50061": "edge/0"}
        # and the log names each client by both (its health lines named the address alone, a new user's trial)
        assert [b.named for b in registry.backends(policy, "cloud")] == [
            "grpc://10.0.0.5:50051 (cloud/0.0)",
            "grpc://10.0.0.7:50051 (cloud/0.1)",
        ]
