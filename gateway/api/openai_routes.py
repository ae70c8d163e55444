"""The OpenAI routes: `/v1/models`, `/v1/models/{id}`, `/v1/chat/completions`, `/v1/completions` and
`/v1/responses`. The generation handlers are one call each into the request service (gateway/api/generation.py;
the Responses API through gateway/api/responses.py)."""

import time

from fastapi import APIRouter, Depends, Request

from gateway.api import generation, responses
from gateway.api.prepare import prepare_chat, prepare_completion
from gateway.auth import require_api_key
from gateway.deps import CurrentPolicy, State
from gateway.state import GatewayState
from serving.openai.responses import ResponsesRequest
from serving.openai.schemas import ChatCompletionRequest, CompletionRequest, error_responses

# The auth check is the router's own, so each route's dependencies say it (gateway/main.py's GenerationShortcut
# checks them).
router = APIRouter(prefix="/v1", responses=error_responses(400, 401, 429), dependencies=[Depends(require_api_key)])
GENERATION_ERRORS = error_responses(404, 413, 502, 503)
_STARTED = int(time.time())


def _model_card(state: GatewayState, model: str) -> dict:
    spec = state.policy.models.get(model)
    context = state.registry.context_of(model, state.models[model].tokenizer.max_context_tokens)
    return {
        "id": model,
        "object": "model",
        "created": _STARTED,
        "owned_by": spec.owned_by if spec else "tandem",
        "context_length": context,
        "max_model_len": context,  # vLLM's name for it
    }


@router.get("/models")
async def list_models(state: State) -> dict:
    return {"object": "list", "data": [_model_card(state, m) for m in state.listed()]}


router.add_api_route("/models", list_models, methods=["HEAD"], include_in_schema=False)  # as GET, without the body


@router.get("/models/{model:path}", responses=error_responses(404))
async def retrieve_model(model: str, state: State) -> dict:
    """One model; 404 model_not_found naming it. (`:path`: ids such as `org/name` have a slash.) `/v1/models/`, with
    no id, is the list, as a base URL written with a slash asks for it."""
    if not model:
        return await list_models(state)
    return _model_card(state, state.served(model).id)


router.add_api_route("/models/{model:path}", retrieve_model, methods=["HEAD"], include_in_schema=False)  # (a 405)


@router.post("/chat/completions", responses=GENERATION_ERRORS)
async def chat_completions(body: ChatCompletionRequest, request: Request, state: State, policy: CurrentPolicy):
    return await generation.serve(body, request, state, policy, prepare_chat, chat=True)


@router.post("/completions", responses=GENERATION_ERRORS)
async def completions(body: CompletionRequest, request: Request, state: State, policy: CurrentPolicy):
    return await generation.serve(body, request, state, policy, prepare_completion, chat=False)


@router.post("/responses", responses=GENERATION_ERRORS)
async def create_response(body: ResponsesRequest, request: Request, state: State, policy: CurrentPolicy):
    """OpenAI's Responses API, answered as a chat completion; nothing is stored."""
    return await responses.serve(body, request, state, policy)
