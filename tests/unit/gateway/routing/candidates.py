"""Candidates for routing tests, named by host."""

from gateway.routing.candidate import Candidate


def c(name: str, **fields) -> Candidate:
    kind = fields.pop("kind", "cloud")
    return Candidate(f"grpc://{name}:1", fields.pop("healthy", True), kind, **fields)


def names(ranked) -> list[str]:
    return [x.endpoint.split("//")[1].split(":")[0] for x in ranked]
