"""What a routing plugin is: a validated config that builds its function once, when the policy loads.

A plugin's config class *is* its entry in the policy YAML (`type` plus its own
settings), so one type can appear twice in a profile with different settings,
and a bad setting fails at load time, naming the field. Three kinds:

- a filter builds `(candidates) -> the candidates it keeps`;
- a scorer builds `(candidate) -> score`, which the runner clamps to [0, 1];
- a picker builds `(scored candidates, turn) -> candidates, best first`.
"""

import functools
from collections.abc import Callable
from typing import ClassVar

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gateway.routing.candidate import Candidate

Filter = Callable[[list[Candidate]], list[Candidate]]
Scorer = Callable[[Candidate], float]
Picker = Callable[[list[tuple[Candidate, float]], int], list[Candidate]]


class PluginConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    kind: ClassVar[str]
    type: str

    def build(self) -> Callable:
        raise NotImplementedError

    @functools.cached_property
    def fn(self) -> Callable:
        """The plugin's function, built from this config once."""
        return self.build()

    @model_validator(mode="after")
    def _builds(self) -> "PluginConfig":
        self.fn  # noqa: B018 - built when the policy loads, so a bad config fails there, not on a request
        return self


class FilterConfig(PluginConfig):
    kind = "filter"

    def build(self) -> Filter:
        raise NotImplementedError


class ScorerConfig(PluginConfig):
    kind = "scorer"
    weight: float = Field(default=1.0, ge=0, description="its share of the weighted mean score")

    def build(self) -> Scorer:
        raise NotImplementedError


class PickerConfig(PluginConfig):
    kind = "picker"

    def build(self) -> Picker:
        raise NotImplementedError


def labels(plugins: list[PluginConfig]) -> list[str]:
    """Each plugin's name in explain, spans and metrics: its type, with #2, #3… for a type used again."""
    seen: dict[str, int] = {}
    out = []
    for p in plugins:
        seen[p.type] = seen.get(p.type, 0) + 1
        out.append(p.type if seen[p.type] == 1 else f"{p.type}#{seen[p.type]}")
    return out
