"""`healthy`: keep backends whose last health poll or call succeeded."""

from typing import Literal

from gateway.routing.candidate import Candidate
from gateway.routing.plugin import Filter, FilterConfig


class Healthy(FilterConfig):
    """Drops backends whose last health poll or call failed."""

    type: Literal["healthy"] = "healthy"

    def build(self) -> Filter:
        return healthy_filter


def healthy_filter(candidates: list[Candidate]) -> list[Candidate]:
    return [c for c in candidates if c.is_healthy]
