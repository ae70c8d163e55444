"""`kv-utilization`: 1 for an empty KV pool, 0 for a full one (1 when the backend does not report it)."""

from typing import Literal

from pydantic import Field

from gateway.routing.candidate import Candidate
from gateway.routing.plugin import Scorer, ScorerConfig


class KvUtilization(ScorerConfig):
    """`1 − used / (total × full_at)` KV blocks, as the worker reports (1 when not reported)."""

    type: Literal["kv-utilization"] = "kv-utilization"
    full_at: float = Field(default=1.0, gt=0, le=1, description="the used fraction of KV blocks that scores 0")

    def build(self) -> Scorer:
        if self.full_at == 1.0:
            return kv_utilization_scorer
        full_at = self.full_at
        return lambda c: (
            1.0 - min(1.0, c.kv_blocks_used / (c.kv_blocks_total * full_at)) if c.kv_blocks_total > 0 else 1.0
        )


def kv_utilization_scorer(candidate: Candidate) -> float:
    if candidate.kv_blocks_total <= 0:
        return 1.0
    return 1.0 - min(1.0, candidate.kv_blocks_used / candidate.kv_blocks_total)
