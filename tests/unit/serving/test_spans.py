"""serving/spans.py against the OpenTelemetry SDK as the oracle: the same work traced through the SDK's tracer and
through ours must reach the span processors as the same spans (ids and times aside), and where our shortcut does
not hold (another sampler, limits), ours must behave as the SDK does."""

import asyncio

import pytest
from opentelemetry import context, propagate, trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, TracerProvider, sampling
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from serving import spans

CALLER = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def provider_pair(**kwargs):
    """Two providers alike, each with an in-memory exporter."""
    out = []
    for _ in range(2):
        exporter = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": "t"}), **kwargs)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        out.append((provider, exporter))
    return out


def request_like(tracer, carrier: dict | None = None) -> None:
    """What a gateway request does with its tracer: a server span (the caller's child when it sent a
    traceparent), stages as current spans, a client span under one, an error, an event, a renamed span."""
    parent_context = propagate.extract(carrier) if carrier else None
    server = tracer.start_span(
        "POST", context=parent_context, kind=trace.SpanKind.SERVER, attributes={"http.request.method": "POST"}
    )
    token = context.attach(trace.set_span_in_context(server))
    try:
        with tracer.start_as_current_span("gateway.tokenize") as span:
            span.set_attribute("tandem.prompt_tokens", 12)
            span.set_attribute("tandem.pools", ["cloud", "edge"])  # a list: kept as a tuple
            span.set_attribute("tandem.ratio", 0.5)
            for odd in ([1, "a"], [1, 2.5], [], ["a", None], (True, False), [1, True]):
                span.set_attribute(f"tandem.seq{len(odd)}{type(odd).__name__}", odd)
            span.set_attribute("tandem.private", False)
            span.set_attribute("tandem.prompt_tokens", 13)  # set again: moves to the end, as the SDK orders it
            span.set_attribute("tandem.odd", object())  # not an attribute value: the SDK keeps its str()
        with tracer.start_as_current_span("gateway.backend_call", attributes={"tandem.attempt": 1}) as call:
            client = tracer.start_span("/tandem.Worker/Generate", kind=trace.SpanKind.CLIENT, attributes={"a": "b"})
            client.set_status(trace.StatusCode.ERROR, "UNAVAILABLE: down")
            client.set_status(trace.StatusCode.OK)  # OK after ERROR: taken; nothing after OK is
            client.set_status(trace.StatusCode.ERROR, "late")
            client.end()
            call.add_event("retry", {"tandem.backend": "grpc://w:1"}, timestamp=5)
        with pytest.raises(ValueError), tracer.start_as_current_span("gateway.classify") as classify:
            assert trace.get_current_span() is classify
            raise ValueError("boom")
        with pytest.raises(asyncio.CancelledError), tracer.start_as_current_span("gateway.cancelled"):
            raise asyncio.CancelledError  # a BaseException: not recorded as an error
        assert trace.get_current_span() is server
        stream = tracer.start_span("gateway.stream", attributes={"gen_ai.request.model": "m"})
        stream.update_name("gateway.stream.renamed")
        stream.end()
        stream.set_attribute("after", 1)  # ignored: the span has ended
        server.set_attribute("http.response.status_code", 200)
    finally:
        context.detach(token)
        server.end()


def comparable(finished) -> list[tuple]:
    """Each span as a tuple of everything but its random ids and times, with its parent as an index."""
    index = {s.context.span_id: i for i, s in enumerate(finished)}
    out = []
    for s in finished:
        parent = None if s.parent is None else index.get(s.parent.span_id, ("outside", s.parent.span_id))
        events = [(e.name, dict(e.attributes), e.timestamp if e.name != "exception" else None) for e in s.events]
        events = [
            (name, {k: v for k, v in attrs.items() if k != "exception.stacktrace"}, ts) for name, attrs, ts in events
        ]
        out.append((
            s.name, s.kind, parent, int(s.context.trace_flags), s.context.trace_state.to_header(),
            s.context.is_remote, list(s.attributes.items()), s.dropped_attributes, events, s.status.status_code,
            s.status.description, s.instrumentation_scope, s.resource.attributes, s.dropped_events,
            [(link.context, dict(link.attributes)) for link in s.links],
        ))  # fmt: skip
    return out


@pytest.mark.parametrize("carrier", [None, {"traceparent": CALLER, "tracestate": "vendor=1"}])
def test_the_processors_get_what_the_sdk_gives_them(carrier):
    (sdk_provider, sdk_out), (our_provider, our_out) = provider_pair()
    request_like(sdk_provider.get_tracer("gw"), carrier)
    ours = spans.get_tracer("gw", our_provider)
    request_like(ours, carrier)
    assert ours._resolve() is not None, "the shortcut did not run: this compared the SDK with itself"
    sdk_spans, our_spans = sdk_out.get_finished_spans(), our_out.get_finished_spans()
    assert comparable(our_spans) == comparable(sdk_spans)
    assert len(our_spans) == 7
    trace_ids = {s.context.trace_id for s in our_spans}
    assert len(trace_ids) == 1
    if carrier:
        assert trace_ids == {0x4BF92F3577B34DA6A3CE929D0E0E4736}
        assert our_spans[-1].parent.span_id == 0x00F067AA0BA902B7 and our_spans[-1].parent.is_remote
    assert len({s.context.span_id for s in our_spans}) == 7

    # The exporters' own encoder takes ours as it takes the SDK's.
    def names(finished):
        return [s.name for s in encode_spans(finished).resource_spans[0].scope_spans[0].spans]

    assert names(our_spans) == names(sdk_spans)


def test_an_unsampled_caller_gets_no_spans_and_its_flags_go_on():
    (_, _), (our_provider, our_out) = provider_pair()
    tracer = spans.get_tracer("gw", our_provider)
    unsampled = propagate.extract({"traceparent": CALLER[:-2] + "00"})
    span = tracer.start_span("POST", context=unsampled)
    assert not span.is_recording() and not span.get_span_context().trace_flags.sampled
    child = tracer.start_span("child", context=trace.set_span_in_context(span))
    child.end()
    span.end()
    assert our_out.get_finished_spans() == ()
    assert child.get_span_context().trace_id == span.get_span_context().trace_id


@pytest.mark.parametrize(
    "sampler", [sampling.ALWAYS_OFF, sampling.TraceIdRatioBased(0.0), sampling.ParentBased(sampling.ALWAYS_OFF)]
)
def test_another_sampler_is_asked_as_the_sdk_asks_it(sampler):
    (sdk_provider, sdk_out), (our_provider, our_out) = provider_pair(sampler=sampler)
    request_like(sdk_provider.get_tracer("gw"))
    tracer = spans.get_tracer("gw", our_provider)
    request_like(tracer)
    assert tracer._resolve() is None  # the SDK's own path
    assert comparable(our_out.get_finished_spans()) == comparable(sdk_out.get_finished_spans())


def test_limits_drop_and_cut_as_the_sdk_does():
    limits = {"span_limits": SpanLimits(max_span_attributes=3, max_span_attribute_length=4, max_events=1)}
    (sdk_provider, sdk_out), (our_provider, our_out) = provider_pair(**limits)
    for tracer in (sdk_provider.get_tracer("gw"), spans.get_tracer("gw", our_provider)):
        span = tracer.start_span("s", attributes={"a": "abcdefgh", "b": ("long text", "x")})
        for key in "cde":
            span.set_attribute(key, 1)
        span.add_event("one", timestamp=1)
        span.add_event("two", timestamp=2)  # over max_events: the oldest goes
        span.add_link(trace.SpanContext(1, 2, False), {"k": "long value"})
        span.end()
    assert comparable(our_out.get_finished_spans()) == comparable(sdk_out.get_finished_spans())
    (ours,) = our_out.get_finished_spans()
    assert dict(ours.attributes) == {"c": 1, "d": 1, "e": 1} and ours.dropped_attributes == 2


def test_the_global_provider_is_followed(monkeypatch):
    """Module-level tracers are made before the provider is set (at import); they must use it once it is."""
    tracer = spans.get_tracer("late")
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    tracer.start_span("s").end()
    assert [s.name for s in exporter.get_finished_spans()] == ["s"]


def test_the_api_s_edges_as_the_sdk_has_them():
    """A review's list: links=None, a status that is neither Status nor StatusCode, keys that are not strings,
    limits of zero, the attributes read-only, and calls after the end."""
    limits = {"span_limits": SpanLimits(max_events=0, max_links=0)}
    (sdk_provider, sdk_out), (our_provider, our_out) = provider_pair(**limits)
    for tracer in (sdk_provider.get_tracer("gw"), spans.get_tracer("gw", our_provider)):
        span = tracer.start_span("s", links=None, attributes={1: "one", "": "empty", "ok": 1})
        span.set_attributes({2: "two"})
        span.set_attribute(3, "three")  # one at a time: dropped, not made a string
        span.set_status("ERROR")  # neither a Status nor a StatusCode: ignored
        for i in range(3):
            span.add_event(f"e{i}")
            span.add_link(trace.SpanContext(1, 2 + i, False))
        with pytest.raises(TypeError):
            span.attributes["late"] = 1
        span.end()
        span.update_name("renamed")
        span.set_status(trace.StatusCode.ERROR)
        span.end()  # twice: exported once
    assert comparable(our_out.get_finished_spans()) == comparable(sdk_out.get_finished_spans())
    (ours,) = our_out.get_finished_spans()
    assert ours.name == "s" and ours.dropped_events == 3 and ours.dropped_links == 3


async def test_as_a_decorator_each_call_is_a_span_around_the_call():
    (sdk_provider, sdk_out), (our_provider, our_out) = provider_pair()
    for tracer in (sdk_provider.get_tracer("gw"), spans.get_tracer("gw", our_provider)):

        @tracer.start_as_current_span("decorated")
        async def work(tracer=tracer):
            await asyncio.sleep(0.01)
            tracer.start_span("inner").end()

        await work()
        await work()
    assert comparable(our_out.get_finished_spans()) == comparable(sdk_out.get_finished_spans())
    inner, outer = our_out.get_finished_spans()[:2]
    assert inner.parent.span_id == outer.context.span_id and outer.end_time - outer.start_time >= 10_000_000


def test_a_span_ended_from_two_threads_is_exported_once():
    import threading

    (_, _), (our_provider, our_out) = provider_pair()
    tracer = spans.get_tracer("gw", our_provider)
    for _ in range(200):
        span = tracer.start_span("s")
        threads = [threading.Thread(target=span.end) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert len(our_out.get_finished_spans()) == 200


def test_with_no_exporter_nothing_is_recorded_and_the_context_still_goes_on():
    """`make up` without a collector: the provider has no processor, so a recorded span would be thrown away;
    the trace id and the sampled flag still reach the workers (traceparent) and the caller (X-Trace-Id)."""
    provider = TracerProvider()
    tracer = spans.get_tracer("gw", provider)
    caller = propagate.extract({"traceparent": CALLER})
    server = tracer.start_span("POST", context=caller, kind=trace.SpanKind.SERVER)
    child = tracer.start_span("child", context=trace.set_span_in_context(server))
    assert not server.is_recording() and not child.is_recording()
    assert server.get_span_context().trace_id == child.get_span_context().trace_id == 0x4BF92F3577B34DA6A3CE929D0E0E4736
    assert child.get_span_context().trace_flags.sampled
    carrier: dict = {}
    propagate.inject(carrier, context=trace.set_span_in_context(child))
    assert carrier["traceparent"].endswith(f"{child.get_span_context().span_id:016x}-01")
    exporter = InMemorySpanExporter()  # an exporter added later is used from then on
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer.start_span("later").end()
    assert [s.name for s in exporter.get_finished_spans()] == ["later"]


def _stages_of_a_request(provider, spans_each: bool) -> list:
    """A server span, then what the gateway's stages do: tokenize, and route_plan twice (a request's second choice
    plans again), one of them with another pick."""
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = spans.get_tracer("gateway.request_span", provider)
    spans.Stages.spans = spans_each
    try:
        with tracer.start_as_current_span("POST /v1/completions", kind=trace.SpanKind.SERVER):
            with spans.Stages.stage(tracer, "gateway.tokenize") as span:
                span.set_attribute("tandem.prompt_tokens", 96)
            for pick in ("grpc://a:1", "grpc://b:1"):
                with spans.Stages.stage(tracer, "gateway.route_plan") as span:
                    span.set_attribute("tandem.backend", pick)
    finally:
        spans.Stages.spans = False
    return list(exporter.get_finished_spans())


def test_by_default_a_stage_is_recorded_on_the_request_s_span_once():
    finished = _stages_of_a_request(TracerProvider(), spans_each=False)
    (server,) = finished
    assert server.attributes["tandem.prompt_tokens"] == 96
    assert server.attributes["tandem.backend"] == "grpc://a:1"  # the first plan's: a later choice's is not kept
    assert server.attributes["tandem.stage_us.tokenize"] >= 0 and server.attributes["tandem.stage_us.route_plan"] >= 0
    with spans.Stages.stage(spans.get_tracer("t"), "gateway.route_plan") as span:  # no request span: nothing, no error
        span.set_attribute("tandem.backend", "grpc://c:1")


def test_with_spans_each_a_stage_is_a_span_of_its_own():
    finished = _stages_of_a_request(TracerProvider(), spans_each=True)
    names = [s.name for s in finished]
    assert names.count("gateway.route_plan") == 2 and "gateway.tokenize" in names
    server = next(s for s in finished if s.name == "POST /v1/completions")
    assert not any(key.startswith("tandem.stage_us.") for key in server.attributes)
    assert [s.attributes["tandem.backend"] for s in finished if s.name == "gateway.route_plan"] == [
        "grpc://a:1",
        "grpc://b:1",
    ]


def test_a_stage_span_keeps_no_exception_text():
    """A 400 raised in a stage (its message quoting the X-Tandem-Device header or the body) put that text, and a stack
    trace, in the stage's span (a review); the stage's span ends, the exception goes on to the server's handlers."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = spans.get_tracer("gateway", provider)
    spans.Stages.spans = True
    try:
        with pytest.raises(ValueError), spans.Stages.stage(tracer, "gateway.classify"):
            raise ValueError("X-Tandem-Device: npu must be true or false, got 'card 4111111111111111'")
    finally:
        spans.Stages.spans = False
    (stage,) = exporter.get_finished_spans()
    assert stage.name == "gateway.classify" and not stage.events
    assert "4111" not in str(stage.status.description) and stage.status.status_code == trace.StatusCode.UNSET


def test_long_values_are_cut_at_the_limit_and_short_ones_kept_as_they_are():
    provider = TracerProvider(span_limits=SpanLimits(max_span_attribute_length=8))
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with spans.get_tracer("t", provider).start_as_current_span("s") as span:
        span.set_attribute("short", "12345678")
        span.set_attribute("long", "123456789")
        span.set_attribute("names", ["ab", "cd"])
        span.set_attribute("long_names", ["ab", "123456789"])
    (finished,) = exporter.get_finished_spans()
    assert finished.attributes["short"] == "12345678" and finished.attributes["long"] == "12345678"
    assert finished.attributes["names"] == ("ab", "cd") and finished.attributes["long_names"] == ("ab", "12345678")


def test_tracing_cuts_attribute_values_unless_the_variables_say(monkeypatch):
    from serving import telemetry

    monkeypatch.delenv("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", raising=False)
    monkeypatch.delenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", raising=False)
    limits = telemetry.span_limits()
    assert limits.max_span_attribute_length == limits.max_attribute_length == telemetry.ATTRIBUTE_VALUE_CHARS
    monkeypatch.setenv("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "100000")
    assert telemetry.span_limits().max_span_attribute_length == 100000
