"""A client that reads slowly, or stops reading, is the client's doing: it is let go after TANDEM_CLIENT_STALL_S, its
backend is not blamed, and what waits for it is bounded (a review: five such clients opened the edge pool's breaker,
and an n=8 stream held every choice's whole answer in the gateway)."""

import asyncio
import gc

import grpc
import pytest
from starlette.responses import StreamingResponse

from gateway import metrics
from gateway.api.generation import _MERGED_EVENTS_AHEAD, ClosingStreamingResponse, _merged
from gateway.backends.circuit_breaker import CircuitBreaker
from gateway.backends.worker_backend import BackendError, WorkerBackend
from gateway.main import _STALLED, LetStalledClientsGo
from proto.gen import worker_pb2
from serving.openai.format import ResponseShape


class Paced(WorkerBackend):
    """A worker that takes `step_s` of its own time for each of `chunks` chunks."""

    step_s, chunks = 0.05, 6

    async def _fetch_stats(self):
        return worker_pb2.StatsReply(model_id="m", kind=self.pool_kind)

    async def _stream(self, request, timeout_s):
        for i in range(self.chunks):
            await asyncio.sleep(self.step_s)
            yield worker_pb2.GenerateChunk(
                token_ids=[i], text="x", finish_reason="length" if i == self.chunks - 1 else ""
            )


def _backend(step_s: float) -> Paced:
    backend = Paced("grpc://127.0.0.1:1", "m", "cloud", CircuitBreaker(failure_threshold=1))
    backend.step_s = step_s
    return backend


async def test_time_spent_waiting_on_a_slow_reader_is_not_the_backends():
    backend = _backend(0.01)
    got = []
    async for chunk in backend.generate(worker_pb2.GenerateRequest(), timeout_s=0.2):
        got.append(chunk)
        await asyncio.sleep(0.1)  # the client takes its time: 0.6 s in all, three times the backend's deadline
    assert len(got) == Paced.chunks and backend.breaker.state == "closed"


async def test_a_backend_slower_than_its_deadline_is_still_blamed():
    backend = _backend(0.1)
    with pytest.raises(BackendError) as err:
        async for _ in backend.generate(worker_pb2.GenerateRequest(), timeout_s=0.25):
            pass
    assert err.value.code == grpc.StatusCode.DEADLINE_EXCEEDED and "TANDEM_BACKEND_TIMEOUT_S" in err.value.details
    assert backend.breaker.state == "open"


async def test_a_client_that_takes_no_data_is_let_go_and_its_stream_closed():
    closed = asyncio.Event()

    async def answer():
        try:
            for i in range(10_000):
                yield f"data: {i}\n\n"
        finally:
            closed.set()  # the backend stream's close: the worker's sequence is freed

    app = LetStalledClientsGo(ClosingStreamingResponse(answer(), media_type="text/event-stream"), stall_s=lambda: 0.2)
    sent, receiving = [], [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        if receiving:
            return receiving.pop()
        await asyncio.Event().wait()  # connected, and silent

    async def send(message):
        sent.append(message)
        if len(sent) > 3:
            await asyncio.Event().wait()  # the socket is full: the client stopped reading

    before = metrics.CLIENTS_LET_GO._value.get()
    scope = {"type": "http", "asgi": {"spec_version": "2.3"}, "client": ("127.0.0.1", 5), "method": "POST", "path": "/"}
    gc.disable()  # the answer is closed when the response ends, not when a collection happens to run (a review)
    try:
        async with asyncio.timeout(5):  # in this task, as uvicorn calls the app
            await app(scope, receive, send)  # ended, as when a client leaves
    finally:
        gc.enable()
    assert closed.is_set() and metrics.CLIENTS_LET_GO._value.get() == before + 1
    assert _STALLED.get()  # seen from the server's task: uvicorn's "without completing response" is not logged


async def test_a_client_that_reads_is_never_let_go():
    app = LetStalledClientsGo(StreamingResponse(iter(["a", "b", "c"])), stall_s=lambda: 0.05)
    sent = []
    messages = [{"type": "http.request", "body": b"", "more_body": False}]

    async def receive():
        if messages:
            return messages.pop()
        await asyncio.Event().wait()

    async def send(message):
        await asyncio.sleep(0.01)  # slow, but reading
        sent.append(message)

    await app({"type": "http", "asgi": {"spec_version": "2.3"}}, receive, send)
    assert b"".join(m.get("body", b"") for m in sent) == b"abc" and not sent[-1].get("more_body")


async def test_choices_wait_for_their_reader_instead_of_piling_up():
    pulled = [0, 0]

    closed = []

    async def choice(k):
        try:
            for i in range(10_000):
                pulled[k] += 1
                yield f"data: {k}.{i}\n\n"
        finally:
            closed.append(k)  # the worker's sequence freed

    merged = _merged([choice(0), choice(1)], ResponseShape.new(True, "id", "m"), None, set())
    await anext(merged)
    for _ in range(20):
        await asyncio.sleep(0)  # the producers run as far as they may
    assert sum(pulled) <= _MERGED_EVENTS_AHEAD + 4, pulled
    await merged.aclose()
    assert closed == [0, 1]  # each choice's stream closed by the close, though its pump waited at a full queue


async def test_a_choice_closed_at_its_first_event_gives_its_share_of_the_slot_back(tmp_path):
    """(a review) A choice of n whose first token came while the merge's queue was full waited there holding its
    opening event; when its client was let go, the stream was closed at that first `yield`, which was before the
    try whose finally frees the worker's sequence and the tenant's slot: the slot was held until a restart, and every
    later request of a tenant with max_concurrent 1 was a 429."""
    from opentelemetry import context

    from gateway.api.generation import _stream_events, _StreamTrace
    from gateway.dispatch import RoutedStream
    from gateway.limits.admission import AdmissionController
    from gateway.tenants import Tenants

    listed = tmp_path / "tenants.yaml"
    listed.write_text("tenants:\n  acme: {max_concurrent: 1}\n")
    controller = AdmissionController(Tenants.load(listed, [], b"s"))
    admission = await controller.admit("acme")
    backend = _backend(0.01)
    rest = backend.generate(worker_pb2.GenerateRequest(), timeout_s=5)
    first = await anext(rest)
    routed = RoutedStream("cloud", "default", backend, "cloud/0", first, rest, "acme")
    traced = _StreamTrace(context.get_current(), None, {"gen_ai.request.model": "m"})
    events = _stream_events(routed, ResponseShape.new(True, "id", "m"), False, 0.0, admission, traced, None, None)
    assert (await anext(events)).startswith("data: ")  # the opening event, held
    await events.aclose()  # the client let go: closed right there
    assert admission.released
    again = await controller.admit("acme")  # the slot is free: no 429
    await again.release(0)
