"""The runner of a pool's profile: filters, then weighted scorers, then the picker, for one request.

Pure: candidates in, candidates best first out, with a report on each for
explain and the time each plugin took. Scores are clamped to [0, 1] (NaN is
0), so one plugin's bad arithmetic cannot outweigh the others. For a private
request only backends that reported kind=edge are candidates at all.
"""

import functools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gateway import privacy
from gateway.routing.candidate import Candidate
from gateway.routing.plugin import Filter, Picker, Scorer, labels

if TYPE_CHECKING:
    from gateway.policy.schema import Profile


@dataclass(frozen=True)
class CompiledProfile:
    filters: tuple[tuple[str, Filter], ...]  # (label, function)
    scorers: tuple[tuple[str, float, Scorer], ...]  # (label, normalised weight, function)
    picker: tuple[str, Picker]


def compile_profile(profile: "Profile") -> CompiledProfile:
    """The profile's functions with their labels (a type used twice is `type#2`), built once per policy."""
    total_weight = sum(s.weight for s in profile.scorers) or 1.0
    return CompiledProfile(
        tuple((f"filter:{label}", f.fn) for label, f in zip(labels(profile.filters), profile.filters, strict=True)),
        tuple(
            (label, s.weight / total_weight, s.fn)
            for label, s in zip(labels(profile.scorers), profile.scorers, strict=True)
        ),
        (f"picker:{profile.picker.type}", profile.picker.fn),
    )


@dataclass
class CandidateReport:
    """What the profile made of one candidate, for explain."""

    candidate: Candidate
    filtered_out_by: str | None = None
    scores: dict[str, float] = field(default_factory=dict)
    score: float | None = None


@dataclass(frozen=True)
class PoolRanking:
    """A pool's candidates best first, with what each plugin took; `reports` (for explain) is built on first use
    from what the run kept: building a report per candidate on every request was a third of a ranking's time at
    256 workers (bench/scaling.py)."""

    ranked: list[Candidate]  # those that passed every filter, best first
    plugin_seconds: dict[str, float]  # label ("filter:healthy", "queue-depth", "picker:max-score") -> time
    candidates: list[Candidate]  # every candidate, as given
    dropped: dict[int, str]  # id(candidate) -> the privacy refusal or the filter that dropped it
    scored: list[Candidate]  # those that passed, in the order given
    scores: dict[str, list[float]]  # scorer label -> each scored candidate's clamped value
    totals: list[float]  # each scored candidate's weighted total

    @functools.cached_property
    def reports(self) -> list[CandidateReport]:
        """One per candidate, refused and filtered ones included, in the order given."""
        by_id = {id(c): CandidateReport(c, self.dropped.get(id(c))) for c in self.candidates}
        for i, c in enumerate(self.scored):
            report = by_id[id(c)]
            report.scores = {label: values[i] for label, values in self.scores.items()}
            report.score = self.totals[i]
        return list(by_id.values())


def clamp(score: float) -> float:
    if 0.0 <= score <= 1.0:
        return score
    return 1.0 if score > 1.0 else 0.0  # below 0, and NaN (which compares false both ways)


def _in_unit_range(values: list[float]) -> bool:
    """All in [0, 1], none NaN: three C-level passes, where a clamp per value was a quarter of a 256-candidate
    ranking (bench/scaling.py). A NaN (or inf - inf) makes the sum NaN, which equals nothing."""
    if not values:
        return True
    total = sum(values)
    return total == total and min(values) >= 0.0 and max(values) <= 1.0


def run_profile(profile: "Profile", candidates: list[Candidate], is_private: bool, turn: int = 0) -> PoolRanking:
    """Rank a pool's candidates for one request; `turn` rotates the order among equal scores."""
    steps: CompiledProfile = profile.compiled
    given = candidates
    seconds: dict[str, float] = {}
    dropped: dict[int, str] = {}
    clock = time.perf_counter
    if is_private:  # a request that is not refuses no backend (privacy.candidate_refusal): no call per candidate
        for c in candidates:
            if reason := privacy.candidate_refusal(c.kind, is_private):
                dropped[id(c)] = reason
    if dropped:
        candidates = [c for c in candidates if id(c) not in dropped]
    for label, keep in steps.filters:
        started = clock()
        kept = keep(candidates)
        seconds[label] = clock() - started
        if len(kept) != len(candidates):
            kept_ids = {id(c) for c in kept}  # by identity: `c not in kept` compared whole dataclasses, O(n²)
            reason = label.removeprefix("filter:")
            for c in candidates:
                if id(c) not in kept_ids:
                    dropped[id(c)] = reason
        candidates = kept
    totals = [0.0] * len(candidates)
    scores: dict[str, list[float]] = {}
    for label, weight, scorer in steps.scorers:  # one list pass per scorer, so each is timed on its own
        started = clock()
        values = list(map(scorer, candidates))
        if not _in_unit_range(values):
            values = [clamp(v) for v in values]
        seconds[label] = clock() - started
        scores[label] = values
        totals = [t + weight * v for t, v in zip(totals, values, strict=True)]
    label, pick = steps.picker
    started = clock()
    ranked = pick(list(zip(candidates, totals, strict=True)), turn)
    seconds[label] = clock() - started
    return PoolRanking(ranked, seconds, given, dropped, candidates, scores, totals)
