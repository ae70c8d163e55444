"""A request's several choices (n, a batch's prompts) started on real WorkerBackends with scripted wires."""

import asyncio
from types import SimpleNamespace

from gateway.api.generation import _Choice, _dispatch_all
from gateway.classify.features import RequestFeatures
from proto.gen import worker_pb2
from tests.scripted_backend import FAIL, registry_for, scripted
from tests.unit.gateway.test_dispatch_failover import POLICY

PRIVATE = RequestFeatures(10, 16, frozenset({"pii"}), None, "t")
EDGE = "grpc://e:1"


class _StayingClient:
    async def receive(self):
        await asyncio.Event().wait()  # never leaves


class _LeavingClient:
    async def receive(self):
        await asyncio.sleep(0.05)
        return {"type": "http.disconnect"}


def _state(registry):
    settings = SimpleNamespace(backend_timeout_s=5.0, first_token_deadline_s=5.0, attempt_timeout_s=5.0)
    return SimpleNamespace(registry=registry, settings=settings)


def _choices(count: int) -> list[_Choice]:
    prepared = SimpleNamespace(features=PRIVATE, model=SimpleNamespace(hints=None), prompt_ids=[])
    return [_Choice(prepared, worker_pb2.GenerateRequest(request_id=f"r-{i}"), i) for i in range(count)]


def test_a_half_open_breakers_probe_serves_the_first_choice_and_the_rest_follow():
    """All at once, the second choice found the probe taken (a 503) and the first gave it back without a verdict,
    so the edge stayed half-open and every private n=2 request failed (a review)."""
    behaviour = {EDGE: FAIL}
    factory = scripted(behaviour, failure_threshold=1, open_for_s=0.2)

    async def go():
        registry = registry_for(POLICY, factory)
        edge = next(b for b in registry.all() if b.endpoint == EDGE)
        try:
            await _dispatch_all(_choices(1), POLICY, _state(registry), 0.0, _StayingClient())
        except Exception:  # noqa: BLE001 - the failure that opens the breaker
            pass
        behaviour[EDGE] = "ok"
        await asyncio.sleep(0.25)  # half-open: one probe at a time
        routed = await _dispatch_all(_choices(3), POLICY, _state(registry), 0.0, _StayingClient())
        for one in routed:
            await one.aclose()
        return [one.backend.endpoint for one in routed], edge.breaker.current_state()

    endpoints, state = asyncio.run(go())
    assert endpoints == [EDGE] * 3 and state == "closed"


def test_a_client_that_leaves_while_its_choices_start_leaves_nothing_open():
    factory = scripted({EDGE: "slow"})  # no first token for 10 s

    async def go():
        registry = registry_for(POLICY, factory)
        edge = next(b for b in registry.all() if b.endpoint == EDGE)
        result = await asyncio.wait_for(
            _dispatch_all(_choices(4), POLICY, _state(registry), 0.0, _LeavingClient()), timeout=2
        )
        await asyncio.sleep(0)
        return result, edge.inflight

    assert asyncio.run(go()) == (None, 0)


def test_the_first_failing_answer_stops_the_others():
    """A batch's whole answers: one choice failing mid-answer (its worker killed) left the others generating to
    max_tokens behind a 502 (a review)."""
    from gateway.api.generation import _first_failure_ends_all

    stopped = []

    async def long_answer(i):
        try:
            await asyncio.sleep(10)
        finally:
            stopped.append(i)

    async def failing():
        await asyncio.sleep(0.01)
        raise RuntimeError("worker gone")

    async def go():
        try:
            await asyncio.wait_for(_first_failure_ends_all([long_answer(0), failing(), long_answer(2)]), timeout=2)
        except RuntimeError as exc:
            return str(exc)

    assert asyncio.run(go()) == "worker gone" and sorted(stopped) == [0, 2]


async def _events(*events, forever=False, ended=None):
    try:
        for event in events:
            await asyncio.sleep(0.01)
            yield event
        if forever:
            await asyncio.Event().wait()
    finally:
        if ended is not None:
            ended.append(events)


def test_choices_started_later_are_merged_and_one_that_cannot_start_ends_the_starting():
    """A streamed answer's later choices start while the first streams; one that cannot start is an error event,
    and those after it are never started (the started ones go on to their end)."""
    from gateway.api.generation import _merged
    from serving.openai.format import SSE_DONE

    started = []

    async def the_others():
        started.append(1)
        yield _events("second-a", "second-b")
        yield "error: choice 2 could not start"
        started.append(3)  # never reached: the merge stops asking
        yield _events("fourth")

    async def go():
        merged = _merged([_events("first-a", "first-b", "first-c")], None, None, set(), the_others())
        return [event async for event in merged]

    events = asyncio.run(go())
    assert sorted(events[:-1]) == sorted(
        ["first-a", "first-b", "first-c", "second-a", "second-b", "error: choice 2 could not start"]
    )
    assert events[-1] == SSE_DONE and started == [1]


def test_a_client_that_leaves_while_a_later_choice_starts_ends_the_starting_and_every_stream():
    from gateway.api.generation import _merged

    ended: list = []
    released = []

    async def the_others():
        try:
            yield _events("second", forever=True, ended=ended)
            await asyncio.Event().wait()  # the third choice: waiting for its first token
        finally:
            released.append("third")  # what was never started gives its share back

    async def go():
        merged = _merged([_events("first", forever=True, ended=ended)], None, None, set(), the_others())
        got = [await anext(merged), await anext(merged)]
        await merged.aclose()  # the client left
        return sorted(got), list(released), sorted(ended)  # here: asyncio.run's end would cancel what is left

    assert asyncio.run(go()) == (["first", "second"], ["third"], [("first",), ("second",)])


def test_a_response_cancelled_as_starlette_cancels_it_stops_every_stream():
    """Starlette ends the body of a response whose client left by cancelling its task group, which cancels again at
    every await until the scope is left: the cleanup's first await was cut short, and the streams went on to
    max_tokens (a review)."""
    import anyio

    from gateway.api.generation import _merged

    ended: list = []

    async def the_others():
        yield _events("second", forever=True, ended=ended)
        try:
            await asyncio.Event().wait()  # the third choice: waiting for its first token
        finally:
            await asyncio.sleep(0.01)  # its share given back (over Redis, where the limits are shared)

    async def go():
        merged = _merged([_events("first", forever=True, ended=ended)], None, None, set(), the_others())

        async def send_body():
            async for _ in merged:
                pass

        async with anyio.create_task_group() as group:
            group.start_soon(send_body)
            await asyncio.sleep(0.1)
            group.cancel_scope.cancel()  # the client left
        await asyncio.sleep(0.05)
        return sorted(ended)  # here: at its end, asyncio.run cancels whatever is left anyway

    assert asyncio.run(go()) == [("first",), ("second",)]


def test_a_stream_started_in_the_turn_the_client_leaves_is_closed_too():
    """A later choice's first token can come in the same turn of the loop as the client's leaving: its stream,
    started then, still runs its cleanup (the worker's sequence and the tenant's share are freed there)."""
    from gateway.api.generation import _merged

    started, closed = [], []

    async def stream(name):
        started.append(name)
        try:
            yield name
            await asyncio.Event().wait()
        finally:
            closed.append(name)

    async def go():
        first_token = asyncio.get_running_loop().create_future()

        async def the_others():
            await first_token
            yield stream("second")
            await asyncio.Event().wait()

        async def send_body():
            async for _ in _merged([stream("first")], None, None, set(), the_others()):
                pass

        sending = asyncio.create_task(send_body())
        await asyncio.sleep(0.01)
        first_token.set_result(None)
        sending.cancel()  # in the same turn
        await asyncio.gather(sending, return_exceptions=True)
        await asyncio.sleep(0.05)
        return list(started), list(closed)  # here: at its end, asyncio.run cancels whatever is left anyway

    assert asyncio.run(go()) == (["first", "second"], ["first", "second"])


def test_the_tokens_given_back_are_only_those_known_unused():
    """A stream stopped early keeps its prompt and the tokens it was sent; an HTTP backend's text comes without its
    ids (several tokens an event from some servers: counted one each, a tenant got ten times its rate) and a usage
    its server did not send reads 0: neither is grounds for a refund (a review)."""
    from gateway.api.generation import _used_tokens
    from gateway.dispatch import RoutedStream

    def routed(*chunks: worker_pb2.GenerateChunk) -> RoutedStream:
        stream = RoutedStream("cloud", "default", None, "cloud/0", chunks[0], None, "acme", prompt_tokens=20)
        for chunk in chunks:
            stream._count(chunk)
        return stream

    usage = worker_pb2.Usage(prompt_tokens=20, completion_tokens=30)
    ids = [worker_pb2.GenerateChunk(token_ids=[1, 2], text="ab"), worker_pb2.GenerateChunk(token_ids=[3], text="c")]
    assert _used_tokens(routed(*ids), None) == 23  # a worker's: stopped after three tokens
    assert _used_tokens(routed(*ids), worker_pb2.GenerateChunk(finish_reason="stop", usage=usage)) == 50
    texts = [worker_pb2.GenerateChunk(text="ten tokens"), worker_pb2.GenerateChunk(text="ten more")]
    assert _used_tokens(routed(*texts), None) is None  # stopped: how many tokens that was, no one knows
    no_usage = worker_pb2.GenerateChunk(finish_reason="stop", usage=worker_pb2.Usage(prompt_tokens=20))
    assert _used_tokens(routed(*texts), no_usage) is None  # a usage the server did not send (0 made, for 2 events)
    assert _used_tokens(routed(*texts), worker_pb2.GenerateChunk(finish_reason="stop", usage=usage)) == 50
