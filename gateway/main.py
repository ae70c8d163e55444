"""Assemble the gateway: its resources (gateway/lifespan.py), middleware, routers, and the one error mapping."""

import asyncio
import logging
from contextvars import ContextVar

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.openapi.utils import get_openapi
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.routing import APIRoute
from opentelemetry.instrumentation.httpx import HTTPXClientInstrumentor
from pydantic import ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from gateway import deps, metrics
from gateway.api import edge_routes, explain_routes, health_routes, openai_routes
from gateway.auth import require_api_key
from gateway.config import Settings
from gateway.cors import CorsForConfiguredOrigins
from gateway.lifespan import app_settings, lifespan
from gateway.request_span import RequestSpan
from serving.body_limit import BodyLimit, replayed
from serving.openai.errors import BadRequest, GatewayError, framework_refusal, refusal
from serving.openai.responses import ResponsesRequest
from serving.openai.schemas import ChatCompletionRequest, CompletionRequest

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> FastAPI:
    """The gateway app. Its settings, read when it starts (gateway/lifespan.py): what
    `app.dependency_overrides[get_settings]` gives, else `settings`, else `get_settings()` (the TANDEM_* variables).
    `settings` is not put in `dependency_overrides`: while that holds anything, FastAPI inspects every dependency's
    signature again on every request (about 1.5 ms a request here; bench/gateway_overhead.py)."""
    # FastAPI's own (native) telemetry off: gateway/request_span.py makes the server span, and two would do the work
    # twice on every request (bench/gateway_overhead.py).
    telemetry = {"tracing": False, "metrics": False, "logs": False}
    # The API's description is served by `_add_api_description`, behind the API key like every other route.
    app = FastAPI(
        title="Tandem gateway",
        version="0.1.0",
        lifespan=lifespan,
        telemetry=telemetry,
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
        redirect_slashes=False,  # a POST redirected (307) is an error to most clients: a 404 that says why instead
    )
    app.state.configured_settings = settings
    app.add_middleware(GenerationShortcut)  # added first, runs last: inside the key check, the body limit, the span
    app.add_middleware(LetStalledClientsGo, stall_s=lambda: _settings(app).client_stall_s)
    if _NOT_THE_STALL not in logging.getLogger("uvicorn.error").filters:
        logging.getLogger("uvicorn.error").addFilter(_NOT_THE_STALL)
    app.add_middleware(BodyLimit, max_bytes=lambda: _settings(app).max_body_bytes)
    app.add_middleware(KeyFirst)  # runs before the body limit reads the body
    app.add_middleware(CloseWhileDraining)
    # The last added runs first: every response, a 413 included, carries the ids, and is inside the request's span.
    app.add_middleware(RequestSpan, trusts=lambda: _settings(app).trust_trace_context)
    app.add_middleware(CorsForConfiguredOrigins, origins=lambda: _settings(app).cors_origins)  # preflights first
    app.include_router(health_routes.router)
    app.include_router(openai_routes.router)  # its routes check the API key themselves
    app.include_router(explain_routes.router, dependencies=[Depends(require_api_key)])
    app.include_router(edge_routes.router)
    app.add_exception_handler(GatewayError, _gateway_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(Exception, _unexpected_error)
    if not HTTPXClientInstrumentor().is_instrumented_by_opentelemetry:
        HTTPXClientInstrumentor().instrument()  # trace context into OpenAI-compatible HTTP backends
    app.openapi = lambda: _openapi_without_422(app)
    _add_api_description(app)
    return app


def _add_api_description(app: FastAPI) -> None:
    """/openapi.json, /docs and /redoc need what the API itself needs: a key, unless the gateway runs with
    `auth: none`. (FastAPI serves them to anyone by default, and they name every route, ops routes included.)
    Swagger UI and ReDoc load their scripts from a CDN, so those pages work only where the browser reaches one."""
    guarded = [Depends(require_api_key)]

    @app.get("/openapi.json", include_in_schema=False, dependencies=guarded)
    async def openapi_document() -> JSONResponse:
        return JSONResponse(app.openapi())

    @app.get("/docs", include_in_schema=False, dependencies=guarded)
    async def swagger_ui() -> HTMLResponse:
        return get_swagger_ui_html(openapi_url="/openapi.json", title=f"{app.title} - Swagger UI")

    @app.get("/redoc", include_in_schema=False, dependencies=guarded)
    async def redoc() -> HTMLResponse:
        return get_redoc_html(openapi_url="/openapi.json", title=f"{app.title} - ReDoc")


def _settings(app: FastAPI) -> Settings:
    """The running gateway's settings; before its lifespan has run (a server started with lifespan off), the ones
    it would start with."""
    state = getattr(app.state, "gateway", None)
    return state.settings if state is not None else app_settings(app)


class KeyFirst:
    """The generation routes' and explain's API key, checked before any of the body is read: outside BodyLimit, which
    reads it whole (a review: a caller without a key had the gateway hold 2 MiB of its body, sent as slowly as it
    liked, before its 401). What follows of the body is dropped as it comes, bounded by the server's read timeout."""

    def __init__(self, app) -> None:
        self.app = app
        self._routes = {route.path: route for route in openai_routes.router.routes if route.path in _KEY_FIRST}

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in _KEY_FIRST:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        if scope["path"] in self._routes:
            scope["route"] = self._routes[scope["path"]]  # the server span is named after it (request_span.py)
        try:  # a caller without a key gets no parsing done, and learns nothing of its body
            await require_api_key(request, scope["app"].state.gateway)
        except GatewayError as exc:
            await (await _gateway_error(request, exc))(scope, receive, send)
            return
        await self.app(scope, receive, send)


class GenerationShortcut:
    """`POST /v1/chat/completions` and `/v1/completions` straight to their route functions, past FastAPI's
    per-request routing, body parsing and dependency solving: about 0.45 ms of a request's CPU, a tenth of the
    gateway's (bench/gateway_overhead.py, docs/benchmarks.md). FastAPI still declares the two routes (the OpenAPI
    schema) and serves everything else, including every request the shortcut does not take as it stands: a body
    that is empty, not `Content-Type: application/json` (FastAPI refuses a missing type too), or fails validation
    goes to FastAPI as it came, so its errors are FastAPI's. The route
    functions get what their dependencies would give (the auth check, the state, the policy); a route that gains
    any other dependency stops the gateway at start (`_check_dependencies`), since the shortcut would skip it.
    KeyFirst has checked the caller's key by then (request.state.tenant)."""

    def __init__(self, app) -> None:
        self.app = app
        routes = {route.path: route for route in openai_routes.router.routes}
        self._routes = {path: (routes[path], model) for path, model in _SHORTCUT_PATHS.items()}
        for route, _ in self._routes.values():
            _check_dependencies(route)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in self._routes:
            await self.app(scope, receive, send)
            return
        request = Request(scope, receive)
        state = scope["app"].state.gateway
        route, model = self._routes[scope["path"]]
        content_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
        raw = await request.body()
        body = refused = None
        if raw and content_type == "application/json" and len(raw) < LARGE_BODY_BYTES:
            try:
                body = model.model_validate_json(raw)
            except ValidationError:
                pass
        elif raw and content_type == "application/json":
            # Seconds of CPU for a large one (2 MiB of nested arrays: 2.3 s): in a thread, the loop serving others,
            # and its 400 made there too, not by FastAPI parsing it all again on the loop.
            body, refused = await asyncio.to_thread(_validated, model, raw)
        if refused is not None:
            await (await _gateway_error(request, refused))(scope, receive, send)
            return
        if body is None:  # FastAPI says what is wrong with it, in its words
            await self.app(scope, replayed(raw, receive), send)
            return
        try:
            response = await route.endpoint(body, request, state, state.policy)
        except GatewayError as exc:
            response = await _gateway_error(request, exc)
        await response(scope, receive, send)


LARGE_BODY_BYTES = 64 * 1024  # validated in a worker thread: a body this large takes milliseconds and up


def _validated(model, raw: bytes) -> tuple[object | None, BadRequest | None]:
    """(the body, None); (None, its 400) for a body with problems; (None, None) for one that is no JSON at all,
    which FastAPI's error handlers describe (an encoding, a depth)."""
    try:
        return model.model_validate_json(raw), None
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        if any(error["type"] == "json_invalid" for error in errors):
            return None, None
        return None, refusal([{**error, "loc": ("body", *error["loc"])} for error in errors])


_SHORTCUT_PATHS = {
    "/v1/chat/completions": ChatCompletionRequest,
    "/v1/completions": CompletionRequest,
    "/v1/responses": ResponsesRequest,
}
_KEY_FIRST = frozenset({*_SHORTCUT_PATHS, "/v1/route/explain"})  # the POSTs whose key is checked before their body


def _check_dependencies(route: APIRoute) -> None:
    """The shortcut checks the API key and gives a route function its body, the request, the state and the policy;
    nothing more. (The app and the include add none: `create_app`.)"""
    calls, pending = set(), list(route.dependant.dependencies)
    while pending:
        dependency = pending.pop()
        calls.add(dependency.call)
        pending.extend(dependency.dependencies)
    known = {require_api_key, deps._state, deps._policy}
    if calls != known:
        names = sorted(getattr(call, "__name__", repr(call)) for call in calls ^ known)
        raise RuntimeError(
            f"{route.path}: dependencies {names} are not what GenerationShortcut gives (gateway/main.py)"
        )


_STALLED: ContextVar[bool] = ContextVar("tandem_client_stalled", default=False)


class LetStalledClientsGo:
    """A streamed answer whose client takes no data for `client_stall_s` (a full socket, a reader that stopped) is
    ended as if the client had left: its backend stream closes and frees the worker's sequence, and nothing is
    blamed on the backend. Before, the stream waited on the client until the backend's deadline, which then counted
    as the worker's failure and opened its breaker (a review: five such clients shut private requests out of the
    edge pool)."""

    def __init__(self, app, stall_s) -> None:
        self.app, self._stall_s = app, stall_s

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        stalled = asyncio.Event()
        waits: set[asyncio.Task] = set()

        async def sending(message) -> None:
            if not message.get("more_body") or stalled.is_set():  # headers, a whole body, the end: as they come
                await send(message)
                return
            try:
                async with asyncio.timeout(self._stall_s()):
                    await send(message)
            except TimeoutError:
                log.warning("client %s took no data for %g s: its stream is ended", _peer(scope), self._stall_s())
                metrics.CLIENTS_LET_GO.inc()
                stalled.set()
                for waiting in waits:  # the watches waiting on the client hear that it left
                    waiting.cancel()
                await asyncio.Event().wait()  # the response's task group ends this when `receive` says disconnect

        body_read = False

        async def receiving():
            nonlocal body_read
            if stalled.is_set():
                return {"type": "http.disconnect"}
            if not body_read:  # the request's body: as it comes (no task a call on every request's path)
                message = await receive()
                body_read = message["type"] != "http.request" or not message.get("more_body")
                return message
            # After the body only the watches for the client leaving ask: a stall is a leaving (`sending` cancels
            # the wait; one task, not two and an asyncio.wait, on every request's path)
            waiting = asyncio.ensure_future(receive())
            waits.add(waiting)
            try:
                return await waiting
            except asyncio.CancelledError:
                if stalled.is_set() and waiting.cancelled() and not asyncio.current_task().cancelling():
                    return {"type": "http.disconnect"}
                raise
            finally:
                waits.discard(waiting)

        try:
            await self.app(scope, receiving, sending)
        finally:
            if stalled.is_set():  # in the server's own task (`sending` ran in the response's): uvicorn's "returned
                _STALLED.set(True)  # without completing response", logged next, is this, already said above


def _peer(scope) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "?"


class _NotTheStall(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not (_STALLED.get() and "without completing response" in record.getMessage())


_NOT_THE_STALL = _NotTheStall()


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
    content_type = request.headers.get("content-type", "").partition(";")[0].strip().lower()
    if content_type != "application/json" and any(tuple(e["loc"]) == ("body",) for e in exc.errors()):
        # e.g. curl -d or requests.post(data=...): a form, which FastAPI does not read as JSON
        sent = f"Content-Type {content_type}" if content_type else "no Content-Type"
        message = f"the request body must be JSON sent with Content-Type: application/json (this one has {sent})"
        return await _gateway_error(request, BadRequest(message, param="Content-Type"))
    return await _gateway_error(request, refusal(exc.errors()))


async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
    """FastAPI's own refusals (an unparsable body, an unknown route or method) in OpenAI's error shape."""
    error_type = "invalid_request_error" if exc.status_code < 500 else "server_error"
    message, code = framework_refusal(exc.status_code, str(exc.detail))
    if exc.status_code == 404 and message == "Not Found":
        message = _unknown_url(request)
    body = {"error": {"message": message, "type": error_type, "param": None, "code": code}}
    return JSONResponse(body, status_code=exc.status_code, headers=getattr(exc, "headers", None))


# The Responses API's endpoints beside a response's own (its id): not served, and no stored response is why
_RESPONSES_TOOLS = {"/v1/responses/input_tokens": "counting a request's input tokens", "/v1/responses/compact":
                    "compacting a conversation"}  # fmt: skip


def _unknown_url(request: Request) -> str:
    """OpenAI's words for a path it does not serve, and what was meant where it can be told (`/v1/chat/completions/`,
    `/v1/responses/{id}`)."""
    path = request.url.path
    said = f"Invalid URL ({request.method} {path[:200]})"
    api, others = _paths(openai_routes), _paths(health_routes, explain_routes, edge_routes)
    if path.endswith("/") and path.rstrip("/") in api | others:
        return f"{said}: did you mean {path.rstrip('/')} (no trailing slash)?"
    if path.rstrip("/") in _RESPONSES_TOOLS:
        return f"{said}: Tandem does not serve {_RESPONSES_TOOLS[path.rstrip('/')]}; POST /v1/responses answers"
    if path.startswith("/v1/responses/"):
        return f"{said}: Tandem stores no responses (store is false), so none can be read back or deleted"
    return f"{said}: Tandem serves {', '.join(sorted(api))} (and {', '.join(sorted(others))})"


def _paths(*route_modules) -> set[str]:
    return {route.path for module in route_modules for route in module.router.routes if "{" not in route.path}


async def _unexpected_error(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    error = GatewayError("internal error; the gateway log has the details")
    return JSONResponse(error.body(), status_code=500)
