"""`cache-affinity`: best score first (so cache affinity wins), except that a backend whose
load runs away from the pool's is moved behind the others.

A candidate is overloaded when its load exceeds the pool's mean load by more
than `abs_threshold` requests *and* is more than `rel_threshold` times that
mean. Both must hold: the absolute one keeps small pools from flapping, the
relative one scales with traffic. So a hot prefix stays on the backends that
hold it until one of them runs hot, then spills to the next best, which soon
holds the prefix too.
"""

from dataclasses import dataclass

from gateway.routing.candidate import Candidate
from gateway.routing.max_score_picker import max_score_picker

TYPE_NAME = "cache-affinity"


@dataclass(frozen=True)
class CacheAffinityConfig:
    abs_threshold: float = 4.0
    rel_threshold: float = 1.5

    def __post_init__(self) -> None:
        if self.abs_threshold < 0 or self.rel_threshold < 1:
            raise ValueError("cache-affinity needs abs_threshold >= 0 and rel_threshold >= 1")


def cache_affinity_picker(config: CacheAffinityConfig):
    def pick(scored: list[tuple[Candidate, float]], turn: int) -> list[Candidate]:
        ranked = max_score_picker(scored, turn)
        if len(ranked) < 2:
            return ranked
        mean = sum(c.load for c in ranked) / len(ranked)
        hot = {
            c.endpoint for c in ranked if c.load - mean > config.abs_threshold and c.load > config.rel_threshold * mean
        }
        # Overloaded ones go last, least loaded of them first.
        return [c for c in ranked if c.endpoint not in hot] + sorted(
            (c for c in ranked if c.endpoint in hot), key=lambda c: c.load
        )

    return pick
