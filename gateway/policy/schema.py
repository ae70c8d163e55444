"""The policy YAML's schema. These models are the truth; docs follow them.

Unknown keys are errors (a typo must not silently change routing), and every
name a rule uses must be a pool, checked when the policy loads.
"""

import functools
from typing import Literal
from urllib.parse import urlparse

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from tandem_sdk.detectors import DETECTORS

from gateway import privacy
from gateway.routing.registry import FILTERS, PICKERS, SCORERS


def _known(kind: str, value: str | list[str], registry: dict) -> str | list[str]:
    """Validator body: every name in value must be a key of registry (one plugin or detector, or a list)."""
    names = [value] if isinstance(value, str) else value
    unknown = [n for n in names if n not in registry]
    if unknown:
        what = f"{kind} {value!r}" if isinstance(value, str) else f"{kind}(s) {unknown}"
        raise ValueError(f"unknown {what}; known: {sorted(registry)}")
    return value


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
    priority: IntRange | None = None
    model: list[str] | None = Field(default=None, description="any of these model ids (the request's `model`)")


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
    def _known_scorer(cls, value: str) -> str:
        return _known("scorer", value, SCORERS)


class PickerSpec(_Strict):
    """`picker: max-score`, or `picker: {type: cache-affinity, abs_threshold: 4, rel_threshold: 1.5}`."""

    type: str
    abs_threshold: float | None = Field(default=None, description="cache-affinity: requests above the pool mean")
    rel_threshold: float | None = Field(default=None, description="cache-affinity: times the pool mean")

    @model_validator(mode="after")
    def _valid_config(self) -> "PickerSpec":
        _known("picker", self.type, PICKERS)
        self.pick  # noqa: B018 - built once, when the policy loads, so bad config fails there
        return self

    @functools.cached_property
    def pick(self):
        """The pick function: (scored candidates, turn) -> candidates, best first."""
        config_class, factory = PICKERS[self.type]
        params = {
            k: v
            for k, v in (("abs_threshold", self.abs_threshold), ("rel_threshold", self.rel_threshold))
            if v is not None
        }
        if config_class is None:
            if params:
                raise ValueError(f"picker {self.type!r} takes no {sorted(params)}")
            return factory(None)
        return factory(config_class(**params))


class Profile(_Strict):
    filters: list[str] = ["healthy"]
    scorers: list[ScorerSpec] = [ScorerSpec(type="queue-depth")]
    picker: str | PickerSpec = Field(default="max-score", validate_default=True)

    @field_validator("filters")
    @classmethod
    def _known_filters(cls, value: list[str]) -> list[str]:
        return _known("filter", value, FILTERS)

    @field_validator("picker")
    @classmethod
    def _picker_spec(cls, value: str | PickerSpec) -> PickerSpec:
        return PickerSpec(type=value) if isinstance(value, str) else value

    @property
    def uses_prefix_hints(self) -> bool:
        return any(s.type == "prefix-hit" for s in self.scorers)


class Pool(_Strict):
    kind: Literal["edge", "cloud"]
    endpoints: list[str] = Field(
        min_length=1,
        description="grpc://host:port (a Tandem worker), dns://name:port (every address of the name: a headless "
        "Service's worker pods) or http(s)://host:port (an OpenAI-compatible server)",
    )
    profile: Profile = Profile()
    upstream_model: str | None = Field(
        default=None, description="for http(s) endpoints: the model name to send (default: the gateway's model id)"
    )
    prompt_format: Literal["token_ids", "text"] = Field(
        default="token_ids", description="for http(s) endpoints: text for servers that take no token ids (Ollama)"
    )
    send_cache_salt: bool = Field(
        default=False,
        description="for http(s) endpoints: send each tenant's prefix-cache salt as `cache_salt`, so tenants never "
        "share cached prefixes there (vLLM >= 0.9 takes it; a server that refuses unknown fields does not)",
    )

    @field_validator("endpoints")
    @classmethod
    def _urls(cls, value: list[str]) -> list[str]:
        for url in value:
            parsed = urlparse(url)
            if parsed.scheme not in ("grpc", "dns", "http", "https") or not parsed.hostname:
                raise ValueError(
                    f"endpoint {url!r} must look like grpc://host:port, dns://name:port or http(s)://host[:port]"
                )
            if parsed.scheme in ("grpc", "dns") and not parsed.port:
                raise ValueError(f"endpoint {url!r} needs a port")
        return value


class Privacy(_Strict):
    never_leave_device: list[str] = ["private", "pii", "confidential"]
    detectors: list[str] = Field(
        default_factory=lambda: list(DETECTORS),
        description=f"content detectors to run (default: all, {sorted(DETECTORS)}); `[]` turns detection off, "
        "and the gateway logs a warning",
    )
    detected_tag: str = Field(
        default="pii", description="the tag a request gets when any detector fires; must be in never_leave_device"
    )

    @field_validator("detectors")
    @classmethod
    def _known_detectors(cls, value: list[str]) -> list[str]:
        return _known("detector", value, DETECTORS)


class ModelSpec(_Strict):
    """A model the gateway serves (its tokenizer from TANDEM_MODEL_DIR or TANDEM_MODEL_DIRS) and the pools whose
    workers run it."""

    pools: list[str] = Field(min_length=1, description="the pools serving this model; a pool serves one model")
    owned_by: str = Field(default="tandem", description="`owned_by` in /v1/models")


class Policy(_Strict):
    version: Literal[1]
    privacy: Privacy = Privacy()
    pools: dict[str, Pool] = Field(min_length=1)
    models: dict[str, ModelSpec] = Field(
        default_factory=dict,
        description="model id -> the pools serving it (every pool in exactly one); empty: the gateway's one model, "
        "served by every pool",
    )
    rules: list[Rule] = Field(min_length=1)

    def pools_serving(self, model: str) -> frozenset[str] | None:
        """The pools that serve `model`; None when the policy names no models (every pool serves the one model)."""
        if not self.models:
            return None
        spec = self.models.get(model)
        return frozenset(spec.pools) if spec else frozenset()

    def model_of(self, pool: str, default: str) -> str:
        """The model a pool's workers run: the one whose `pools` names it; without `models`, the gateway's one."""
        return next((name for name, spec in self.models.items() if pool in spec.pools), default)

    @model_validator(mode="after")
    def _references(self) -> "Policy":
        served_by: dict[str, str] = {}
        for name, spec in self.models.items():
            for j, pool in enumerate(spec.pools):
                if pool not in self.pools:
                    raise PolicyFieldError(
                        ("models", name, "pools", j),
                        f"model {name!r} names unknown pool {pool!r}; pools: {sorted(self.pools)}",
                    )
                if pool in served_by and served_by[pool] != name:
                    raise PolicyFieldError(
                        ("models", name, "pools", j),
                        f"pool {pool!r} is named by models {served_by[pool]!r} and {name!r}; a pool's workers run one model",
                    )
                served_by[pool] = name
        if self.models and (unserved := sorted(set(self.pools) - set(served_by))):
            raise PolicyFieldError(
                ("models",), f"pool(s) {unserved} serve no model: with `models`, each pool is named by one model"
            )
        runs: dict[str, tuple[str, str]] = {}  # endpoint -> (its model, a pool naming it)
        for pool_name, pool in self.pools.items():
            model = served_by.get(pool_name, "")
            for url in pool.endpoints:
                other = runs.setdefault(url, (model, pool_name))
                if other[0] != model:
                    raise PolicyFieldError(
                        ("pools", pool_name, "endpoints"),
                        f"endpoint {url!r} is in pools {other[1]!r} and {pool_name!r}, which serve different models",
                    )
        names = [rule.name for rule in self.rules]
        for i, rule in enumerate(self.rules):
            if rule.match.model is not None and not self.models:
                raise PolicyFieldError(
                    ("rules", i, "match", "model"),
                    f"rule {rule.name!r} matches on model, but the policy names no `models` (one model: every rule "
                    "is for it)",
                )
            unknown = [m for m in rule.match.model or () if m not in self.models]
            if unknown:
                raise PolicyFieldError(
                    ("rules", i, "match", "model"),
                    f"rule {rule.name!r} matches unknown model(s) {unknown}; models: {sorted(self.models)}",
                )
            if names.index(rule.name) != i:
                raise PolicyFieldError(
                    ("rules", i, "name"), f"rule name {rule.name!r} is used twice; names must be unique"
                )
            for j, pool in enumerate([rule.route, *rule.fallback]):
                if pool not in self.pools:
                    where = ("rules", i, "route") if j == 0 else ("rules", i, "fallback", j - 1)
                    raise PolicyFieldError(
                        where, f"rule {rule.name!r} routes to unknown pool {pool!r}; pools: {sorted(self.pools)}"
                    )
        return self

    @model_validator(mode="after")
    def _one_kind_per_endpoint(self) -> "Policy":
        kinds: dict[str, tuple[str, str]] = {}
        for name, pool in self.pools.items():
            for j, url in enumerate(pool.endpoints):
                other = kinds.setdefault(url, (pool.kind, name))
                if other[0] != pool.kind:
                    raise PolicyFieldError(
                        ("pools", name, "endpoints", j),
                        f"{url} is in {other[0]} pool {other[1]!r} and {pool.kind} pool {name!r}; a backend has one kind",
                    )
        return self

    @model_validator(mode="after")
    def _private_tags_never_reach_cloud(self) -> "Policy":
        """Refuse a policy that could let a never-leave tag reach a cloud pool (gateway.privacy says which)."""
        for loc, message in privacy.policy_problems(self):
            raise PolicyFieldError(loc, message)
        return self


class PolicyFieldError(ValueError):
    """A semantic error that knows where in the file it is (pydantic keeps model-level errors at the top)."""

    def __init__(self, loc: tuple[str | int, ...], message: str) -> None:
        super().__init__(message)
        self.loc = loc
