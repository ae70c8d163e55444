"""What the gateway holds for its lifetime, opened in lifespan and reached through a dependency."""

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from gateway.autoscale import TtftWindow
from gateway.backends.registry import BackendRegistry
from gateway.chat_tokenizer import ChatTokenizer
from gateway.config import Settings
from gateway.decision_log import DecisionLog
from gateway.edge_agents import EdgeAgents
from gateway.hints.prefix_hints import PrefixHints
from gateway.limits.admission import AdmissionController
from gateway.policy.reloader import PolicyStatus
from gateway.policy.schema import Policy
from gateway.tenants import Tenants


@dataclass
class GatewayState:
    settings: Settings
    model_id: str
    tokenizer: ChatTokenizer
    policy: Policy  # replaced whole by the reloader; a request reads it once
    registry: BackendRegistry
    policy_status: PolicyStatus
    tenants: Tenants
    admission: AdmissionController
    edge_agents: EdgeAgents
    decisions: DecisionLog | None = None
    hints: PrefixHints | None = None  # which backend holds which prompt prefix (Redis, or this gateway's history)
    ttft: TtftWindow | None = None  # recent TTFT per pool, for the autoscaling signal
    draining: bool = False  # SIGTERM received: /readyz is 503 while in-flight requests finish


def _state(request: Request) -> GatewayState:
    return request.app.state.gateway


State = Annotated[GatewayState, Depends(_state)]
