"""`prefix-hit`: the fraction of the prompt's full blocks this backend already holds in its KV cache."""

from gateway.routing.candidate import Candidate

TYPE_NAME = "prefix-hit"


def prefix_hit_scorer(candidate: Candidate) -> float:
    if candidate.prompt_blocks == 0:
        return 0.0
    return candidate.prefix_match_blocks / candidate.prompt_blocks
