"""Edge agents register here (`POST /v1/edge/register`, repeated as the heartbeat) with the edge token."""

import hmac
import logging
import math

from fastapi import APIRouter, Depends, Request
from opentelemetry import trace

from gateway.deps import Config, EdgeAgentsDep
from gateway.edge_agents import AgentIdTaken, Registration, TooManyAgents
from serving.openai.errors import GatewayError, Unauthorized
from serving.openai.schemas import ErrorResponse

log = logging.getLogger(__name__)


class RegistrationOff(GatewayError):
    status_code, error_type, code = 404, "invalid_request_error", "edge_registration_off"


class Full(GatewayError):
    status_code, error_type, code = 429, "requests", "too_many_edge_agents"


class Taken(GatewayError):
    status_code, error_type, code = 409, "invalid_request_error", "agent_id_in_use"


async def require_edge_token(request: Request, settings: Config) -> None:
    """Runs before the body is read: an unauthenticated caller learns nothing about the body's shape."""
    expected = settings.edge_token
    if not expected:
        raise RegistrationOff("edge registration is off on this gateway: set TANDEM_EDGE_TOKEN to turn it on")
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    # bytes: compare_digest refuses str with characters outside ASCII, which anyone could send (a 500 for each)
    if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(errors="replace"), expected.encode()):
        raise Unauthorized("edge registration needs 'Authorization: Bearer <TANDEM_EDGE_TOKEN>'")


router = APIRouter(prefix="/v1/edge", dependencies=[Depends(require_edge_token)])


@router.post(
    "/register",
    responses={
        409: {"model": ErrorResponse, "description": "a live agent registered this agent_id from another endpoint"},
        429: {"model": ErrorResponse, "description": "the gateway keeps the most edge agents it takes (Retry-After)"},
    },
)
async def register(body: Registration, edge_agents: EdgeAgentsDep) -> dict:
    span = trace.get_current_span()  # the server span, a child of the agent's `edge.register` span
    span.set_attribute("tandem.agent_id", body.agent_id)
    span.set_attribute("tandem.execution_provider", body.execution_provider)
    try:
        is_new = edge_agents.heartbeat(body)
    except (TooManyAgents, AgentIdTaken) as exc:  # either frees up within a TTL: an agent stops heartbeating
        retry = {"Retry-After": str(math.ceil(edge_agents.ttl_s))}
        if isinstance(exc, AgentIdTaken):
            raise Taken(str(exc), headers=retry, param="agent_id") from None
        raise Full(f"{exc}; try again once some stop", headers=retry) from None
    if is_new:
        log.info(
            "edge agent %s registered: %s, %s, npu=%s",
            body.agent_id,
            body.endpoint,
            body.execution_provider,
            body.device.npu,
        )
    ttl = edge_agents.ttl_s
    return {"heartbeat_interval_s": ttl / 3, "ttl_s": ttl}


@router.get("/agents")
async def agents(edge_agents: EdgeAgentsDep) -> dict:
    return {"agents": [r.model_dump() for r in edge_agents.live()]}
