"""Run a pool's profile: filters, then weighted scorers, then the picker."""

from gateway.policy.schema import Profile
from gateway.routing.candidate import Candidate
from gateway.routing.registry import FILTERS, PICKERS, SCORERS


def rank(profile: Profile, candidates: list[Candidate], turn: int = 0) -> list[Candidate]:
    """Candidates that pass every filter, best first."""
    for name in profile.filters:
        candidates = FILTERS[name](candidates)
    total_weight = sum(s.weight for s in profile.scorers) or 1.0
    scored = [(c, sum(s.weight * SCORERS[s.type](c) for s in profile.scorers) / total_weight) for c in candidates]
    return PICKERS[profile.picker](scored, turn)
