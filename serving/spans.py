"""Spans at a fraction of the SDK's cost, for the request path: `get_tracer(__name__)` instead of
`trace.get_tracer(__name__)`, the same `start_span` and `start_as_current_span`.

The OpenTelemetry SDK spends ~14 µs starting and ending one span here and ~2 µs on each attribute (a sampler asked
through three layers, a lock per attribute, bounded lists, a second copy to a ReadableSpan at the end), and a
gateway request makes eight spans on its event loop: a fifth of the request's CPU, which bounds how many requests
one process serves (bench/gateway_overhead.py, docs/benchmarks.md). Where the answer is known without asking, this
records the span in plain fields and hands the SDK's processors the ReadableSpan the SDK would have made, with
the same ids, flags, trace state, attributes, events, status and scope; exporters and processors see no difference
(tests/unit/serving/test_spans.py records the same work both ways and compares what they receive).

The answer is known when the provider is the SDK's with its default sampler shape, ParentBased with ALWAYS_ON for
sampled parents and at the root, ALWAYS_OFF for unsampled parents (OTEL_TRACES_SAMPLER unset, or
`parentbased_always_on`), and the tracer is enabled. Anything else (another sampler, a no-op or foreign provider,
the SDK disabled) goes through the SDK's own tracer, unchanged. Not mirrored: the SDK's self-metrics
(`OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED`), off by default.
"""

import functools
import inspect
import logging
import threading
import traceback
from time import perf_counter, time_ns
from types import MappingProxyType

from opentelemetry import context as context_api
from opentelemetry import trace
from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import Event, ReadableSpan, SynchronousMultiSpanProcessor, sampling
from opentelemetry.sdk.trace import Tracer as SdkTracer
from opentelemetry.sdk.util import BoundedList
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags

log = logging.getLogger(__name__)
_PRIMITIVE = (str, bool, int, float)
_SAMPLED = TraceFlags.SAMPLED
_RANDOM = TraceFlags.RANDOM_TRACE_ID


class Tracer:
    """A tracer with the API's `start_span` and `start_as_current_span`, cheap where it can be (the module doc)."""

    def __init__(self, name: str, provider: trace.TracerProvider | None = None) -> None:
        """`provider`: the global one (followed as it changes, as the API's tracers do) unless one is given."""
        self._name, self._given = name, provider
        self._proxy = provider.get_tracer(name) if provider is not None else trace.get_tracer(name)
        self._provider = None
        self._fast: SdkTracer | None = None  # the SDK tracer to record for, where the shortcut holds

    def _resolve(self) -> SdkTracer | None:
        provider = self._given or trace.get_tracer_provider()
        if provider is not self._provider:
            self._provider, self._fast = provider, None
            real = self._proxy if self._given is not None else provider.get_tracer(self._name)
            if isinstance(real, SdkTracer) and _default_sampler(real.sampler):
                self._fast = real
        fast = self._fast
        return fast if fast is not None and fast._is_enabled() else None

    def start_span(
        self,
        name: str,
        context: context_api.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: dict | None = None,
        links=(),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
    ) -> trace.Span:
        sdk = self._resolve()
        if sdk is None:
            return self._proxy.start_span(
                name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception
            )
        parent = trace.get_current_span(context).get_span_context()
        if parent is not None and parent.is_valid:
            if not parent.trace_flags.sampled:  # ALWAYS_OFF under an unsampled parent: the SDK's no-op span
                flags = TraceFlags(parent.trace_flags & _RANDOM)
                return trace.NonRecordingSpan(
                    SpanContext(parent.trace_id, sdk.id_generator.generate_span_id(), False, flags, parent.trace_state)
                )
            trace_id, state = parent.trace_id, parent.trace_state
            flags = TraceFlags(_SAMPLED | parent.trace_flags & _RANDOM)
        else:  # a root: ALWAYS_ON
            parent = None
            trace_id = sdk.id_generator.generate_trace_id()
            flags = TraceFlags(_SAMPLED | _RANDOM) if sdk.id_generator.is_trace_id_random() else TraceFlags(_SAMPLED)
            state = None
        span_context = SpanContext(trace_id, sdk.id_generator.generate_span_id(), False, flags, state)
        processors = sdk.span_processor
        if type(processors) is SynchronousMultiSpanProcessor and not processors._span_processors:
            # No exporter (no collector configured: `make up`'s default): nothing would read the span. Its context
            # still goes on (X-Trace-Id, traceparent to the workers), sampled as the SDK's would be; the work of
            # recording it, and the attributes callers compute only for a recording span, is skipped.
            return trace.NonRecordingSpan(span_context)
        span = Span(sdk, name, span_context, parent, kind, record_exception, set_status_on_exception)
        if attributes:
            span.set_attributes(attributes)
        for link in links or ():  # None, as the API's signature has it, is none
            span.add_link(link.context, link.attributes)
        span._start = start_time if start_time is not None else time_ns()
        processors.on_start(span, parent_context=context)
        return span

    def start_as_current_span(
        self,
        name: str,
        context: context_api.Context | None = None,
        kind: SpanKind = SpanKind.INTERNAL,
        attributes: dict | None = None,
        links=(),
        start_time: int | None = None,
        record_exception: bool = True,
        set_status_on_exception: bool = True,
        end_on_exit: bool = True,
    ) -> "_CurrentSpan":
        """The SDK's `start_as_current_span` (a span, then `trace.use_span`) as a plain context manager: the
        generator-based one cost ~5 µs a span. As a decorator, a span per call (coroutine functions included)."""
        args = (name, context, kind, attributes, links, start_time, record_exception, set_status_on_exception)
        return _CurrentSpan(self, args, end_on_exit, record_exception, set_status_on_exception)


class _CurrentSpan:
    """What `trace.use_span` does: the span current inside, an Exception (not a BaseException: a cancellation is
    not an error) recorded on it with status ERROR, and the span ended on the way out. The span starts on entry."""

    __slots__ = ("_tracer", "_args", "_end", "_record", "_status", "_span", "_token")

    def __init__(self, tracer: Tracer, args: tuple, end_on_exit: bool, record: bool, set_status: bool) -> None:
        self._tracer, self._args, self._end, self._record, self._status = tracer, args, end_on_exit, record, set_status
        self._span = self._token = None

    def __enter__(self) -> trace.Span:
        self._span = span = self._tracer.start_span(*self._args)
        self._token = context_api.attach(trace.set_span_in_context(span))
        return span

    def __exit__(self, exc_type, exc, traceback_) -> None:
        span = self._span
        try:
            context_api.detach(self._token)
            if isinstance(exc, Exception) and span.is_recording():
                if self._record:
                    span.record_exception(exc)
                if self._status:
                    span.set_status(Status(StatusCode.ERROR, f"{type(exc).__name__}: {exc}"))
        finally:
            if self._end:
                span.end()

    def __call__(self, func):
        """As a decorator: each call in a span of its own, as the SDK's context manager decorates."""
        fields = (self._tracer, self._args, self._end, self._record, self._status)
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def traced_coroutine(*a, **k):
                with _CurrentSpan(*fields):
                    return await func(*a, **k)

            return traced_coroutine

        @functools.wraps(func)
        def traced(*a, **k):
            with _CurrentSpan(*fields):
                return func(*a, **k)

        return traced


def get_tracer(name: str, provider: trace.TracerProvider | None = None) -> Tracer:
    return Tracer(name, provider)


def _default_sampler(sampler) -> bool:
    """ParentBased(ALWAYS_ON): sampled parents and roots sampled, unsampled parents not."""
    return (
        type(sampler) is sampling.ParentBased
        and sampler._root is sampling.ALWAYS_ON
        and sampler._remote_parent_sampled is sampling.ALWAYS_ON
        and sampler._local_parent_sampled is sampling.ALWAYS_ON
        and sampler._remote_parent_not_sampled is sampling.ALWAYS_OFF
        and sampler._local_parent_not_sampled is sampling.ALWAYS_OFF
    )


class Span(trace.Span):
    """A recording span in plain fields; at `end` the SDK's processors get the ReadableSpan the SDK would make. The
    SDK's span's read side (name, context, parent, kind, attributes, events, links, status, times, resource, scope)
    is here for processors and for callers of `trace.get_current_span()`."""

    __slots__ = ("_sdk", "_name", "_context", "_parent", "_kind", "_attributes", "_dropped", "_events", "_links",
                 "_status", "_start", "_end", "_record_exception", "_set_status_on_exception", "_lock")  # fmt: skip

    def __init__(self, sdk: SdkTracer, name, context, parent, kind, record_exception, set_status_on_exception):
        self._sdk, self._name, self._context, self._parent, self._kind = sdk, name, context, parent, kind
        self._attributes: dict = {}
        self._dropped = 0  # attributes past the limit, as the SDK counts them
        self._events: BoundedList | tuple = ()  # a BoundedList from the first event on, as the SDK keeps them
        self._links: BoundedList | tuple = ()
        self._status = Status(StatusCode.UNSET)
        self._start = self._end = None
        self._record_exception, self._set_status_on_exception = record_exception, set_status_on_exception
        self._lock = threading.Lock()  # as the SDK's: a span may be ended or written from two threads

    def get_span_context(self) -> SpanContext:
        return self._context

    context = property(get_span_context)
    name = property(lambda self: self._name)
    parent = property(lambda self: self._parent)
    kind = property(lambda self: self._kind)
    attributes = property(lambda self: MappingProxyType(self._attributes))
    events = property(lambda self: tuple(self._events))
    links = property(lambda self: tuple(self._links))
    status = property(lambda self: self._status)
    start_time = property(lambda self: self._start)
    end_time = property(lambda self: self._end)
    resource = property(lambda self: self._sdk.resource)
    instrumentation_scope = property(lambda self: self._sdk._instrumentation_scope)

    def is_recording(self) -> bool:
        return self._end is None

    def set_attribute(self, key: str, value) -> None:
        limits = self._sdk._span_limits
        kind, most = type(value), limits.max_span_attribute_length
        if type(key) is str and key and (kind is not str or most is None or len(value) <= most):
            if kind in _PRIMITIVE:
                self._keep(key, value, limits.max_span_attributes)
                return
            if (kind is list or kind is tuple) and not value:
                self._keep(key, (), limits.max_span_attributes)  # as the SDK keeps an empty sequence
                return
            if (kind is list or kind is tuple) and (first := type(value[0])) in _PRIMITIVE:
                # A list of one primitive type (routing's pools and candidates): kept as a tuple, as the SDK does.
                if all(type(v) is first for v in value) and (
                    first is not str or most is None or all(len(v) <= most for v in value)
                ):
                    self._keep(key, tuple(value), limits.max_span_attributes)
                    return
        if not key or not isinstance(key, str):  # the SDK's set_attribute: dropped, counted, said
            log.warning("invalid key `%s`. must be non-empty string. Dropping key from attributes.", key)
            with self._lock:
                self._dropped += self._end is None
            return
        # Anything else as the SDK's BoundedAttributes cleans it: sequences made tuples, mappings kept, strings
        # cut to the length limit, other values by their str().
        one = BoundedAttributes(None, {key: value}, immutable=False, max_value_len=limits.max_span_attribute_length)
        if key in one:
            self._keep(key, one[key], limits.max_span_attributes)

    def _keep(self, key: str, value, most: int | None) -> None:
        """As BoundedAttributes stores a value: a key set again moves to the end; when full, the oldest goes."""
        with self._lock:
            if self._end is not None:
                ended = True
            else:
                ended = False
                attributes = self._attributes
                if key in attributes:
                    del attributes[key]
                elif most is not None and len(attributes) >= most:
                    self._dropped += 1
                    if most == 0:
                        return
                    del attributes[next(iter(attributes))]
                attributes[key] = value
        if ended:
            log.warning("Setting attribute on ended span.")

    def set_attributes(self, attributes) -> None:
        if not all(type(key) is str and key for key in attributes):
            # The SDK's set_attributes (and attributes= at the start) make keys strings, and drop empty ones.
            cleaned = BoundedAttributes(
                None, attributes, max_value_len=self._sdk._span_limits.max_span_attribute_length
            )
            with self._lock:
                self._dropped += cleaned.dropped * (self._end is None)
            attributes = cleaned
        for key, value in attributes.items():
            self.set_attribute(key, value)

    def _ended(self, what: str) -> bool:
        if self._end is None:
            return False
        log.warning("Tried calling %s on an ended span.", what)
        return True

    def add_event(self, name: str, attributes=None, timestamp: int | None = None) -> None:
        if self._ended("_add_event"):
            return
        limits = self._sdk._span_limits
        bounded = BoundedAttributes(limits.max_event_attributes, attributes, max_value_len=limits.max_attribute_length)
        with self._lock:
            if type(self._events) is tuple:  # the SDK's list: when full, the oldest goes, and is counted
                self._events = BoundedList(limits.max_events)
            self._events.append(Event(name, bounded, timestamp if timestamp is not None else time_ns()))

    def add_link(self, context: SpanContext, attributes=None) -> None:
        if not (context and (context.is_valid or attributes or context.trace_state)):
            return  # what the SDK takes for a link
        if self._ended("add_link"):
            return
        limits = self._sdk._span_limits
        bounded = BoundedAttributes(limits.max_link_attributes, attributes, max_value_len=limits.max_attribute_length)
        with self._lock:
            if type(self._links) is tuple:
                self._links = BoundedList(limits.max_links)
            self._links.append(Link(context, bounded))

    def update_name(self, name: str) -> None:
        if not self._ended("update_name"):
            self._name = name

    def set_status(self, status, description: str | None = None) -> None:
        if self._ended("set_status") or self._status.status_code is StatusCode.OK:
            return
        if isinstance(status, Status):
            if status.status_code is not StatusCode.UNSET:
                if description is not None:
                    log.warning(
                        "Description %s ignored. Use either `Status` or `(StatusCode, Description)`", description
                    )
                self._status = status
        elif isinstance(status, StatusCode) and status is not StatusCode.UNSET:
            self._status = Status(status, description)

    def record_exception(self, exception: BaseException, attributes=None, timestamp=None, escaped=False) -> None:
        module, qualname = type(exception).__module__, type(exception).__qualname__
        recorded = {
            "exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        if attributes:
            recorded.update(attributes)
        self.add_event("exception", recorded, timestamp)

    def end(self, end_time: int | None = None) -> None:
        with self._lock:
            ended = self._end is not None
            if not ended:
                self._end = end_time if end_time is not None else time_ns()
        if ended:
            log.warning("Calling end() on an ended span.")
            return
        sdk = self._sdk
        processor = sdk.span_processor
        processor._on_ending(self)
        readable = ReadableSpan(
            name=self._name,
            context=self._context,
            parent=self._parent,
            resource=sdk.resource,
            attributes=self._attributes if not self._dropped else _counted(self._attributes, self._dropped),
            events=self._events,
            links=self._links,
            kind=self._kind,
            status=self._status,
            start_time=self._start,
            end_time=self._end,
            instrumentation_info=sdk.instrumentation_info,
            instrumentation_scope=sdk._instrumentation_scope,
        )
        processor.on_end(readable)

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        if exc_val is not None and self.is_recording():
            if self._record_exception:
                self.record_exception(exc_val, escaped=True)
            if self._set_status_on_exception:
                self.set_status(Status(StatusCode.ERROR, f"{type(exc_val).__name__}: {exc_val}"))
        super().__exit__(exc_type, exc_val, exc_tb)


def _counted(attributes: dict, dropped: int) -> BoundedAttributes:
    """The attributes with the count of those dropped (ReadableSpan reads it from a BoundedAttributes only)."""
    bounded = BoundedAttributes(None, attributes, immutable=True)
    bounded.dropped = dropped
    return bounded


class _Stage:
    """A gateway stage (tokenize, classify, hint lookup, route plan) recorded on the current span, the request's
    server span: the stage's attributes there, and its time as `tandem.stage_us.<stage>`. A span each
    (`TANDEM_TRACE_STAGES=true`: `Stages.spans`) cost 4-7 % of the gateway's requests a second (docs/benchmarks.md);
    the request's span says the same without the stages' place in the tree."""

    __slots__ = ("_key", "_span", "_started")

    def __init__(self, name: str) -> None:
        self._key = f"tandem.stage_us.{name.removeprefix('gateway.')}"

    def __enter__(self) -> trace.Span:
        span = trace.get_current_span()
        if self._key in (getattr(span, "attributes", None) or ()):
            # Recorded on this span already: a request's later choices or prompts plan again, and the span keeps
            # its first (the first choice's, which the request's own tandem.backend and headers name).
            span = trace.INVALID_SPAN
        self._span = span
        self._started = perf_counter()
        return span

    def __exit__(self, *exc) -> None:
        self._span.set_attribute(self._key, round((perf_counter() - self._started) * 1e6, 1))


class Stages:
    """How the gateway's stages are traced: on the request's span (the default), or a span each (`spans`, from
    TANDEM_TRACE_STAGES at start)."""

    spans = False

    @classmethod
    def stage(cls, stage_tracer, name: str):
        """`with Stages.stage(tracer, "gateway.tokenize") as span:` the span the stage's attributes go on. A stage's
        exception is not recorded on its span: a request's own fault (a 400) put the header or body text its message
        quotes, and a stack trace, in the trace (a review); a fault of the gateway's reaches the server span."""
        if not cls.spans:
            return _Stage(name)
        return stage_tracer.start_as_current_span(name, record_exception=False, set_status_on_exception=False)
