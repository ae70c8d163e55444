"""What routing plugins see of a backend: a snapshot, gathered before scoring."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Candidate:
    endpoint: str
    is_healthy: bool
    kind: str | None  # as the backend reports it in Stats; None until first heard from
    queue_depth: int = 0  # waiting in the worker (Stats)
    inflight: int = 0  # requests this gateway has open on it
