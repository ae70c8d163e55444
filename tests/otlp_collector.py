"""A minimal OTLP/gRPC trace collector for tests: real exporters send to it over the wire."""

from concurrent import futures
from dataclasses import dataclass

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


@dataclass(frozen=True)
class CollectedSpan:
    service: str
    name: str
    trace_id: str
    span_id: str
    parent_span_id: str
    attributes: dict


class _Service(trace_service_pb2_grpc.TraceServiceServicer):
    def __init__(self, spans: list[CollectedSpan]) -> None:
        self.spans = spans

    def Export(self, request, context):
        for resource_spans in request.resource_spans:
            service = next(
                (a.value.string_value for a in resource_spans.resource.attributes if a.key == "service.name"), ""
            )
            for scope in resource_spans.scope_spans:
                for span in scope.spans:
                    attributes = {a.key: _value(a.value) for a in span.attributes}
                    self.spans.append(
                        CollectedSpan(
                            service,
                            span.name,
                            span.trace_id.hex(),
                            span.span_id.hex(),
                            span.parent_span_id.hex(),
                            attributes,
                        )
                    )
        return trace_service_pb2.ExportTraceServiceResponse()


def _value(v):
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


class OtlpCollector:
    def __init__(self) -> None:
        self.spans: list[CollectedSpan] = []
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Service(self.spans), self._server)
        self.port = self._server.add_insecure_port("127.0.0.1:0")
        self._server.start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def trace(self, trace_id: str) -> list[CollectedSpan]:
        return [s for s in self.spans if s.trace_id == trace_id]

    def stop(self) -> None:
        self._server.stop(0)
