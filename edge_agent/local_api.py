"""The local agent protocol: what the SDK on this device talks to for private prompts.

Loopback only (the agent refuses any other bind address for it): a private
prompt reaches this process without ever leaving the device. A web page the
user visits can reach loopback too, so every request must also:
- name a loopback `Host` (127.0.0.1, localhost or [::1], any port): a DNS
  rebinding page sends its own host name (403);
- carry no `Origin` header: browsers add one to cross-site requests, the SDK
  never sends one (403);
- be `application/json` when it has a body: a page cannot send that without
  a CORS preflight, which this app never answers (415);
- carry the per-device token (`Authorization: Bearer <token>`) that the agent
  writes to a file only its user can read (tandem_sdk.local_token; 401);
  but for the health probe with a challenge, which the SDK sends without the
  token, so that the agent proves it holds the token first.
Routes:
- `GET /v1/local/health`: `{"kind": "edge", "model", "execution_provider", "max_context_tokens"}`, and with an
  `X-Tandem-Challenge` header, `proof`: HMAC-SHA256 of the challenge under the token;
- `POST /v1/chat/completions` and `GET /v1/models` (serving/engine_app.py):
  OpenAI's request and response shapes, whole or streamed (SSE), answered by
  this agent's own engine.
docs/sdk.md is the full protocol.
"""

import hmac

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from tandem_sdk.local_token import CHALLENGE, CHALLENGE_HEADER, load_or_create, proof

from serving.body_limit import BodyLimit
from serving.engine_api import Engine
from serving.engine_app import add_openai_routes, error_response
from serving.openai.chat_tokenizer import ChatTokenizer

LOOPBACK_HOSTS = {"127.0.0.1", "[::1]", "localhost"}
MAX_BODY_BYTES = 2 * 1024 * 1024


def _host_name(host_header: str) -> str:
    """`127.0.0.1:50062` -> 127.0.0.1, `[::1]:50062` -> [::1]."""
    if host_header.startswith("["):
        return host_header[: host_header.find("]") + 1]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _refusal(request: Request, token: str) -> JSONResponse | None:
    """Why this request may not use the agent, as the response to send; None when it may."""
    if _host_name(request.headers.get("host", "").lower()) not in LOOPBACK_HOSTS:
        return error_response(403, "the local agent answers only Host 127.0.0.1, localhost or [::1]", "forbidden_host")
    if "origin" in request.headers:
        return error_response(403, "the local agent refuses browser requests (an Origin header)", "forbidden_origin")
    if request.method == "POST" and request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return error_response(415, "the local agent takes Content-Type: application/json", "unsupported_media_type")
    if request.method == "GET" and request.url.path == "/v1/local/health" and _challenge(request) is not None:
        return None  # the SDK's probe: it sends no token before the agent has proved it holds one
    scheme, _, presented = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(presented.strip().encode(), token.encode()):
        return error_response(
            401, "the local agent needs 'Authorization: Bearer <token>' from its token file", "invalid_token"
        )
    return None


def _challenge(request: Request) -> str | None:
    value = request.headers.get(CHALLENGE_HEADER, "")
    return value if CHALLENGE.fullmatch(value) else None


def local_app(engine: Engine, chat: ChatTokenizer, model_id: str, token: str | None = None) -> FastAPI:
    """The app; `token` defaults to the device's token file (written, mode 0600, if there is none)."""
    app = FastAPI(title="Tandem local agent", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(BodyLimit, max_bytes=MAX_BODY_BYTES, setting="the local agent's limit")
    token = token or load_or_create()

    @app.middleware("http")
    async def guard(request: Request, call_next):
        return _refusal(request, token) or await call_next(request)

    @app.get("/v1/local/health")
    async def health(request: Request) -> dict:
        stats = engine.stats()
        answer = {
            "kind": engine.kind,
            "model": model_id,
            "execution_provider": engine.execution_provider,
            "max_context_tokens": stats.max_context_tokens,
        }
        if (challenge := _challenge(request)) is not None:
            answer["proof"] = proof(token, challenge)
        return answer

    add_openai_routes(app, engine, chat, model_id, private=True)  # a private prompt never leaves this device
    return app
