"""Routing's view of a backend is kept between requests: every change a request's route depends on shows at once.

A kept view that missed one change would route to a backend that just died, pile requests on a busy one, or score
a prompt against another prompt's match, with nothing to show for it but worse latency. Each test changes one thing
the way the gateway does (a poll, a request sent and finished, failures, time passing) and reads the view again.
"""

import time

import grpc
import pytest

from gateway.backends.circuit_breaker import CircuitBreaker
from gateway.backends.registry import BackendRegistry
from gateway.backends.worker_backend import BackendError, WorkerBackend
from gateway.gather import PromptKey, gather_pools
from gateway.hints.prefix_hints import PrefixHints
from gateway.policy.loader import parse_policy
from gateway.routing.candidate import RECENT_WINDOW_S
from proto.gen import worker_pb2
from proto.prefix_hints import worker_id_for

POLICY = """
version: 1
pools:
  edge: {{kind: edge, endpoints: ["grpc://10.0.1.1:1"], plaintext_grpc: true}}
  cloud:
    kind: cloud
    endpoints: [{endpoints}]
    profile: {{filters: [healthy], scorers: [prefix-hit, queue-depth], picker: max-score}}
rules:
  - {{name: private, match: {{privacy: [private, pii, confidential]}}, route: edge, fallback: []}}
  - {{name: default, route: cloud}}
"""


class Answering(WorkerBackend):
    """Answers a request with one chunk (or fails it, when told), and its Stats poll at once."""

    def __init__(self, endpoint: str, breaker: CircuitBreaker | None = None, block_size: int = 4) -> None:
        super().__init__(endpoint, "m", "cloud", breaker)
        self.queue, self.fail, self.block_size = 0, False, block_size

    async def _fetch_stats(self) -> worker_pb2.StatsReply:
        return worker_pb2.StatsReply(model_id="m", kind="cloud", queue_depth=self.queue,
                                     block_size_tokens=self.block_size)  # fmt: skip

    async def _stream(self, request, timeout_s):
        if self.fail:
            raise BackendError(self.endpoint, grpc.StatusCode.UNAVAILABLE, "gone")
        yield worker_pb2.GenerateChunk()


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def policy_of(*endpoints: str):
    return parse_policy(POLICY.format(endpoints=", ".join(f'"{e}"' for e in endpoints)), "test")


async def test_the_view_follows_polls_requests_and_the_window():
    backend = Answering("grpc://10.0.0.1:1")
    await backend.refresh()
    now = 50.0
    first = backend.candidate(now)
    assert (first.is_healthy, first.queue_depth, first.inflight, first.recent_requests) == (True, 0, 0, 0)
    assert backend.candidate(now) is first  # kept: nothing changed

    backend.queue = 7
    await backend.refresh()
    assert backend.candidate(now).queue_depth == 7

    stream = backend.generate(worker_pb2.GenerateRequest(), 1.0)
    await anext(stream)  # open: one request of ours on it, sent just now
    now = time.monotonic()
    opened = backend.candidate(now)
    assert (opened.inflight, opened.recent_requests) == (1, 1)
    await stream.aclose()
    assert (backend.candidate(now).inflight, backend.candidate(now).recent_requests) == (0, 1)
    later = backend.candidate(now + RECENT_WINDOW_S + 0.1)  # the send has left the window
    assert later.recent_requests == 0

    backend.problem = "UNAVAILABLE: gone"
    assert not backend.candidate(now).is_healthy
    backend.problem = None
    assert backend.candidate(now).is_healthy


async def test_a_breaker_that_opens_and_cools_down_shows_at_once():
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=2, open_for_s=5.0, clock=clock)
    backend = Answering("grpc://10.0.0.1:1", breaker)
    await backend.refresh()
    assert backend.candidate(1.0).is_healthy
    backend.fail = True
    for _ in range(2):
        with pytest.raises(BackendError):
            async for _ in backend.generate(worker_pb2.GenerateRequest(), 1.0):
                pass
    assert not backend.candidate(1.0).is_healthy  # open: nothing is sent to it
    clock.now += 5.0
    assert backend.candidate(1.0).is_healthy  # half-open: one probe may go
    backend.fail = False
    async for _ in backend.generate(worker_pb2.GenerateRequest(), 1.0):
        pass
    assert backend.candidate(1.0).is_healthy and breaker.state == "closed"
    for _ in range(2):  # as dispatch does for a backend that gave no first token in time: no request changes
        breaker.record_failure()
    assert not backend.candidate(1.0).is_healthy


async def test_every_holder_of_a_shared_prefix_gets_this_prompts_match_and_no_other_does():
    """A system prompt cached on most of the pool: each holder's view carries this prompt's blocks and its match;
    the next prompt, held by none, sees no match anywhere (a kept view must not carry the last prompt's)."""
    endpoints = [f"grpc://10.0.0.{i}:1" for i in range(1, 7)]
    policy = policy_of(*endpoints)
    registry = BackendRegistry(policy, "m", lambda url, model, pool: Answering(url))
    await registry.refresh_all()
    hints = PrefixHints("m")
    shared = tuple(range(1, 41))  # 10 blocks of 4
    hashes = hints.hashes("s", shared, 4)
    for i, endpoint in enumerate(endpoints[:5]):  # five of six hold 2..6 leading blocks
        hints.approximate.record(worker_id_for(endpoint), hashes[: i + 2])

    gathered = await gather_pools(registry, policy, ["cloud"], PromptKey("s", shared), hints)
    seen = {c.endpoint: (c.prompt_blocks, c.prefix_match_blocks) for c in gathered.candidates["cloud"]}
    assert seen == {**{e: (10, i + 2) for i, e in enumerate(endpoints[:5])}, endpoints[5]: (0, 0)}

    other = tuple(range(500, 540))
    gathered = await gather_pools(registry, policy, ["cloud"], PromptKey("s", other), hints)
    assert {(c.prompt_blocks, c.prefix_match_blocks) for c in gathered.candidates["cloud"]} == {(0, 0)}


async def test_a_pool_follows_a_reload_and_a_request_keeps_the_policy_it_started_with():
    old = policy_of("grpc://10.0.0.1:1", "grpc://10.0.0.2:1")
    registry = BackendRegistry(old, "m", lambda url, model, pool: Answering(url))
    assert [b.endpoint for b in registry.pool(old, "cloud").backends] == ["grpc://10.0.0.1:1", "grpc://10.0.0.2:1"]
    new = policy_of("grpc://10.0.0.2:1", "grpc://10.0.0.3:1")
    await registry.apply(new)
    assert [b.endpoint for b in registry.pool(new, "cloud").backends] == ["grpc://10.0.0.2:1", "grpc://10.0.0.3:1"]
    # A request that started before the reload still reaches the one the new policy drops (retiring, not closed).
    assert "grpc://10.0.0.1:1" in registry.pool(old, "cloud").by_endpoint
    assert [b.endpoint for b in registry.pool(new, "cloud").backends] == ["grpc://10.0.0.2:1", "grpc://10.0.0.3:1"]
    await registry.close()


async def test_a_backend_listed_twice_is_one_candidate():
    """An address listed and also resolved from a dns:// name (listed twice, a policy does not load) is one backend:
    one candidate, one line in explain, and dispatch does not try it twice."""
    policy = policy_of("grpc://10.0.0.1:1", "grpc://10.0.0.2:1")
    pool = policy.pools["cloud"]  # as the resolution would list it: past the loader's check, which refuses it
    twice = pool.model_copy(update={"endpoints": [*pool.endpoints, "grpc://10.0.0.1:1"]})
    policy = policy.model_copy(update={"pools": {**policy.pools, "cloud": twice}})
    registry = BackendRegistry(policy, "m", lambda url, model, pool: Answering(url))
    await registry.refresh_all()
    gathered = await gather_pools(registry, policy, ["cloud"], None, None)
    assert [c.endpoint for c in gathered.candidates["cloud"]] == ["grpc://10.0.0.1:1", "grpc://10.0.0.2:1"]
    await registry.close()


@pytest.mark.parametrize("odd", [-16, 1 << 20, "unhealthy"])
async def test_a_block_size_no_worker_has_or_an_unhealthy_backends_is_not_hashed_by(odd, caplog):
    """(a review) One backend reporting a block size of -16 (another implementation, or a broken worker), even
    an unhealthy one, made every request of its pool a 500: the prompt was hashed by it. Hashed by a healthy
    backend's size; one out of range is said once and not used."""
    endpoints = ["grpc://10.0.0.1:1", "grpc://10.0.0.2:1"]
    policy = policy_of(*endpoints)
    size = 32 if odd == "unhealthy" else odd
    registry = BackendRegistry(
        policy, "m", lambda url, model, pool: Answering(url, block_size=size if url == endpoints[0] else 4)
    )
    hints = PrefixHints("m")
    prompt = tuple(range(1, 41))
    hints.approximate.record(worker_id_for(endpoints[1]), hints.hashes("s", prompt, 4)[:3])
    for _ in range(2):
        await registry.refresh_all()
        if odd == "unhealthy":  # first in the pool, and not serving it
            registry.pool(policy, "cloud").backends[0].problem = "serves another model"
        gathered = await gather_pools(registry, policy, ["cloud"], PromptKey("s", prompt), hints)
    seen = {c.endpoint: (c.prompt_blocks, c.prefix_match_blocks) for c in gathered.candidates["cloud"]}
    assert seen[endpoints[1]] == (10, 3)  # hashed by the healthy worker's 4
    said = [r.getMessage() for r in caplog.records if "a KV block size of" in r.getMessage()]
    assert len(said) == (0 if odd == "unhealthy" else 1), said
    await registry.close()


async def test_a_pool_whose_backends_hash_by_different_block_sizes_is_said(caplog):
    registry = BackendRegistry(policy_of("grpc://10.0.0.1:1", "grpc://10.0.0.2:1"), "m",
                               lambda url, model, pool: Answering(url, block_size=32 if url.endswith("1:1") else 16))  # fmt: skip
    for _ in range(3):
        await registry.refresh_all()
    said = [r.getMessage() for r in caplog.records if "block sizes" in r.getMessage()]
    assert said == ["pool cloud: its backends report KV block sizes (16, 32); prompts are hashed by one of them, so "
                    "the others' prefix hints match nothing until they agree"]  # fmt: skip
    await registry.close()
