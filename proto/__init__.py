"""Contracts between processes: the Worker gRPC service and the prefix hash."""
