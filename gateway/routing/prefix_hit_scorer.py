"""`prefix-hit`: the fraction of the prompt's full blocks this backend already holds in its KV cache."""

from typing import Literal

from pydantic import Field

from gateway.routing.candidate import Candidate
from gateway.routing.plugin import Scorer, ScorerConfig


class PrefixHit(ScorerConfig):
    """The matched fraction of the prompt's full KV blocks (Redis prefix hints, or the gateway's history)."""

    type: Literal["prefix-hit"] = "prefix-hit"
    min_blocks: int = Field(
        default=0, ge=0, description="a match shorter than this many blocks scores 0 (e.g. a shared system prompt)"
    )

    def build(self) -> Scorer:
        if self.min_blocks == 0:
            return prefix_hit_scorer
        least = self.min_blocks
        return lambda c: prefix_hit_scorer(c) if c.prefix_match_blocks >= least else 0.0


def prefix_hit_scorer(candidate: Candidate) -> float:
    if candidate.prompt_blocks == 0:
        return 0.0
    return candidate.prefix_match_blocks / candidate.prompt_blocks
