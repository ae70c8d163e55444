"""`POST /v1/route/explain`: where a chat request would go, and why, without generating."""

from fastapi import APIRouter, Request

from gateway.api.prepare import prepare_chat
from gateway.api.schemas import ChatCompletionRequest, error_responses
from gateway.policy.explain import explain
from gateway.state import State

router = APIRouter(prefix="/v1", responses=error_responses(400, 401, 404, 413))


@router.post("/route/explain")
async def route_explain(body: ChatCompletionRequest, request: Request, state: State) -> dict:
    policy = state.policy
    prepared = prepare_chat(body, request, state, policy)

    def candidates_for(pool: str):
        return [b.candidate() for b in state.registry.backends(policy.pools[pool])]

    return explain(policy, prepared.features, candidates_for) | {"policy": state.policy_status.as_dict()}
