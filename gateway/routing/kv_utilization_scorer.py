"""`kv-utilization`: 1 for an empty KV pool, 0 for a full one (1 when the backend does not report it)."""

from gateway.routing.candidate import Candidate

TYPE_NAME = "kv-utilization"


def kv_utilization_scorer(candidate: Candidate) -> float:
    if candidate.kv_blocks_total <= 0:
        return 1.0
    return 1.0 - min(1.0, candidate.kv_blocks_used / candidate.kv_blocks_total)
