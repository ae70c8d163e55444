"""Tracing set-up for every Tandem process, driven by the standard OTEL_* variables.

OTEL_TRACES_EXPORTER picks exporters (comma-separated: otlp, console, none).
Unset, it is `otlp` when OTEL_EXPORTER_OTLP_ENDPOINT (or its traces variant)
is set and `none` otherwise, so a laptop without a collector is not flooded
with connection errors. The OTLP exporter (gRPC) reads its own OTEL_EXPORTER_OTLP_*
variables. W3C trace context is the propagator, across HTTP and gRPC.
"""

import asyncio
import collections
import logging
import os
import threading
import time

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

from serving.otlp_encode import assemble, encoded_span

log = logging.getLogger(__name__)


def _exporter_names() -> list[str]:
    configured = os.environ.get("OTEL_TRACES_EXPORTER")
    if configured is None:
        has_endpoint = "OTEL_EXPORTER_OTLP_ENDPOINT" in os.environ or "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT" in os.environ
        configured = "otlp" if has_endpoint else "none"
    return [name.strip() for name in configured.split(",") if name.strip() and name.strip() != "none"]


def _make_exporter(name: str) -> SpanExporter:
    if name == "console":
        return ConsoleSpanExporter()
    if name == "otlp":
        return _otlp_exporter()
    raise ValueError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (use otlp, console or none)")


def _otlp_exporter() -> SpanExporter:
    """The OTLP/gRPC exporter (its OTEL_EXPORTER_OTLP_* settings, retries and reconnects as they are), sending what
    serving/otlp_encode.py writes instead of what the library's encoder builds: the same message, several times
    cheaper to make."""
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    class EncodedTraceServiceStub:
        """TraceService's stub for a request already encoded (bytes go on the wire as they are)."""

        def __init__(self, channel) -> None:
            self.Export = channel.unary_unary(
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                response_deserializer=ExportTraceServiceResponse.FromString,
            )

    class Exporter(OTLPSpanExporter):
        def __init__(self) -> None:
            super().__init__()
            self._stub = EncodedTraceServiceStub  # the exporter makes its stub again from this when it reconnects
            self._client = EncodedTraceServiceStub(self._channel)

        def _translate_data(self, data) -> bytes:
            if isinstance(data, EncodedBatch):  # LoopEncodingSpanProcessor's: encoded already
                return data.data
            # In parts of ENCODE_CHUNK_SPANS, the GIL handed back between them: one export's encoding would hold the
            # event loop for its whole length (2.4 ms at 256 spans). Requests joined are one request: its only
            # field is repeated, so the collector reads the resource's spans in two lists instead of one.
            parts = []
            for start in range(0, len(data), ENCODE_CHUNK_SPANS):
                if start:
                    time.sleep(0)  # releases the GIL; a thread waiting for it (the event loop) takes it
                parts.append(assemble([_span_item(span) for span in data[start : start + ENCODE_CHUNK_SPANS]]))
            return b"".join(parts)

    return Exporter()


def _span_item(span) -> tuple:
    """`encoded_span`'s item for `assemble`; for a span holding a value serving/otlp_encode.py does not write (a
    dict, an int past int64, which a caller can send), the library's bytes for it, which drop that attribute alone."""
    try:
        return encoded_span(span)
    except (TypeError, ValueError):
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as library_encode

        span_bytes = library_encode([span]).resource_spans[0].scope_spans[0].spans[0].SerializeToString()
        return span.resource, span.instrumentation_scope, span_bytes


class EncodedBatch:
    """Spans already encoded (a request's bytes), as the exporter's `export` takes them: `len` is their count."""

    __slots__ = ("data", "spans")

    def __init__(self, data: bytes, spans: int) -> None:
        self.data, self.spans = data, spans

    def __len__(self) -> int:
        return self.spans


class LoopEncodingSpanProcessor(SpanProcessor):
    """Batches of spans for an exporter, each span encoded on the event loop that ended it, a few at a time between
    the loop's other work; the batch put together and sent from a thread of its own.

    The SDK's BatchSpanProcessor encodes in its export thread, and the event loop then waits for the GIL while it
    does (a request arriving mid-encode waited up to a chunk's 0.6 ms, and the hand-offs cost the loop too): the
    gateway's added p99 and part of its rate (docs/benchmarks.md). Here the loop encodes each span (`encoded_span`,
    ~9 µs) in callbacks of at most ENCODE_SLICE spans, so a request waits at most one slice, and the thread only joins
    bytes and makes the gRPC call, which leaves the GIL while it waits. A span ended where no loop runs (a thread, the
    CLI, shutdown) is encoded at once where it ended. At most `max_queue` spans wait, as in the SDK (more are dropped
    and counted in the log at shutdown); a batch leaves at `max_batch` spans or every `delay_s`."""

    def __init__(self, exporter, max_batch: int, delay_s: float, max_queue: int) -> None:
        self._exporter, self._max_batch, self._delay_s, self._max_queue = exporter, max_batch, delay_s, max_queue
        self._ended = collections.deque()  # spans the loop has yet to encode
        self._encoded = collections.deque()  # encoded_span items waiting for the thread
        self._loop = None  # the loop whose callback is scheduled, while one is
        self._wake = threading.Event()
        self._export_lock = threading.Lock()  # one export at a time: the thread's, or a flush's
        self._stopped = False
        self.dropped = 0  # spans over max_queue
        self.unencodable = 0  # spans neither encoder could write
        self._thread = threading.Thread(target=self._run, name="OtelLoopSpanExport", daemon=True)
        self._thread.start()

    def on_start(self, span, parent_context=None) -> None:
        pass

    def on_end(self, span) -> None:
        if self._stopped or not (span.context and span.context.trace_flags.sampled):
            return
        if len(self._ended) + len(self._encoded) >= self._max_queue:
            self.dropped += 1
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is None or (self._loop is not None and loop is not self._loop):
            if (item := self._encode(span)) is not None:  # no loop here (or another one's): encoded where it ended
                self._encoded.append(item)
                self._wake_if_full()
            return
        self._ended.append(span)
        if self._loop is None:
            self._loop = loop
            loop.call_soon(self._encode_some)

    def _encode_some(self) -> None:
        ended, encoded = self._ended, self._encoded
        try:
            for _ in range(ENCODE_SLICE):
                try:
                    span = ended.popleft()
                except IndexError:  # none left (a flush from another thread may have taken them)
                    break
                if (item := self._encode(span)) is not None:
                    encoded.append(item)
        finally:  # whatever happened, the spans after these are encoded in turn
            if ended:
                self._loop.call_soon(self._encode_some)
            else:
                self._loop = None
        self._wake_if_full()

    def _wake_if_full(self) -> None:
        if len(self._encoded) >= self._max_batch:
            self._wake.set()

    def _encode(self, span) -> tuple | None:
        """The span's item for `assemble`; None for one that no encoder can write (logged once), which costs that
        span alone, never the loop's encoding of those after it or the caller of `span.end()`."""
        try:
            return _span_item(span)
        except Exception:  # noqa: BLE001 - a span no encoder writes is dropped; tracing must not fail a request
            self.unencodable += 1
            if self.unencodable == 1:
                log.warning("tracing: span %r dropped: it cannot be encoded", span.name, exc_info=True)
            return None

    def _run(self) -> None:
        while not self._stopped:
            self._wake.wait(self._delay_s)
            self._wake.clear()
            self._export_waiting()

    def _export_waiting(self) -> None:
        with self._export_lock:
            encoded = self._encoded
            while encoded:
                items = [encoded.popleft() for _ in range(min(self._max_batch, len(encoded)))]
                try:
                    self._exporter.export(EncodedBatch(assemble(items), len(items)))
                except Exception:  # noqa: BLE001 - the exporter logs its own failures; a bug here must not end the thread
                    log.exception("span export failed")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        while self._ended:  # the loop's share, where the loop may be gone (shutdown)
            try:
                span = self._ended.popleft()
            except IndexError:
                break
            if (item := self._encode(span)) is not None:
                self._encoded.append(item)
        self._export_waiting()
        return True

    def shutdown(self) -> None:
        if self._stopped:
            return
        self.force_flush()
        self._stopped = True
        self._wake.set()
        self._thread.join(timeout=5)
        if self.dropped:
            log.warning("tracing: %d spans dropped (more than %d waiting for export)", self.dropped, self._max_queue)
        self._exporter.shutdown()


ENCODE_SLICE = 16  # spans a loop callback encodes (~0.15 ms): the longest a request waits on them
EXPORT_BATCH_SPANS = 256  # a gRPC export costs ~0.7 ms of CPU whatever it carries: 256 spans, a fourth as many
ENCODE_CHUNK_SPANS = 64  # ~0.6 ms of encoding: the longest the export thread holds the GIL from the event loop


# An attribute's value is cut at this many characters unless OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT or
# OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT says otherwise (the SDK's default: no limit). A caller's 64 KB URL path on each of
# 70 requests without a key made one export over a collector's 4 MiB message limit, which dropped the whole batch:
# every other request's spans with it (a review).
ATTRIBUTE_VALUE_CHARS = 8192


def span_limits() -> SpanLimits:
    """The SDK's limits from the OTEL_* variables, the length of an attribute's value ATTRIBUTE_VALUE_CHARS unless
    they set one."""
    if "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT" in os.environ or "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT" in os.environ:
        return SpanLimits()
    return SpanLimits(max_attribute_length=ATTRIBUTE_VALUE_CHARS, max_span_attribute_length=ATTRIBUTE_VALUE_CHARS)


def setup_tracing(service_name: str, encode_on_loop: bool = False) -> TracerProvider:
    """Install this process's tracer provider; call once, at start-up. `encode_on_loop`: OTLP spans encoded on the
    event loop that ends them (LoopEncodingSpanProcessor), for a process whose spans end on one loop (the gateway)."""
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)})
    provider = TracerProvider(resource=resource, span_limits=span_limits())
    names = _exporter_names()
    # Batches of 256 spans unless OTEL_BSP_MAX_EXPORT_BATCH_SIZE says otherwise, encoded 64 at a time: encoding the
    # SDK's default 512 in one go held the GIL for about 10 ms, which every request arriving meanwhile waited out
    # (the gateway's p99 went from 2.5 to 15 ms with export on; bench/gateway_overhead.py, docs/benchmarks.md).
    batch = None if "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" in os.environ else EXPORT_BATCH_SPANS
    for name in names:
        if name == "otlp" and encode_on_loop:
            defaults = BatchSpanProcessor  # the OTEL_BSP_* variables, read (and checked) as the SDK reads them
            processor = LoopEncodingSpanProcessor(
                _make_exporter(name),
                max_batch=batch or defaults._default_max_export_batch_size(),
                delay_s=defaults._default_schedule_delay_millis() / 1000,
                max_queue=defaults._default_max_queue_size(),
            )
        else:
            processor = BatchSpanProcessor(_make_exporter(name), max_export_batch_size=batch)
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    log.info("tracing for %s: exporters %s", service_name, names or ["none"])
    return provider


def shutdown_tracing() -> None:
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()  # flushes what the batch processors still hold
