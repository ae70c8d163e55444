"""What the gateway holds for its lifetime, opened in gateway/lifespan.py and handed to handlers through the typed
dependencies of gateway/deps.py."""

from dataclasses import dataclass, field

from gateway.autoscale import TtftWindow
from gateway.backends.registry import BackendRegistry
from gateway.config import Settings
from gateway.decision_log import DecisionLog
from gateway.edge_agents import EdgeAgents
from gateway.hints.prefix_hints import PrefixHints
from gateway.limits.admission import AdmissionController
from gateway.policy.reloader import PolicyStatus
from gateway.policy.schema import Policy
from gateway.redis_client import RedisWatch
from gateway.tenants import Tenants
from serving.openai.chat_tokenizer import ChatTokenizer
from serving.openai.errors import ModelNotFound


@dataclass(frozen=True)
class ServedModel:
    """A model clients may name in `model`: its tokenizer (the gateway tokenizes) and its prefix hints."""

    id: str
    tokenizer: ChatTokenizer
    hints: PrefixHints | None = None  # which backend holds which prompt prefix (Redis, or this gateway's history)


@dataclass
class GatewayState:
    settings: Settings
    models: dict[str, ServedModel]  # the first is TANDEM_MODEL_DIR's: the one every pool serves without `models`
    policy: Policy  # replaced whole by the reloader; a request reads it once
    registry: BackendRegistry
    policy_status: PolicyStatus
    tenants: Tenants
    admission: AdmissionController
    edge_agents: EdgeAgents
    decisions: DecisionLog | None = None
    ttft: TtftWindow | None = None  # recent TTFT per pool, for the autoscaling signal
    draining: bool = False  # SIGTERM received: /readyz is 503 while in-flight requests finish
    named_tenants: set[str] = field(default_factory=set)  # auth none: the X-Tandem-Tenant names served so far
    redis: RedisWatch | None = None  # whether Redis answers (REDIS_URL set), for /readyz

    @property
    def default_model(self) -> str:
        return next(iter(self.models))

    def served(self, model: str, policy: Policy | None = None) -> ServedModel:
        """The model a request names, under the request's policy (default: the live one); 404 model_not_found
        naming it (and what is served) otherwise."""
        listed = self.listed(policy)
        if model not in listed:
            names = ", ".join(repr(m) for m in listed)
            shown = repr(model[:128]) + ("…" if len(model) > 128 else "")  # (a 60 KB id came back whole: a review)
            raise ModelNotFound(f"model {shown} does not exist; this gateway serves {names}", param="model")
        return self.models[model]

    def check_models(self, policy: Policy) -> None:
        check_models(policy, list(self.models))

    def listed(self, policy: Policy | None = None) -> list[str]:
        """The models /v1/models lists: every one the policy names (all of them, without `models`: the first)."""
        policy = policy or self.policy
        if not policy.models:
            return [self.default_model]
        return [m for m in policy.models if m in self.models]


def check_models(policy: Policy, loaded: list[str]) -> None:
    """ValueError unless the policy's models are exactly the ones the gateway has tokenizers for (at start and on
    every reload: a reload naming a model the gateway cannot tokenize for is refused)."""
    if policy.models and sorted(policy.models) != sorted(loaded):
        raise ValueError(
            f"the policy's models {sorted(policy.models)} are not the gateway's {sorted(loaded)} "
            "(TANDEM_MODEL_DIR and TANDEM_MODEL_DIRS)"
        )
    if not policy.models and len(loaded) > 1:
        raise ValueError(f"the gateway serves {loaded}: the policy must say which pools serve each (`models`)")
