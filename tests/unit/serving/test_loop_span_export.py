"""serving/telemetry.py's LoopEncodingSpanProcessor: what it sends is the message the library's encoder builds from
the same spans (the oracle), whether they ended on an event loop (encoded there, a few at a time) or where none runs;
it keeps at most max_queue spans; shutdown sends what is still waiting; a value our encoder does not write costs that
attribute, not the span."""

import asyncio
import threading

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as library_encode
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from serving import telemetry
from serving.telemetry import EncodedBatch, LoopEncodingSpanProcessor


class Recording:
    """An exporter that keeps each request it is given."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        self.counts: list[int] = []
        self.shut = False

    def export(self, batch: EncodedBatch):
        self.requests.append(ExportTraceServiceRequest.FromString(batch.data))
        self.counts.append(len(batch))

    def shutdown(self) -> None:
        self.shut = True


def _spans_of(requests: list[ExportTraceServiceRequest]) -> dict[bytes, object]:
    return {s.span_id: s for r in requests for rs in r.resource_spans for ss in rs.scope_spans for s in ss.spans}


def _tracing(max_batch=256, delay_s=60.0, max_queue=2048):
    exporter = Recording()
    processor = LoopEncodingSpanProcessor(exporter, max_batch=max_batch, delay_s=delay_s, max_queue=max_queue)
    oracle = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "tandem-gateway"}))
    provider.add_span_processor(processor)
    provider.add_span_processor(SimpleSpanProcessor(oracle))
    return provider, processor, exporter, oracle


def _request(provider, i: int) -> None:
    server = provider.get_tracer("gateway.request_span")
    dispatch = provider.get_tracer("gateway.dispatch")
    with server.start_as_current_span("POST /v1/completions") as span:
        span.set_attributes({"tandem.request": i, "tandem.candidates": ["grpc://a:1", "grpc://b:2"], "ok": True})
        with dispatch.start_as_current_span("gateway.backend_call") as call:
            call.set_attribute("tandem.attempt", 1)


async def _serve_after(provider, first, requests: int) -> None:
    """`first()`, then `requests` requests' spans, the loop running its callbacks between them."""
    first()
    await asyncio.sleep(0)
    for i in range(requests):
        _request(provider, i)
        await asyncio.sleep(0)


def _same_as_the_library(exporter: Recording, oracle: InMemorySpanExporter) -> None:
    finished = oracle.get_finished_spans()
    ours = _spans_of(exporter.requests)
    theirs = _spans_of([library_encode(finished)])
    assert len(ours) == len(finished) and ours == theirs


def test_spans_ended_on_an_event_loop_are_sent_as_the_library_encodes_them():
    provider, processor, exporter, oracle = _tracing(max_batch=40)

    async def serve():
        for i in range(100):
            _request(provider, i)
            await asyncio.sleep(0)  # the loop runs its callbacks between requests, as a server's does

    asyncio.run(serve())
    processor.shutdown()
    _same_as_the_library(exporter, oracle)
    assert max(exporter.counts) <= 40 and sum(exporter.counts) == 200
    assert exporter.shut


def test_spans_ended_where_no_loop_runs_are_sent_too():
    provider, processor, exporter, oracle = _tracing()
    threads = [threading.Thread(target=_request, args=(provider, i)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    _request(provider, 99)  # the test's own thread, no loop
    processor.force_flush()
    _same_as_the_library(exporter, oracle)
    processor.shutdown()


def test_a_full_batch_leaves_without_waiting_for_the_delay():
    provider, processor, exporter, _ = _tracing(max_batch=16, delay_s=60.0)

    async def serve():
        for i in range(8):  # 16 spans
            _request(provider, i)
        await asyncio.sleep(0.05)

    asyncio.run(serve())
    for _ in range(100):
        if exporter.counts:
            break
        threading.Event().wait(0.02)
    assert exporter.counts == [16]
    processor.shutdown()


def test_at_most_max_queue_spans_wait_and_the_rest_are_counted():
    provider, processor, exporter, _ = _tracing(max_batch=1000, max_queue=10)

    async def serve():
        for i in range(20):  # 40 spans ended before the loop gets to encode any
            _request(provider, i)

    asyncio.run(serve())
    processor.shutdown()
    assert sum(exporter.counts) == 10
    assert processor.dropped == 30


def test_shutdown_sends_spans_the_loop_never_got_to():
    provider, processor, exporter, oracle = _tracing()

    loop = asyncio.new_event_loop()
    # Ended in the loop's last batch of callbacks: the callback that would encode them never runs.
    loop.call_soon(lambda: (_request(provider, 1), loop.stop()))
    loop.run_forever()
    loop.close()
    assert not exporter.requests
    processor.shutdown()
    _same_as_the_library(exporter, oracle)


def test_a_value_our_encoder_does_not_write_costs_that_attribute_not_the_span(monkeypatch):
    provider, processor, exporter, oracle = _tracing()
    tracer = provider.get_tracer("gateway.request_span")

    async def serve():
        with tracer.start_as_current_span("POST /v1/completions") as span:
            span.set_attribute("tandem.fine", "yes")
            span._attributes._dict["tandem.odd"] = 2**70  # past int64: our encoder refuses it, the library drops it

    asyncio.run(serve())
    processor.shutdown()
    (sent,) = _spans_of(exporter.requests).values()
    keys = {kv.key for kv in sent.attributes}
    assert "tandem.fine" in keys and "tandem.odd" not in keys


def test_the_gateway_s_exporter_sends_an_encoded_batch_as_it_is():
    exporter = telemetry._otlp_exporter()
    try:
        assert exporter._translate_data(EncodedBatch(b"\x0a\x00", 1)) == b"\x0a\x00"
    finally:
        exporter.shutdown()


def test_a_lone_surrogate_in_a_name_or_status_is_written_and_the_spans_after_it_go_on():
    """A backend's error text read from JSON can hold a lone surrogate, and the status description holds the error:
    that span once stopped the loop's encoding for good (a review). It is written with U+FFFD now."""
    provider, processor, exporter, _ = _tracing()
    tracer = provider.get_tracer("gateway.dispatch")

    def odd_span():
        try:
            with tracer.start_as_current_span("gateway.backend_call \ud800"):
                raise ValueError("backend said: bad \ud800 input")
        except ValueError:
            pass

    asyncio.run(_serve_after(provider, odd_span, 20))
    processor.shutdown()
    sent = _spans_of(exporter.requests)
    assert len(sent) == 41
    odd = next(s for s in sent.values() if s.name.startswith("gateway.backend_call ") and not s.attributes)
    assert odd.name == "gateway.backend_call \ufffd" and "\ufffd" in odd.status.message


def test_a_span_no_encoder_writes_is_dropped_alone(monkeypatch):
    provider, processor, exporter, _ = _tracing()

    def refuses(span):
        if span.name == "refused":
            raise TypeError("ours does not write this")  # so the library's encoder is asked next
        return real(span)

    real = telemetry.encoded_span
    monkeypatch.setattr(telemetry, "encoded_span", refuses)
    monkeypatch.setattr(
        "opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans",
        lambda spans: (_ for _ in ()).throw(RuntimeError("nor this")),
    )

    def refused_span():
        with provider.get_tracer("t").start_as_current_span("refused"):
            pass

    asyncio.run(_serve_after(provider, refused_span, 5))
    with provider.get_tracer("t").start_as_current_span("refused"):  # off the loop: span.end() does not raise
        pass
    processor.shutdown()
    assert len(_spans_of(exporter.requests)) == 10
    assert processor.unencodable == 2
