"""Failover inside dispatch: retries before the first token, breaker, deadline, client errors."""

import asyncio
import contextlib
import re

import pytest

from gateway.backends.worker_backend import hide_addresses
from gateway.classify.features import RequestFeatures
from gateway.dispatch import dispatch
from gateway.policy.schema import Policy
from proto.gen import worker_pb2
from serving.openai.errors import BadRequest, NoBackend
from tests.scripted_backend import FAIL, REJECT, SLOW, SLOW_START, registry_for, scripted

A, B = "grpc://a:1", "grpc://b:1"
POLICY = Policy.model_validate({
    "version": 1,
    "pools": {"cloud": {"kind": "cloud", "endpoints": [A, B]}, "edge": {"kind": "edge", "endpoints": ["grpc://e:1"], "plaintext_grpc": True}},
    "rules": [{"name": "private", "match": {"privacy": ["private", "pii", "confidential"]}, "route": "edge"},
              {"name": "default", "route": "cloud"}],
})  # fmt: skip
PUBLIC = RequestFeatures(10, 16, frozenset(), None, "t")


async def send(registry, deadline_s=5.0, attempt_s=5.0):
    request = worker_pb2.GenerateRequest(request_id="r")
    routed = await dispatch(POLICY, registry, PUBLIC, request, 5.0, deadline_s, attempt_s)
    await routed.aclose()
    return routed.backend.endpoint


def test_a_failure_before_the_first_token_moves_to_the_next_backend():
    factory = scripted({A: FAIL})

    async def go():
        registry = registry_for(POLICY, factory)
        return [await send(registry) for _ in range(4)]

    assert set(asyncio.run(go())) == {B}


def test_a_503_names_the_backends_tried_by_their_labels_never_their_addresses():
    """A caller with a key read every backend's address in a 503 (`grpc://10.0.0.5:50051: UNAVAILABLE: … ipv4:
    10.0.0.5:50051: Connection refused`), where the readiness details are the operators' alone. A backend's own
    words stay in the log: an HTTP server's error page names hosts no pattern knows (a review)."""
    factory = scripted({A: FAIL, B: FAIL})

    async def go():
        with pytest.raises(NoBackend) as refused:
            await send(registry_for(POLICY, factory))
        return refused.value.message

    message = asyncio.run(go())
    assert "cloud/0: UNAVAILABLE;" in message and "cloud/1: UNAVAILABLE;" in message, message  # (in ranked order)
    assert "scripted failure" not in message and "a:1" not in message and "b:1" not in message


def test_consecutive_failures_open_the_breaker_and_a_probe_closes_it():
    behaviour = {A: FAIL}
    factory = scripted(behaviour, failure_threshold=2, open_for_s=0.3)

    async def go():
        registry = registry_for(POLICY, factory)
        for _ in range(6):
            await send(registry)
        tried_a_while_failing = sum(1 for entry in factory.wire_log if entry[0] == A)
        behaviour[A] = "ok"  # A recovers
        await asyncio.sleep(0.35)  # the breaker goes half-open
        served = [await send(registry) for _ in range(4)]
        return tried_a_while_failing, served

    tried, served = asyncio.run(go())
    assert tried == 2  # opened after two failures: later requests never touched A's wire
    assert A in served  # the probe went through and closed the breaker


ALONE = Policy.model_validate(
    POLICY.model_dump() | {"pools": {**POLICY.model_dump()["pools"], "cloud": {"kind": "cloud", "endpoints": [A]}}}
)  # fmt: skip  (one cloud backend)


async def half_open_after_a_failure(behaviour: dict[str, str], then: str):
    """A registry for ALONE whose one cloud backend failed once (its breaker open) and is back (`then`), half-open."""
    registry = registry_for(ALONE, scripted(behaviour, failure_threshold=1, open_for_s=0.2))
    with pytest.raises(NoBackend):
        await dispatch(ALONE, registry, PUBLIC, worker_pb2.GenerateRequest(request_id="r"), 5.0, 5.0, 5.0)
    behaviour[A] = then
    await asyncio.sleep(0.25)
    return registry


def test_a_request_beside_a_backends_probe_waits_for_its_verdict():
    """After failures in a row a backend's breaker lets one request probe it; a request beside that probe was a 503
    at once, the worker back (a review of a restarted worker). Now it waits for the probe's verdict and is served."""

    async def go():
        registry = await half_open_after_a_failure({A: FAIL}, SLOW_START)  # back, 0.2 s to its first token

        async def one():
            routed = await dispatch(ALONE, registry, PUBLIC, worker_pb2.GenerateRequest(request_id="r"), 5.0, 5.0, 5.0)
            await routed.aclose()
            return routed.backend.endpoint

        return await asyncio.gather(one(), one(), one())

    assert asyncio.run(go()) == [A, A, A]


def test_a_stalled_backend_is_skipped_after_its_attempt_timeout():
    async def go():
        return await send(registry_for(POLICY, scripted({A: SLOW})), deadline_s=2.0, attempt_s=0.2)

    assert asyncio.run(go()) == B


def test_all_backends_stalled_is_a_503_within_the_deadline():
    async def go():
        registry = registry_for(POLICY, scripted({A: SLOW, B: SLOW}))
        started = asyncio.get_running_loop().time()
        with pytest.raises(NoBackend, match="no first token within 0.2 s"):
            await send(registry, deadline_s=2.0, attempt_s=0.2)
        return asyncio.get_running_loop().time() - started

    assert asyncio.run(go()) < 1.0


def test_the_overall_deadline_bounds_the_retries():
    async def go():
        registry = registry_for(POLICY, scripted({A: SLOW, B: SLOW}))
        with pytest.raises(NoBackend, match="gave up after 0.3 s"):
            await send(registry, deadline_s=0.3, attempt_s=0.3)

    asyncio.run(go())


def test_a_client_error_is_not_retried_elsewhere():
    factory = scripted({A: REJECT, B: REJECT})

    async def go():
        return await send(registry_for(POLICY, factory))

    with pytest.raises(BadRequest, match="scripted rejection"):
        asyncio.run(go())
    assert len(factory.wire_log) == 1


def test_a_backend_silent_mid_answer_ends_the_answer_with_an_error_and_counts_against_it():
    from gateway.backends.worker_backend import BackendError
    from tests.scripted_backend import STALL

    factory = scripted({A: STALL, B: STALL}, failure_threshold=1, open_for_s=60)

    async def go():
        registry = registry_for(POLICY, factory)
        routed = await dispatch(POLICY, registry, PUBLIC, worker_pb2.GenerateRequest(request_id="r"), 5.0, 5.0, 5.0)
        routed.idle_timeout_s = 0.2
        received = []
        with pytest.raises(BackendError, match="no token for 0.2 s mid-answer"):
            async for chunk in routed.chunks():
                received.append(chunk.text)
        await routed.aclose()
        return received, routed.backend.breaker.current_state()

    received, breaker = asyncio.run(go())
    assert received == ["x"] and breaker == "open"


def test_waiting_behind_other_answers_is_not_a_failure_but_a_lone_stall_is():
    """An edge agent answers one request at a time: 8 requests at once made the later ones wait past the attempt
    timeout, each wait counted as a failure, the breaker opened, and every tenant's private requests got 503s."""
    one = Policy.model_validate({
        "version": 1,
        "pools": {"cloud": {"kind": "cloud", "endpoints": [A]}, "edge": {"kind": "edge", "endpoints": ["grpc://e:1"], "plaintext_grpc": True}},
        "rules": [{"name": "private", "match": {"privacy": ["private", "pii", "confidential"]}, "route": "edge"},
                  {"name": "d", "route": "cloud"}],
    })  # fmt: skip

    async def attempt(registry):
        request = worker_pb2.GenerateRequest(request_id="r")
        with pytest.raises(NoBackend, match="no backend could serve"):
            await dispatch(one, registry, PUBLIC, request, 5.0, 1.0, 0.2)

    async def go():
        registry = registry_for(one, scripted({A: SLOW}, failure_threshold=2, open_for_s=60))
        backend = registry.all()[0]
        await asyncio.gather(*(attempt(registry) for _ in range(4)))  # all queued together at one busy backend
        after_burst = backend.breaker.current_state()
        for _ in range(2):  # then alone, twice: nothing else is in progress there, so it is stalled
            await attempt(registry)
        return after_burst, backend.breaker.current_state()

    assert asyncio.run(go()) == ("closed", "open")


def test_a_request_fault_after_the_first_token_is_a_400_not_the_backends_failure():
    """A grammar that could not go on, found by the worker mid-answer (INVALID_ARGUMENT), was a 502 backend_failed
    carrying the grammar engine's whole parser state."""
    import grpc

    from gateway.api.generation import _mid_answer
    from gateway.backends.worker_backend import BackendError

    fault = _mid_answer(BackendError(A, grpc.StatusCode.INVALID_ARGUMENT, "Parser Error: " + "row " * 5000), "c/0")
    assert isinstance(fault, BadRequest) and fault.status_code == 400 and len(fault.message) < 600
    failure = _mid_answer(BackendError(A, grpc.StatusCode.UNAVAILABLE, f"ipv4:{A[7:]}: Socket closed"), "c/0")
    assert failure.status_code == 502 and "backend failed mid-answer" in failure.message
    assert failure.message.endswith("c/0: UNAVAILABLE") and "Socket closed" not in failure.message  # (in the log)


def test_a_forced_tool_calls_grammar_failing_mid_answer_names_tools_not_response_format():
    """(a review) The engines know only the grammar; its failure was said to be response_format's where the request
    had none, only a forced tool call."""
    import grpc

    from gateway.api.generation import _mid_answer
    from gateway.backends.worker_backend import BackendError
    from serving.grammar import GRAMMAR_FAILED
    from serving.openai.answer import ToolPlan

    failed = BackendError(A, grpc.StatusCode.INVALID_ARGUMENT, f"{GRAMMAR_FAILED}: number too large")
    forced = ToolPlan("hermes", frozenset({"f"}), grammar='{"type": "object"}')
    fault = _mid_answer(failed, "c/0", forced)
    assert fault.param == "tools" and "forced tool call's arguments" in fault.message, fault.message
    assert "response_format" not in fault.message and "number too large" in fault.message
    assert _mid_answer(failed, "c/0").param == "response_format"


def test_a_503_with_no_backend_to_try_says_why_and_when_to_retry():
    """An edge review: once the edge's breaker was open, private requests got "pool 'edge': no healthy backend
    left", with no reason, no backend named and no Retry-After."""
    factory = scripted({"grpc://e:1": FAIL}, failure_threshold=2, open_for_s=30)
    private = RequestFeatures(10, 16, frozenset({"private"}), None, "t")

    async def go():
        registry = registry_for(POLICY, factory)
        for _ in range(2):  # two failures in a row open the edge's breaker
            with pytest.raises(NoBackend):
                await dispatch(POLICY, registry, private, worker_pb2.GenerateRequest(request_id="r"), 5.0, 5.0, 5.0)
        with pytest.raises(NoBackend) as refused:
            await dispatch(POLICY, registry, private, worker_pb2.GenerateRequest(request_id="r"), 5.0, 5.0, 5.0)
        return refused.value

    refused = asyncio.run(go())
    said = r"pool 'edge': no backend may serve now \(1 with its circuit breaker open, probed again in (29|30)\.\d s\)"
    assert re.search(said, refused.message), refused.message
    assert "grpc://e:1" not in refused.message.split("no backend may serve now")[1]  # no address for the caller
    assert 29 <= int(refused.headers["Retry-After"]) <= 30


@pytest.mark.parametrize(
    ("said", "endpoint", "told"),
    [
        (  # gRPC's own words when a worker is down
            "failed to connect to all addresses; last error: UNKNOWN: ipv4:10.0.0.5:50051: Connection refused",
            "grpc://10.0.0.5:50051",
            "failed to connect to all addresses; last error: UNKNOWN: <address>: Connection refused",
        ),
        ("ipv6:%5B::1%5D:50051: Socket closed", "grpc://[::1]:50051", "<address>: Socket closed"),
        ("GET http://10.0.0.5:8001/v1/models: timed out", "http://10.0.0.5:8001", "GET <address>: timed out"),
        (  # a worker's DNS name, and another address it mentions
            "DNS resolution failed for worker-0.workers.ns.svc:50051 (via [fd00::53]:53)",
            "grpc://worker-0.workers.ns.svc:50051",
            "DNS resolution failed for <address> (via <address>)",
        ),
        ("cloud:50051 is down, cloud says", "grpc://cloud:50051", "<address> is down, cloud says"),  # a one-word name
        # (a review) a zone id, an IPv4-mapped address, another server's URL or name and port (an HTTP pool's page)
        ("ipv6:%5Bfe80::1%251%5D:50199: refused", "grpc://[fe80::1%25lo]:50199", "<address>: refused"),
        ("to [::ffff:10.0.0.5]:80 and ::ffff:10.0.0.6", "grpc://a:1", "to <address> and <address>"),
        (
            "upstream http://gw2.internal:8000/v1 and vllm-3.vllm.svc.cluster.local:8000 failed",
            "http://x:1",
            "upstream <address> and <address> failed",
        ),
        # cut at a blank, so no part of an address is left at the end
        ("grammar: " + "x" * 480 + " peer 10.1.2.3:50051", "grpc://a:1", "grammar: " + "x" * 480 + " peer …"),
        # what is not an address stays: times, versions, paths of code
        (
            "at 12:30:45, v1.2.3.4.5, hyper::Error, std::io",
            "grpc://a:1",
            "at 12:30:45, v1.2.3.4.5, hyper::Error, std::io",
        ),
    ],
)
def test_a_backends_error_reaches_the_caller_without_an_address(said, endpoint, told):
    assert hide_addresses(said, endpoint) == told


def test_hiding_addresses_in_a_long_error_takes_no_time():
    """(a review) `a-a-a-…` of 32 KB held the event loop 6-8 s: the scheme's unbounded scan ran from every word."""
    import time

    from gateway.backends.worker_backend import _ADDRESS

    for text in ("a-" * 50_000, "a." * 50_000, "a+" * 50_000, "1." * 50_000, "a:" * 50_000, "f:" * 50_000):
        started = time.perf_counter()
        hide_addresses(text, "grpc://10.0.0.5:50051", most=len(text))
        _ADDRESS.sub("", text)
        assert time.perf_counter() - started < 0.5, text[:10]


def test_an_http_upstreams_error_page_reaches_the_caller_as_its_status_alone():
    """(a review) An HTTP pool's server (a router, an nginx, another gateway) names hosts no pattern knows in its error
    pages (`upstream vllm-3 (gpu-node-7.corp.example) failed`): a failure is its status and OpenAI's error code; a
    request's fault keeps its words, addresses hidden."""
    import json

    from gateway.backends.http_backend import HttpWorkerBackend

    http = HttpWorkerBackend("http://127.0.0.1:8102", "m", "cloud")
    page = json.dumps({"error": {"message": "engine at gpu-node-7.corp.example died", "code": "server_error"}})
    assert http._error(500, page).told("web/0") == "web/0: UNAVAILABLE: HTTP 500 (server_error)"
    assert (
        http._error(503, "<html>nginx at worker-9.pool.internal</html>").told("web/0") == "web/0: UNAVAILABLE: HTTP 503"
    )
    refused = http._error(400, json.dumps({"error": {"message": "max_tokens too large for vllm-3.svc:8000"}}))
    assert refused.is_request_fault
    assert hide_addresses(refused.details, refused.endpoint) == "HTTP 400: max_tokens too large for <address>"


def test_a_request_waits_on_no_probe_of_a_backend_it_could_not_use():
    """Only a backend left out for its taken probe slot is waited on: beside a probe of a backend failing its
    health checks, a request waited out the probe, then had the same 503 (a review)."""

    async def go():
        registry = await half_open_after_a_failure({A: FAIL}, SLOW)
        request = worker_pb2.GenerateRequest(request_id="r")
        probe = asyncio.ensure_future(dispatch(ALONE, registry, PUBLIC, request, 5.0, 5.0, 5.0))
        await asyncio.sleep(0.05)
        registry.all()[0]._set_problem("UNAVAILABLE: its health poll failed")
        started = asyncio.get_running_loop().time()
        with pytest.raises(NoBackend, match="failing its health checks"):
            await dispatch(ALONE, registry, PUBLIC, request, 5.0, 3.0, 3.0)
        waited = asyncio.get_running_loop().time() - started
        probe.cancel()
        with contextlib.suppress(asyncio.CancelledError, NoBackend):
            await probe
        return waited

    assert asyncio.run(go()) < 0.5


def test_a_503_beside_a_probe_that_outlives_its_wait_says_when_to_come_back():
    """A request that waited out its deadline on another request's probe was a 503 with no Retry-After (the breaker
    half-open, nothing to count down): a client had no hint, and retried at once or never. It says 1 s now."""

    async def go():
        registry = await half_open_after_a_failure({A: FAIL}, SLOW)
        request = worker_pb2.GenerateRequest(request_id="r")
        probe = asyncio.ensure_future(dispatch(ALONE, registry, PUBLIC, request, 5.0, 5.0, 5.0))
        await asyncio.sleep(0.05)
        with pytest.raises(NoBackend, match="being probed") as refused:
            await dispatch(ALONE, registry, PUBLIC, request, 5.0, 0.3, 0.3)
        probe.cancel()
        with contextlib.suppress(asyncio.CancelledError, NoBackend):
            await probe
        return refused.value.headers

    assert asyncio.run(go()) == {"Retry-After": "1"}
