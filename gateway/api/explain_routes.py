"""`POST /v1/route/explain`: where a chat request would go, and why, without generating."""

from fastapi import APIRouter, Request

from gateway import privacy
from gateway.api.prepare import prepare_chat
from gateway.auth import is_ops, shows_backend_addresses
from gateway.deps import CurrentPolicy, Registry, State
from gateway.gather import PromptKey, gather_pools
from gateway.policy.explain import explain
from serving.openai.schemas import ChatCompletionRequest, error_responses

router = APIRouter(prefix="/v1", responses=error_responses(400, 401, 404, 413))


@router.post("/route/explain")
async def route_explain(
    body: ChatCompletionRequest, request: Request, state: State, policy: CurrentPolicy, registry: Registry
) -> dict:
    # Admitted and counted like a generation (without its tokens): explain costs a tokenization and a scan.
    admission = await state.admission.admit(request.state.tenant)
    try:
        prepared = await prepare_chat(body, request, state, policy)
        prompt = PromptKey(state.tenants.cache_salt(prepared.features.tenant), prepared.prompt_ids)
        hints = privacy.hints_for(privacy.is_private(policy, prepared.features.privacy_tags), prepared.model.hints)
        gathered = await gather_pools(registry, policy, policy.pools, prompt, hints)
        status = state.policy_status.as_dict()
        if not is_ops(request):  # the file's path and a refused edit's error are the operators' (as in /readyz)
            status = {key: status[key] for key in ("sha256", "loaded_at")}
        plan = explain(
            policy, prepared.features, gathered.candidates, gathered.labels, shows_backend_addresses(request)
        )
        return plan | {"policy": status}
    finally:
        await admission.release(0)
