"""serving/otlp_encode.py against the oracle: the message opentelemetry-exporter-otlp-proto-common's own encoder
builds from the same finished spans, compared after parsing both with the official protobuf classes."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as library_encode
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, TraceFlags, TraceState

from serving.otlp_encode import encode_spans
from serving.telemetry import _otlp_exporter

REMOTE_PARENT = SpanContext(
    trace_id=0x4BF92F3577B34DA6A3CE929D0E0E4736,
    span_id=0x00F067AA0BA902B7,
    is_remote=True,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
    trace_state=TraceState([("vendor", "value"), ("other", "x")]),
)


def parsed(data: bytes) -> ExportTraceServiceRequest:
    return ExportTraceServiceRequest.FromString(data)


def record(build, resource: Resource | None = None) -> list[ReadableSpan]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider(resource=resource or Resource.create({"service.name": "tandem-gateway"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    build(provider)
    return list(exporter.get_finished_spans())


def a_request_trace(provider: TracerProvider) -> None:
    """What the gateway makes: a server span under a caller's context, stages, a client span, an error."""
    gateway = provider.get_tracer("gateway.request_span")
    stages = provider.get_tracer("gateway.dispatch", "1.2.3", schema_url="https://opentelemetry.io/schemas/1.21.0")
    parent = trace.set_span_in_context(trace.NonRecordingSpan(REMOTE_PARENT))
    with gateway.start_as_current_span("POST /v1/chat/completions", context=parent, kind=trace.SpanKind.SERVER) as s:
        s.set_attributes({
            "http.response.status_code": 200,
            "tandem.private": False,
            "tandem.cached": True,
            "gen_ai.request.temperature": 0.0,
            "gen_ai.request.top_p": 0.95,
            "tandem.candidates": ["grpc://a:1", "grpc://b:2"],
            "tandem.empty": [],
            "tandem.offsets": [0, -1, 2**62],
            "tandem.weights": [0.5, 1.5],
            "tandem.flags": [True, False],
            "tandem.negative": -42,
            "tandem.text": "naïve 東京 ✓",
            "tandem.blank": "",
        })  # fmt: skip
        with stages.start_as_current_span("gateway.route_plan") as plan:
            plan.add_event("fallback", {"tandem.backend": "grpc://a:1", "tandem.attempt": 2})
            plan.add_event("bare")
        with stages.start_as_current_span("/tandem.worker.v1.Worker/Generate", kind=trace.SpanKind.CLIENT) as call:
            call.set_status(trace.StatusCode.ERROR, "UNAVAILABLE: connection refused")
        link = Link(REMOTE_PARENT, {"tandem.why": "retry"})
        with stages.start_as_current_span("gateway.stream", links=[link]) as stream:
            stream.set_status(trace.StatusCode.OK)
    with gateway.start_as_current_span("edge.register", kind=trace.SpanKind.PRODUCER):
        pass  # a root span


def test_a_request_trace_encodes_to_the_librarys_message():
    spans = record(a_request_trace, Resource.create({"service.name": "tandem-gateway"}, "https://schema/1"))
    assert len(spans) == 5
    assert parsed(encode_spans(spans)) == library_encode(spans)


def test_spans_of_two_resources_and_scopes_group_as_the_library_groups_them():
    spans = record(a_request_trace) + record(a_request_trace, Resource.create({"service.name": "tandem-edge-agent"}))
    ours = parsed(encode_spans(spans))
    assert len(ours.resource_spans) == 2 and len(ours.resource_spans[0].scope_spans) == 2
    assert ours == library_encode(spans)


def test_an_empty_batch_is_an_empty_request():
    assert encode_spans([]) == b"" and parsed(b"") == library_encode([])


attribute_values = st.one_of(
    st.text(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.lists(st.text(max_size=8), max_size=4),
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=4),
    st.lists(st.floats(allow_nan=False), max_size=4),
    st.lists(st.booleans(), max_size=4),
)


@settings(max_examples=200, deadline=None)
@given(attributes=st.dictionaries(st.text(min_size=1, max_size=20), attribute_values, max_size=8), name=st.text())
def test_any_attributes_encode_to_the_librarys_message(attributes, name):
    def build(provider):
        with provider.get_tracer("t").start_as_current_span(name, attributes=attributes) as span:
            span.add_event("e", attributes)

    spans = record(build)
    assert parsed(encode_spans(spans)) == library_encode(spans)


def test_a_value_the_encoder_does_not_write_goes_through_the_librarys_encoder():
    (span,) = record(lambda provider: provider.get_tracer("t").start_span("s").end())
    odd = ReadableSpan(
        name="odd",
        context=span.context,
        resource=span.resource,
        attributes={"tandem.map": {"a": 1}, "tandem.huge": 2**70, "ok": "kept"},
        start_time=span.start_time,
        end_time=span.end_time,
    )
    with pytest.raises((TypeError, ValueError)):
        encode_spans([odd])
    exporter = _otlp_exporter()
    try:
        # The batch is still sent, those attributes dropped as the library drops them.
        sent = parsed(exporter._translate_data([odd, span]))
        assert sent == library_encode([odd, span])
        assert [kv.key for kv in sent.resource_spans[0].scope_spans[0].spans[0].attributes] == ["tandem.map", "ok"]
    finally:
        exporter.shutdown()


def test_values_equal_in_python_but_not_in_otlp_keep_their_own_encoding():
    """The encoder keeps each (key, value)'s bytes for the next span; True == 1 == 1.0 in Python, not on the wire."""

    def build(provider):
        for value in (True, 1, 1.0, "1", 1, True, False, 0):
            provider.get_tracer("t").start_span("s", attributes={"k": value}).end()

    spans = record(build)
    assert parsed(encode_spans(spans)) == library_encode(spans)
    kinds = [
        s.attributes[0].value.WhichOneof("value")
        for s in parsed(encode_spans(spans)).resource_spans[0].scope_spans[0].spans
    ]
    assert kinds == [
        "bool_value",
        "int_value",
        "double_value",
        "string_value",
        "int_value",
        "bool_value",
        "bool_value",
        "int_value",
    ]


def test_an_export_larger_than_one_encoding_part_sends_every_span_in_order():
    """An export of 256 spans is encoded 64 at a time (the GIL handed back between parts) and the parts joined:
    one request holding, scope by scope and in order, every span the library's encoder holds, field for field; a
    part with a value only the library writes falls back alone."""
    from serving.telemetry import ENCODE_CHUNK_SPANS

    spans = []
    while len(spans) < 2 * ENCODE_CHUNK_SPANS + 5:
        spans += record(a_request_trace)
    odd = spans[ENCODE_CHUNK_SPANS + 1]
    odd = ReadableSpan(
        name=odd.name, context=odd.context, parent=odd.parent, resource=odd.resource,
        attributes={**odd.attributes, "tandem.map": {"a": 1}}, instrumentation_scope=odd.instrumentation_scope,
        start_time=odd.start_time, end_time=odd.end_time,
    )  # fmt: skip
    spans[ENCODE_CHUNK_SPANS + 1] = odd
    exporter = _otlp_exporter()
    try:
        sent = parsed(exporter._translate_data(spans))
    finally:
        exporter.shutdown()
    expected = library_encode(spans)

    def flat(request):
        return [
            (resource.resource, scope.scope, span)
            for resource in request.resource_spans
            for scope in resource.scope_spans
            for span in scope.spans
        ]

    def by_scope(request) -> dict:  # each (resource, scope)'s spans, in the order read
        grouped: dict = {}
        for resource, scope, span in flat(request):
            grouped.setdefault((resource.SerializeToString(), scope.SerializeToString()), []).append(span)
        return grouped

    assert len(sent.resource_spans) == 3  # one a part
    # The library groups a scope's spans across the whole batch, the parts within each part: read in order, the same
    assert by_scope(sent) == by_scope(expected)
    assert len(flat(sent)) == len(spans)


def test_a_lone_surrogate_anywhere_is_written_as_u_fffd():
    """A caller's JSON can hold a lone surrogate (`"\\ud800"`), and an error's text carries it into a status and an
    exception event: the library drops such an attribute and fails the whole span where one is in a name or a
    status; ours writes U+FFFD (the span, and every other attribute, as the library writes the same span without)."""

    def build(provider, lone="\ud800"):
        try:
            with provider.get_tracer("t").start_as_current_span(
                f"s{lone}", attributes={"k": f"a{lone}", f"k{lone}": 1}
            ):
                raise ValueError(f"bad {lone} input")
        except ValueError:
            pass

    (odd,) = record(build)
    (clean,) = record(lambda provider: build(provider, lone="\ufffd"))
    sent = parsed(encode_spans([odd])).resource_spans[0].scope_spans[0].spans[0]
    assert sent.name == "s\ufffd" and "\ufffd" in sent.status.message
    assert {kv.key: kv.value.string_value for kv in sent.attributes}["k"] == "a\ufffd"
    expected = library_encode([clean]).resource_spans[0].scope_spans[0].spans[0]
    for field in ("trace_id", "span_id", "start_time_unix_nano", "end_time_unix_nano"):
        expected.ClearField(field), sent.ClearField(field)
    for event in (*expected.events, *sent.events):
        event.ClearField("time_unix_nano")
    assert sent == expected
