"""`cache-affinity`: best score first (so cache affinity wins), except that a backend whose
share of the traffic runs away from the pool's is moved behind the others.

Load here is the flow of work: the requests this gateway sent each backend in
the last few seconds (`Candidate.recent_requests`), not the instantaneous
queue. Cached requests are quick, so a backend holding a hot prefix rarely
shows a long queue, yet it does most of the pool's work. A candidate is
overloaded when its recent requests exceed the pool's mean by more than
`abs_threshold` *and* are more than `rel_threshold` times that mean. Both
must hold: the absolute one keeps quiet pools from flapping, the relative one
scales with traffic. So a hot prefix stays on the backends that hold it
until they carry more than their share. Then it spills to the next best
backend, which soon holds the prefix too, and so on until the holders' share
is within the thresholds.

Only a request that can help is moved: one whose prefix is itself hot (it
arrived more often in the window than the pool's mean per backend), or one
with no cached prefix anywhere. A request for a rare prefix that happens to
live on a busy backend stays there. Moving it would cost a full prefill and
barely relieve the backend.
"""

from operator import attrgetter
from typing import Literal

from pydantic import Field

from gateway.routing.candidate import Candidate
from gateway.routing.max_score_picker import max_score_picker
from gateway.routing.plugin import Picker, PickerConfig


class CacheAffinity(PickerConfig):
    """As `max-score`, but a backend far above the pool's share of recent requests goes behind the others."""

    type: Literal["cache-affinity"] = "cache-affinity"
    abs_threshold: float = Field(default=4.0, ge=0, description="requests in the last 5 s above the pool's mean")
    rel_threshold: float = Field(default=1.5, ge=1, description="times the pool's mean")

    def build(self) -> Picker:
        return cache_affinity_picker(self)


_recent = attrgetter("recent_requests")


def cache_affinity_picker(config: CacheAffinity) -> Picker:
    def pick(scored: list[tuple[Candidate, float]], turn: int) -> list[Candidate]:
        ranked = max_score_picker(scored, turn)
        if len(ranked) < 2:
            return ranked
        mean = sum(map(_recent, ranked)) / len(ranked)
        has_affinity = ranked[0].prefix_match_blocks > 0
        if has_affinity and ranked[0].prefix_recent_requests <= mean:
            return ranked  # a rare prefix: keep it where it is cached
        # Over the mean by more than abs_threshold and more than rel_threshold times it: over the larger bound.
        bound = max(mean + config.abs_threshold, config.rel_threshold * mean)
        hot = [c for c in ranked if c.recent_requests > bound]
        if not hot:
            return ranked
        # Overloaded ones go last, least loaded of them first.
        hot_ids = {id(c) for c in hot}
        return [c for c in ranked if id(c) not in hot_ids] + sorted(hot, key=_recent)

    return pick
