"""Assemble the gateway: resources in lifespan, routers, and the one error mapping."""

import asyncio
import logging
import time
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.utils import get_openapi
from fastapi.responses import JSONResponse
from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from prometheus_client import REGISTRY
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway import privacy
from gateway.api import edge_routes, explain_routes, health_routes, openai_routes
from gateway.auth import require_api_key
from gateway.autoscale import AutoscaleCollector, TtftWindow
from gateway.backends.circuit_breaker import CircuitBreaker
from gateway.backends.grpc_backend import GrpcWorkerBackend
from gateway.backends.http_backend import HttpWorkerBackend
from gateway.backends.registry import BackendRegistry
from gateway.backends.worker_backend import WorkerBackend
from gateway.body_limit import BodyLimit
from gateway.chat_tokenizer import ChatTokenizer
from gateway.config import Settings, get_settings
from gateway.decision_log import DecisionLog
from gateway.edge_agents import EdgeAgents
from gateway.errors import BadRequest, GatewayError
from gateway.hints.prefix_hints import PrefixHints
from gateway.limits.admission import AdmissionController
from gateway.policy.loader import parse_policy
from gateway.policy.reloader import PolicyReloader, PolicyStatus, digest
from gateway.policy.schema import Pool
from gateway.request_id import RequestId
from gateway.state import GatewayState, ServedModel, check_models
from gateway.tenants import Tenants

log = logging.getLogger(__name__)


class ConfigError(RuntimeError):
    """The gateway's settings cannot be served safely; the message says what to set."""


def load_tenants(s: Settings) -> Tenants:
    """The tenants and keys, refusing an open gateway that the config did not open in so many words."""
    secret = s.cache_salt_secret.get_secret_value().encode() if s.cache_salt_secret else None
    tenants = Tenants.load(s.tenants_file, s.api_keys, secret)
    if s.auth == "api-key" and not tenants.requires_key:
        raise ConfigError(
            "no API keys: set TANDEM_API_KEYS ([tenant:]key,...) or TANDEM_TENANTS_FILE, "
            "or TANDEM_AUTH=none to run without keys (every caller then picks its tenant; local use only)"
        )
    if s.auth == "none":
        log.warning("auth is none: no API keys are checked; anyone who reaches %s:%d can use it", s.host, s.port)
    return tenants


def create_app(settings: Settings | None = None) -> FastAPI:
    @asynccontextmanager
    async def lifespan(app: FastAPI):
        s = settings or get_settings()
        tenants = load_tenants(s)
        text = s.policy_file.read_text()
        policy = parse_policy(text, str(s.policy_file))
        if warning := privacy.detection_warning(policy):
            log.warning("%s", warning)
        try:
            checkpoints = s.model_checkpoints()
            check_models(policy, list(checkpoints))
        except ValueError as exc:
            raise ConfigError(f"{s.policy_file}: {exc}") from None
        redis_client = _redis(s.redis_url)
        models = {
            name: ServedModel(name, ChatTokenizer(path), PrefixHints(name, redis_client))
            for name, path in checkpoints.items()
        }
        tokenizers = {name: served.tokenizer for name, served in models.items()}
        registry = BackendRegistry(policy, next(iter(models)), backend_factory(s, tokenizers))
        status = PolicyStatus(s.policy_file, digest(text), time.time())
        decisions = DecisionLog(s.decision_log) if s.decision_log else None
        admission = AdmissionController(tenants, redis_client)
        state = GatewayState(
            settings=s,
            models=models,
            policy=policy,
            registry=registry,
            policy_status=status,
            tenants=tenants,
            admission=admission,
            edge_agents=EdgeAgents(s.edge_agent_ttl_s),
            decisions=decisions,
            ttft=TtftWindow(s.autoscale_window_s),
        )
        app.state.gateway = state
        autoscale = AutoscaleCollector(s, registry, lambda: state.policy, state.ttft)
        REGISTRY.register(autoscale)
        await registry.refresh_all()  # know each backend's kind before the first request
        tasks = [asyncio.create_task(registry.poll_forever(s.health_interval_s))]
        if s.watch_policy:
            tasks.append(asyncio.create_task(PolicyReloader(state).run()))
        log.info("gateway serving %s with policy %s", ", ".join(state.listed()), s.policy_file)
        yield
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        REGISTRY.unregister(autoscale)
        await registry.close()
        if redis_client is not None:
            await redis_client.aclose()
        if decisions:
            decisions.close()

    # FastAPI's own (native) telemetry off: opentelemetry-instrumentation-fastapi below makes the server span, and
    # both at once did the work twice on every request (bench/gateway_overhead.py).
    telemetry = {"tracing": False, "metrics": False, "logs": False}
    app = FastAPI(title="Tandem gateway", version="0.1.0", lifespan=lifespan, telemetry=telemetry)
    app.add_middleware(BodyLimit, max_bytes=(settings or get_settings()).max_body_bytes)
    app.add_middleware(CloseWhileDraining)
    app.add_middleware(RequestId)  # the last added runs first: every response, a 413 included, carries the ids
    app.include_router(health_routes.router)
    app.include_router(openai_routes.router, dependencies=[Depends(require_api_key)])
    app.include_router(explain_routes.router, dependencies=[Depends(require_api_key)])
    app.include_router(edge_routes.router)
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
    # No span per ASGI message (`http send`/`http receive`): three more spans a request that say nothing the server
    # span does not (bench/gateway_overhead.py).
    FastAPIInstrumentor.instrument_app(app, excluded_urls="healthz,readyz,metrics", exclude_spans=["receive", "send"])
    if not HTTPXClientInstrumentor().is_instrumented_by_opentelemetry:
        HTTPXClientInstrumentor().instrument()  # trace context into OpenAI-compatible HTTP backends
    app.openapi = lambda: _openapi_without_422(app)
    return app


class CloseWhileDraining:
    """Once SIGTERM came, every response says `Connection: close`: a client's next request opens a new
    connection (served during the drain delay, refused after it) instead of reusing one the shutdown closes."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        state = getattr(scope.get("app").state, "gateway", None) if scope.get("app") else None
        if scope["type"] != "http" or state is None or not state.draining:
            await self.app(scope, receive, send)
            return

        async def closing(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), (b"connection", b"close")]}
            await send(message)

        await self.app(scope, receive, closing)


def _redis(url: str | None):
    if not url:
        return None
    import redis.asyncio
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    if not RedisInstrumentor().is_instrumented_by_opentelemetry:
        RedisInstrumentor().instrument()
    return redis.asyncio.from_url(url, socket_timeout=0.5, socket_connect_timeout=0.5)


def backend_factory(settings: Settings, tokenizers: dict[str, ChatTokenizer]):
    def make(endpoint: str, model_id: str, pool: Pool) -> WorkerBackend:
        breaker = CircuitBreaker(settings.breaker_failures, settings.breaker_open_s)
        if endpoint.startswith(("http://", "https://")):
            decode = tokenizers[model_id].tokenizer.decode if pool.prompt_format == "text" else None
            return HttpWorkerBackend(
                endpoint, model_id, pool.kind, breaker, pool.upstream_model, decode, pool.send_cache_salt
            )
        return GrpcWorkerBackend(endpoint, model_id, pool.kind, breaker)

    return make


def _openapi_without_422(app: FastAPI) -> dict:
    """Validation errors are 400s here (OpenAI's convention), so FastAPI's 422 entries would mislead."""
    if app.openapi_schema is None:
        schema = get_openapi(title=app.title, version=app.version, routes=app.routes)
        for path in schema["paths"].values():
            for operation in path.values():
                operation.get("responses", {}).pop("422", None)
        app.openapi_schema = schema
    return app.openapi_schema


async def _gateway_error(request: Request, exc: GatewayError) -> JSONResponse:
    return JSONResponse(exc.body(), status_code=exc.status_code, headers=exc.headers)


async def _validation_error(request: Request, exc: RequestValidationError) -> JSONResponse:
    problems, fields = [], []
    for error in exc.errors():
        if error["type"] == "json_invalid":
            return await _gateway_error(
                request,
                BadRequest(f"request body is not valid JSON: {error.get('ctx', {}).get('error', error['msg'])}"),
            )
        where = ".".join(str(p) for p in error["loc"] if p != "body") or "body"
        problems.append(f"{where}: {error['msg']}")
        fields.append(where)
    return await _gateway_error(request, BadRequest("; ".join(problems), param=fields[0] if fields else None))


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """FastAPI's own refusals (an unparsable body, an unknown route or method) in OpenAI's error shape."""
    error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    body = {"error": {"message": str(exc.detail), "type": error_type, "param": None, "code": None}}
    return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    error = GatewayError("internal error; the gateway log has the details")
    return JSONResponse(error.body(), status_code=500)
