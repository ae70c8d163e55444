"""The edge agent: an ONNX model on onnxruntime behind the Worker gRPC service."""
