"""The policy YAML's schema. These models are the truth; docs follow them.

Unknown keys are errors (a typo must not silently change routing), and every
name a rule uses must be a pool, checked when the policy loads.
"""

from typing import Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gateway.routing.registry import FILTERS, PICKERS, SCORERS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class IntRange(_Strict):
    min: int | None = None
    max: int | None = None

    def contains(self, value: int) -> bool:
        return (self.min is None or value >= self.min) and (self.max is None or value <= self.max)


class DeviceMatch(_Strict):
    npu: bool | None = None
    min_ram_gb: float | None = None
    min_battery: float | None = Field(default=None, ge=0, le=1)
    network: list[str] | None = None


class Match(_Strict):
    """All given fields must hold; an empty match matches every request."""

    privacy: list[str] | None = Field(default=None, description="any of these tags")
    prompt_tokens: IntRange | None = None
    max_tokens: IntRange | None = None
    device: DeviceMatch | None = None
    tenant: list[str] | None = None


class Rule(_Strict):
    name: str
    match: Match = Match()
    route: str
    fallback: list[str] = []


class ScorerSpec(_Strict):
    type: str
    weight: float = Field(default=1.0, ge=0)

    @field_validator("type")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in SCORERS:
            raise ValueError(f"unknown scorer {value!r}; known: {sorted(SCORERS)}")
        return value


class Profile(_Strict):
    filters: list[str] = ["healthy"]
    scorers: list[ScorerSpec] = [ScorerSpec(type="queue-depth")]
    picker: str = "max-score"

    @field_validator("filters")
    @classmethod
    def _known_filters(cls, value: list[str]) -> list[str]:
        unknown = [f for f in value if f not in FILTERS]
        if unknown:
            raise ValueError(f"unknown filter(s) {unknown}; known: {sorted(FILTERS)}")
        return value

    @field_validator("picker")
    @classmethod
    def _known_picker(cls, value: str) -> str:
        if value not in PICKERS:
            raise ValueError(f"unknown picker {value!r}; known: {sorted(PICKERS)}")
        return value


class Pool(_Strict):
    kind: Literal["edge", "cloud"]
    endpoints: list[str] = Field(min_length=1)
    profile: Profile = Profile()

    @field_validator("endpoints")
    @classmethod
    def _grpc_urls(cls, value: list[str]) -> list[str]:
        for url in value:
            parsed = urlparse(url)
            if parsed.scheme != "grpc" or not parsed.hostname or not parsed.port:
                raise ValueError(f"endpoint {url!r} must look like grpc://host:port")
        return value


class Privacy(_Strict):
    never_leave_device: list[str] = ["private", "pii", "confidential"]


class Policy(_Strict):
    version: Literal[1]
    privacy: Privacy = Privacy()
    pools: dict[str, Pool] = Field(min_length=1)
    rules: list[Rule] = Field(min_length=1)

    @model_validator(mode="after")
    def _references(self) -> "Policy":
        names = [rule.name for rule in self.rules]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"rule names must be unique; repeated: {duplicates}")
        for rule in self.rules:
            for pool in [rule.route, *rule.fallback]:
                if pool not in self.pools:
                    raise ValueError(f"rule {rule.name!r} routes to unknown pool {pool!r}; pools: {sorted(self.pools)}")
        return self
