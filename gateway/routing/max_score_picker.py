"""`max-score`: best weighted score first; ties go round-robin so equal backends share load."""

from typing import Literal

from gateway.routing.candidate import Candidate
from gateway.routing.plugin import Picker, PickerConfig


class MaxScore(PickerConfig):
    """Best weighted mean score first; equal scores take turns."""

    type: Literal["max-score"] = "max-score"

    def build(self) -> Picker:
        return max_score_picker


def max_score_picker(scored: list[tuple[Candidate, float]], turn: int) -> list[Candidate]:
    """All candidates, best first; `turn` rotates the order among equal scores."""
    if not scored:
        return []
    rotation = turn % len(scored)
    rotated = scored[rotation:] + scored[:rotation]
    return [c for c, _ in sorted(rotated, key=lambda pair: -pair[1])]  # stable: rotation breaks ties
