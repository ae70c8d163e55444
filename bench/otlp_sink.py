"""An OTLP/gRPC trace endpoint that accepts and drops spans: what a gateway exporting its traces talks to, in a
process of its own, so the exporting (batching, encoding, the RPC) is part of what a bench measures.

    python bench/otlp_sink.py PORT      # prints "ready" once it listens
"""

import sys
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class _Sink(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):
        return trace_service_pb2.ExportTraceServiceResponse()


def main() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(_Sink(), server)
    server.add_insecure_port(f"127.0.0.1:{int(sys.argv[1])}")
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
