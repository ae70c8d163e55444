"""`queue-depth`: 1 for an idle backend, falling towards 0 as work piles up."""

from gateway.routing.candidate import Candidate

TYPE_NAME = "queue-depth"


def queue_depth_scorer(candidate: Candidate) -> float:
    return 1.0 / (1.0 + candidate.queue_depth + candidate.inflight)
