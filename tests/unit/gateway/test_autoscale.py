"""Autoscaling signals: each a ratio to its target, the largest one the pool's saturation."""

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from gateway.autoscale import AutoscaleCollector, TtftWindow
from gateway.backends.registry import BackendRegistry
from gateway.backends.worker_backend import WorkerBackend
from gateway.config import Settings
from gateway.policy.loader import parse_policy
from proto.gen import worker_pb2

POLICY = """
version: 1
pools:
  cloud: {kind: cloud, endpoints: ["grpc://w1:1", "grpc://w2:1"]}
  edge: {kind: edge, endpoints: ["grpc://e1:1"], plaintext_grpc: true}
rules:
  - {name: private, match: {privacy: [private, pii, confidential]}, route: edge, fallback: []}
  - {name: default, route: cloud}
"""


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def world():
    policy = parse_policy(POLICY, "test")
    registry = BackendRegistry(policy, "m", lambda url, model, pool: WorkerBackend(url, model, pool.kind))
    clock = Clock()
    ttft = TtftWindow(60, clock)
    settings = Settings(
        model_dir=Path("unused"), autoscale_queue_per_worker=4, autoscale_kv_usage=0.8, autoscale_ttft_p90_s=2.0
    )
    backends = {b.endpoint: b for b in registry.all()}
    return AutoscaleCollector(settings, registry, lambda: policy, ttft), backends, ttft, clock


def report(backend: WorkerBackend, queue: int, used: int, total: int) -> None:
    backend.stats = worker_pb2.StatsReply(kind="cloud", queue_depth=queue, kv_blocks_used=used, kv_blocks_total=total)


def test_each_signal_is_a_ratio_to_its_target(world):
    collector, backends, ttft, _ = world
    report(backends["grpc://w1:1"], queue=10, used=60, total=100)
    report(backends["grpc://w2:1"], queue=2, used=20, total=100)
    for seconds in [0.1] * 8 + [3.0, 5.0]:
        ttft.add("cloud", seconds)
    signals = collector.signals()["cloud"]
    assert signals["queue"] == pytest.approx(6 / 4)  # 12 waiting over 2 workers, target 4 each
    assert signals["kv"] == pytest.approx(0.4 / 0.8)
    assert signals["ttft"] == pytest.approx(3.0 / 2.0)  # p90 of ten samples is the 9th
    assert collector.signals()["edge"] == {}  # nothing reported: no signal, saturation 0


def test_saturation_is_the_largest_signal_and_unhealthy_workers_do_not_count(world):
    collector, backends, _, _ = world
    report(backends["grpc://w1:1"], queue=0, used=90, total=100)
    report(backends["grpc://w2:1"], queue=40, used=0, total=100)
    backends["grpc://w2:1"].problem = "unreachable"
    registry = CollectorRegistry()
    registry.register(collector)
    assert registry.get_sample_value("tandem_autoscale_saturation", {"pool": "cloud"}) == pytest.approx(0.9 / 0.8)
    assert registry.get_sample_value("tandem_autoscale_signal_ratio", {"pool": "cloud", "signal": "queue"}) == 0
    closed = {"backend": "grpc://w1:1", "state": "closed"}
    assert registry.get_sample_value("tandem_gateway_backend_circuit_state", closed) == 1
    # The unreachable worker's breaker is still closed: only the health gauge tells an alert it is down.
    healthy = {w: registry.get_sample_value("tandem_gateway_backend_healthy", {"pool": "cloud", "backend": w})
               for w in ("grpc://w1:1", "grpc://w2:1")}  # fmt: skip
    assert healthy == {"grpc://w1:1": 1, "grpc://w2:1": 0}
    assert registry.get_sample_value("tandem_gateway_backend_healthy", {"pool": "edge", "backend": "grpc://e1:1"}) == 0


def test_old_ttft_samples_leave_the_window(world):
    collector, _, ttft, clock = world
    ttft.add("cloud", 9.0)
    clock.now += 30
    ttft.add("cloud", 0.5)
    assert ttft.p90("cloud") == 9.0
    clock.now += 31  # the 9 s sample is now older than the 60 s window
    assert ttft.p90("cloud") == 0.5
    clock.now += 31
    assert ttft.p90("cloud") is None
    assert "ttft" not in collector.signals()["cloud"]


async def test_a_pool_that_says_nothing_of_its_load_and_a_pool_of_no_workers_read_as_such():
    """(a review) An OpenAI-compatible pool's Stats say nothing of its queue: it read as an empty queue, so a busy
    HTTP pool's saturation was low and an HPA would scale it down. And a dns:// pool resolving to nothing had no
    health series at all, so the documented alert had nothing to sum: a per-pool count reads 0."""
    from gateway.backends.http_backend import HttpWorkerBackend

    policy = parse_policy(
        """
version: 1
pools:
  vllm: {kind: cloud, endpoints: ["http://v1:8000"]}
  cloud: {kind: cloud, endpoints: ["dns://workers:50051"]}
  edge: {kind: edge, endpoints: ["grpc://e1:1"], plaintext_grpc: true}
rules:
  - {name: private, match: {privacy: [private, pii, confidential]}, route: edge, fallback: []}
  - {name: default, route: vllm, fallback: [cloud]}
""",
        "test",
    )

    async def nothing(host, port):
        return []

    registry = BackendRegistry(
        policy, "m", lambda url, model, pool: (HttpWorkerBackend if url.startswith("http") else WorkerBackend)(
            url, model, pool.kind), resolver=nothing,
    )  # fmt: skip
    await registry.apply()
    vllm = registry.backends(policy, "vllm")[0]
    vllm.stats = worker_pb2.StatsReply(model_id="m", kind="cloud", execution_provider="openai-http")
    ttft = TtftWindow(60, Clock())
    for _ in range(10):
        ttft.add("vllm", 3.0)
    settings = Settings(model_dir=Path("unused"), autoscale_ttft_p90_s=2.0)
    collector = AutoscaleCollector(settings, registry, lambda: policy, ttft)
    assert collector.signals()["vllm"] == {"ttft": pytest.approx(1.5)}  # no `queue: 0` beside it
    metrics = CollectorRegistry()
    metrics.register(collector)
    count = {pool: metrics.get_sample_value("tandem_gateway_pool_healthy_backends", {"pool": pool})
             for pool in ("vllm", "cloud", "edge")}  # fmt: skip
    assert count == {"vllm": 1, "cloud": 0, "edge": 0}
    await registry.close()
