"""Liveness, readiness, the model list and Prometheus metrics."""

from fastapi import APIRouter, Request, Response
from fastapi.responses import JSONResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from gateway.auth import is_ops
from gateway.deps import Registry, State
from serving.openai.errors import Unauthorized

router = APIRouter()


@router.get("/healthz")
async def healthz() -> dict:
    return {"status": "ok"}


@router.get(
    "/readyz",
    responses={503: {"description": "no backend is healthy; with the ops token, the body says which is which"}},
)
async def readyz(state: State, registry: Registry, request: Request) -> JSONResponse:
    backends = {
        b.endpoint: {
            "labels": list(b.labels),  # what callers are told of it (X-Tandem-Backend: cloud/0)
            "healthy": b.is_reporting,
            "problem": b.problem,
            "circuit": b.breaker.current_state(),
            "kind": b.stats.kind if b.stats else None,
            "privacy": b.privacy_refusal,
            "execution_provider": b.stats.execution_provider if b.stats else None,
        }
        for b in registry.all()
    }
    ready = any(b["healthy"] for b in backends.values()) and not state.draining
    if state.draining:
        return JSONResponse({"ready": False, "draining": True}, status_code=503)
    if not is_ops(request):
        return JSONResponse({"ready": ready}, status_code=200 if ready else 503)
    edge_agents = [r.agent_id for r in state.edge_agents.live()]
    body = {"ready": ready, "backends": backends, "policy": state.policy_status.as_dict(), "edge_agents": edge_agents}
    if state.redis is not None:  # limits and hints go on without it: said here, not in `ready`
        body["redis"] = {
            "answering": state.redis.usable() and state.redis.answered,
            "last_error": state.redis.last_error,
        }
    return JSONResponse(body, status_code=200 if ready else 503)


# HEAD as GET answers it, without the body (uptime checkers send HEAD; it was a 405)
router.add_api_route("/healthz", healthz, methods=["HEAD"], include_in_schema=False)
router.add_api_route("/readyz", readyz, methods=["HEAD"], include_in_schema=False)


@router.get("/metrics", responses={401: {"description": "needs 'Authorization: Bearer <TANDEM_OPS_TOKEN>'"}})
async def prometheus_metrics(request: Request) -> Response:
    if not is_ops(request):
        raise Unauthorized("/metrics needs 'Authorization: Bearer <TANDEM_OPS_TOKEN>'")
    return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)


router.add_api_route("/metrics", prometheus_metrics, methods=["HEAD"], include_in_schema=False)  # as GET (a 405)
