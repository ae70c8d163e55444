"""The cloud worker: a torch serving engine behind the Worker gRPC service."""
