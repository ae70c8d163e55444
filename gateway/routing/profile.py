"""Run a pool's profile: filters, then weighted scorers, then the picker."""

from dataclasses import dataclass, field

from gateway import privacy
from gateway.policy.schema import Profile
from gateway.routing.candidate import Candidate
from gateway.routing.registry import FILTERS, SCORERS


@dataclass
class CandidateReport:
    """What the profile made of one candidate, for explain."""

    candidate: Candidate
    filtered_out_by: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    score: float | None = None


def evaluate(
    profile: Profile, candidates: list[Candidate], turn: int = 0
) -> tuple[list[Candidate], list[CandidateReport]]:
    """The candidates that pass every filter, best first, and a report on each."""
    reports = {c.endpoint: CandidateReport(c) for c in candidates}
    for name in profile.filters:
        kept = FILTERS[name](candidates)
        kept_ids = {id(c) for c in kept}  # by identity: `c not in kept` compared whole dataclasses, O(n²)
        for c in candidates:
            if id(c) not in kept_ids:
                reports[c.endpoint].filtered_out_by = name
        candidates = kept
    total_weight = sum(s.weight for s in profile.scorers) or 1.0
    scorers = [(s.type, s.weight / total_weight, SCORERS[s.type]) for s in profile.scorers]
    scored = []
    for c in candidates:  # plain loops: this runs for every candidate of every request (256 workers: bench/scaling.py)
        report = reports[c.endpoint]
        score = 0.0
        for name, weight, scorer in scorers:
            report.scores[name] = value = scorer(c)
            score += weight * value
        report.score = score
        scored.append((c, score))
    return profile.picker.pick(scored, turn), list(reports.values())


def evaluate_pool(
    profile: Profile, candidates: list[Candidate], is_private: bool, turn: int = 0
) -> tuple[list[Candidate], list[CandidateReport]]:
    """A pool's ranking for one request: for a private one, only backends that reported kind=edge."""
    refusals = {c.endpoint: privacy.candidate_refusal(c.kind, is_private) for c in candidates}
    refused = [CandidateReport(c, filtered_out_by=refusals[c.endpoint]) for c in candidates if refusals[c.endpoint]]
    ranked, reports = evaluate(profile, [c for c in candidates if not refusals[c.endpoint]], turn)
    return ranked, refused + reports
