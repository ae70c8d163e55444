"""Two gateway replicas sharing one Redis send the same prefix to the same worker.

Three simulated workers publish their block events to Redis; each gateway
reads them. A prefix first served through replica 1 must be found, through
replica 2, on the worker that holds it, and the worker's own block manager
must confirm the hit (cached tokens in the usage).
"""

import time

import httpx
import pytest
import yaml

from tests.conftest import free_port
from tests.stack import start_gateway, start_worker_process, write_policy

pytestmark = pytest.mark.integration
PREFIXES = [f"System prompt number {i}: answer briefly, cite the manual, never guess. " * 6 for i in range(6)]


def sim_worker(checkpoint, port: int, redis_url: str, *args: str):
    """A simulated worker publishing its prefix hints to Redis (fast steps: 50 µs a prompt token, 100 a decode)."""
    return start_worker_process(
        ["sim-worker", "--model", str(checkpoint), "--port", str(port), "--prefill-us-per-token", "50",
         "--decode-us-per-token", "100", *args],
        {"REDIS_URL": redis_url},
    )  # fmt: skip


@pytest.fixture
def replicas(demo_checkpoint, tmp_path, redis_url):
    ports = [free_port() for _ in range(4)]
    workers = [sim_worker(demo_checkpoint, p, redis_url, "--num-kv-blocks", "512") for p in ports]
    policy = {
        "version": 1,
        "pools": {
            "cloud": {
                "kind": "cloud",
                "endpoints": [f"grpc://127.0.0.1:{p}" for p in ports[:3]],
                "profile": {
                    "scorers": [{"type": "prefix-hit", "weight": 3}, {"type": "queue-depth", "weight": 1}],
                    "picker": {"type": "cache-affinity"},
                },
            },
            # A simulated worker reports kind=cloud, so private requests still get a 503 here.
            "edge": {"kind": "edge", "endpoints": [f"grpc://127.0.0.1:{ports[3]}"]},
        },
        "rules": [
            {"name": "private", "match": {"privacy": ["private", "pii", "confidential"]}, "route": "edge"},
            {"name": "default", "route": "cloud"},
        ],
    }
    policy_path = tmp_path / "policy.yaml"
    policy_path.write_text(yaml.safe_dump(policy))
    gateways = [start_gateway(demo_checkpoint, policy_path, free_port(), {"REDIS_URL": redis_url}) for _ in range(2)]
    yield [g.url for g in gateways]
    for g in gateways:
        g.stop()
    for w in workers:
        w.terminate()
        w.wait(timeout=10)


def ask(url: str, prompt: str) -> tuple[str, int]:
    reply = httpx.post(
        f"{url}/v1/completions",
        json={"model": "tandem-demo", "prompt": prompt, "max_tokens": 2},
        timeout=30,
    )
    reply.raise_for_status()
    return reply.headers["x-tandem-backend"], reply.json()["usage"]["prompt_tokens_details"]["cached_tokens"]


def test_a_prefix_routed_by_one_replica_is_found_by_the_other(replicas):
    first, second = replicas
    placed = {}
    for i, prefix in enumerate(PREFIXES):
        placed[i], cached = ask(first, prefix + "Question one?")
        assert cached == 0
    time.sleep(0.3)  # workers publish their block events every 50 ms
    for i, prefix in reversed(list(enumerate(PREFIXES))):  # another order: tie-breaking alone cannot agree
        backend, cached = ask(second, prefix + "Question two, from another replica?")
        assert backend == placed[i]
        assert cached >= 64  # the worker's own block manager served the shared prefix
    assert len(set(placed.values())) > 1  # distinct prefixes still spread over the pool


def test_a_worker_publishing_its_hints_under_another_name_is_said(demo_checkpoint, tmp_path, redis_url):
    """Hints are keyed by the address a gateway dials: a worker publishing under another name (a policy writing
    `localhost`, a container's service name) matched none, with nothing said (a review). `localhost` is now read as
    127.0.0.1 on both sides; any other name is a warning naming the --worker-id to give."""
    from proto.prefix_hints import worker_id_for

    assert worker_id_for("grpc://localhost:50401") == worker_id_for("127.0.0.1:50401") == "127.0.0.1:50401"
    ports = [free_port(), free_port()]
    workers = [
        sim_worker(demo_checkpoint, p, redis_url, "--worker-id", f"worker-{i}.svc:{p}") for i, p in enumerate(ports)
    ]
    try:
        policy = write_policy(tmp_path / "policy.yaml", *ports)
        gateway = start_gateway(demo_checkpoint, policy, free_port(), {"REDIS_URL": redis_url}, tmp_path / "logs")
        gateway.stop()
        log = gateway.children[0].log_path.read_text()
        assert f"publishes its prefix hints as 'worker-0.svc:{ports[0]}'" in log
        assert f"start it with --worker-id 127.0.0.1:{ports[0]}" in log
        assert log.count("publishes its prefix hints as") == 2  # once each, not at every poll
    finally:
        for w in workers:
            w.terminate()
            w.wait(timeout=10)
