"""Tracing set-up for every Tandem process, driven by the standard OTEL_* variables.

OTEL_TRACES_EXPORTER picks exporters (comma-separated: otlp, console, none).
Unset, it is `otlp` when OTEL_EXPORTER_OTLP_ENDPOINT (or its traces variant)
is set and `none` otherwise, so a laptop without a collector is not flooded
with connection errors. The OTLP exporter (gRPC) reads its own OTEL_EXPORTER_OTLP_*
variables. W3C trace context is the propagator, across HTTP and gRPC.
"""

import logging
import os
import time

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SpanExporter

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
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans as library_encode
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    from serving.otlp_encode import encode_spans

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
            # In parts of ENCODE_CHUNK_SPANS, the GIL handed back between them: one export's encoding would hold the
            # event loop for its whole length (2.4 ms at 256 spans). Requests joined are one request: its only
            # field is repeated, so the collector reads the resource's spans in two lists instead of one.
            parts = []
            for start in range(0, len(data), ENCODE_CHUNK_SPANS):
                if start:
                    time.sleep(0)  # releases the GIL; a thread waiting for it (the event loop) takes it
                parts.append(self._encoded(data[start : start + ENCODE_CHUNK_SPANS]))
            return b"".join(parts)

        @staticmethod
        def _encoded(spans) -> bytes:
            try:
                return encode_spans(spans)
            except (TypeError, ValueError):
                # A value serving/otlp_encode.py does not write (a dict, an int past int64, a lone surrogate, which a
                # caller can send): the library's encoder drops that attribute alone, not the batch.
                return library_encode(spans).SerializeToString()

    return Exporter()


EXPORT_BATCH_SPANS = 256  # a gRPC export costs ~0.7 ms of CPU whatever it carries: 256 spans, a fourth as many
ENCODE_CHUNK_SPANS = 64  # ~0.6 ms of encoding: the longest the export thread holds the GIL from the event loop


def setup_tracing(service_name: str) -> TracerProvider:
    """Install this process's tracer provider; call once, at start-up."""
    resource = Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)})
    provider = TracerProvider(resource=resource)
    names = _exporter_names()
    # Batches of 256 spans unless OTEL_BSP_MAX_EXPORT_BATCH_SIZE says otherwise, encoded 64 at a time: encoding the
    # SDK's default 512 in one go held the GIL for about 10 ms, which every request arriving meanwhile waited out
    # (the gateway's p99 went from 2.5 to 15 ms with export on; bench/gateway_overhead.py, docs/benchmarks.md).
    batch = None if "OTEL_BSP_MAX_EXPORT_BATCH_SIZE" in os.environ else EXPORT_BATCH_SPANS
    for name in names:
        provider.add_span_processor(BatchSpanProcessor(_make_exporter(name), max_export_batch_size=batch))
    trace.set_tracer_provider(provider)
    log.info("tracing for %s: exporters %s", service_name, names or ["none"])
    return provider


def shutdown_tracing() -> None:
    provider = trace.get_tracer_provider()
    if isinstance(provider, TracerProvider):
        provider.shutdown()  # flushes what the batch processors still hold
