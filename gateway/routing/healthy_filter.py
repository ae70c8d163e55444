"""`healthy`: keep backends whose last health poll or call succeeded."""

from gateway.routing.candidate import Candidate

TYPE_NAME = "healthy"


def healthy_filter(candidates: list[Candidate]) -> list[Candidate]:
    return [c for c in candidates if c.is_healthy]
