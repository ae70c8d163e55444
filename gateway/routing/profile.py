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
        for c in candidates:
            if c not in kept:
                reports[c.endpoint].filtered_out_by = name
        candidates = kept
    total_weight = sum(s.weight for s in profile.scorers) or 1.0
    scored = []
    for c in candidates:
        report = reports[c.endpoint]
        report.scores = {s.type: SCORERS[s.type](c) for s in profile.scorers}
        report.score = sum(s.weight * report.scores[s.type] for s in profile.scorers) / total_weight
        scored.append((c, report.score))
    return profile.picker.pick(scored, turn), list(reports.values())


def evaluate_pool(
    profile: Profile, candidates: list[Candidate], is_private: bool, turn: int = 0
) -> tuple[list[Candidate], list[CandidateReport]]:
    """A pool's ranking for one request: for a private one, only backends that reported kind=edge."""
    refusals = {c.endpoint: privacy.candidate_refusal(c.kind, is_private) for c in candidates}
    refused = [CandidateReport(c, filtered_out_by=refusals[c.endpoint]) for c in candidates if refusals[c.endpoint]]
    ranked, reports = evaluate(profile, [c for c in candidates if not refusals[c.endpoint]], turn)
    return ranked, refused + reports
