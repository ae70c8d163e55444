"""A model's context as the gateway serves it (BackendRegistry.context_of): the longest its healthy backends report."""

import asyncio

import pytest

from gateway.policy.schema import Policy
from proto.prefix_hints import default_worker_id, given_worker_id, worker_id_for
from tests.scripted_backend import registry_for, scripted

A, B, E = "grpc://a:1", "grpc://b:1", "grpc://e:1"
POLICY = Policy.model_validate({
    "version": 1,
    "pools": {"cloud": {"kind": "cloud", "endpoints": [A, B]}, "edge": {"kind": "edge", "endpoints": [E], "plaintext_grpc": True}},
    "rules": [{"name": "private", "match": {"privacy": ["private", "pii", "confidential"]}, "route": "edge"},
              {"name": "default", "route": "cloud"}],
})  # fmt: skip


def contexts_after(reported: dict[str, int], down: tuple[str, ...] = ()) -> int:
    async def go():
        registry = registry_for(POLICY, scripted({}))
        for backend in registry.all():
            backend.stats.max_context_tokens = reported.get(backend.endpoint, 0)
        await registry.refresh_all()
        for backend in registry.all():
            if backend.endpoint in down:
                backend._set_problem("UNAVAILABLE")
        registry.contexts = registry._contexts()
        return registry.context_of("m", 2048)

    return asyncio.run(go())


def test_the_longest_context_a_healthy_backend_reports_bounds_the_model():
    assert contexts_after({A: 160, B: 1024, E: 512}) == 1024
    assert contexts_after({A: 160, B: 1024, E: 512}, down=(B,)) == 512  # a dead worker's last Stats do not count
    assert contexts_after({A: 4096, B: 4096, E: 4096}) == 2048  # never past the checkpoint's


def test_a_backend_that_reports_no_context_leaves_the_checkpoints():
    """An OpenAI-compatible HTTP server reports none: a small worker beside it bounded the model (a review)."""
    assert contexts_after({A: 160, B: 0, E: 160}) == 2048
    assert contexts_after({}) == 2048


def test_worker_ids_read_as_gateways_read_them():
    assert worker_id_for("grpc://localhost:50401") == "127.0.0.1:50401"
    for host in ("0.0.0.0", "::", "[::]", ""):
        assert default_worker_id(host, 50401) == "127.0.0.1:50401"
    assert default_worker_id("::1", 50401) == worker_id_for("grpc://[::1]:50401")
    assert default_worker_id("localhost", 50401) == "127.0.0.1:50401"
    # (a review) `--worker-id $(POD_IP):50051` on an IPv6 cluster: no brackets; it stopped the worker at start
    assert (
        worker_id_for("fd00:10:244::5:50051")
        == worker_id_for("grpc://[fd00:10:244::5]:50051")
        == "fd00:10:244::5:50051"
    )
    with pytest.raises(ValueError, match="no host:port"):
        worker_id_for("worker-0:http")
    # (a review) a colon in an HTTP endpoint's path is no IPv6 host's: the gateway did not start
    assert worker_id_for("http://proxy:8080/route/llama3:8b") == "proxy:8080"
    for no_port in ("10.0.0.5", "fd00::5", "worker-0"):  # published as `host:None`, which no gateway matched
        with pytest.raises(ValueError, match="no host:port"):
            given_worker_id(no_port)
    assert given_worker_id("fd00::5:50051") == "fd00::5:50051"
