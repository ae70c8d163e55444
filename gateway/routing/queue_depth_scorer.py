"""`queue-depth`: 1 for an idle backend, falling towards 0 as work piles up."""

from typing import Literal

from pydantic import Field

from gateway.routing.candidate import Candidate
from gateway.routing.plugin import Scorer, ScorerConfig


class QueueDepth(ScorerConfig):
    """`1 / (1 + (queued + in flight from this gateway) / half_at)`."""

    type: Literal["queue-depth"] = "queue-depth"
    half_at: float = Field(default=1.0, gt=0, description="the requests waiting or in flight that score 0.5")

    def build(self) -> Scorer:
        if self.half_at == 1.0:
            return queue_depth_scorer
        scale = 1.0 / self.half_at
        return lambda c: 1.0 / (1.0 + (c.queue_depth + c.inflight) * scale)


def queue_depth_scorer(candidate: Candidate) -> float:
    return 1.0 / (1.0 + candidate.queue_depth + candidate.inflight)
