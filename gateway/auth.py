"""Who is calling: a bearer API key maps to a tenant. Open only when the config says `auth: none`.

Also the ops check: /metrics and the details of /readyz carry every tenant's
names and traffic, so on the public listener they need the ops token.
"""

import hmac

from fastapi import Request
from opentelemetry import trace

from gateway.deps import State
from gateway.tenants import TENANT_NAME_RULE, is_tenant_name
from serving.openai.errors import BadRequest, Unauthorized

# auth none: the X-Tandem-Tenant names one gateway keeps apart (each labels its metrics: ~1 KB of memory and of
# /metrics a name). At 256, a test suite naming a tenant per run locked out new names on a long-running stack.
MAX_NAMED_TENANTS = 4096


async def require_api_key(request: Request, state: State) -> None:
    """Sets request.state.tenant, or raises 401. Async: a SHA-256 and a dict lookup need no thread (FastAPI runs a
    sync dependency in its thread pool, a hop per request). Its outcome goes on the request's server span
    (`tandem.auth`, `tandem.tenant`): a span of its own cost more than the check (bench/gateway_overhead.py)."""
    span = trace.get_current_span()
    span.set_attribute("tandem.auth", state.settings.auth)
    request.state.tenant = _tenant(request, state)
    span.set_attribute("tandem.tenant", request.state.tenant)


def _tenant(request: Request, state) -> str:
    if state.settings.auth == "none":
        named = request.headers.getlist("x-tandem-tenant")
        if not named:
            return "default"
        if len(named) > 1 or not is_tenant_name(named[0]):
            raise BadRequest(f"X-Tandem-Tenant: {TENANT_NAME_RULE}, sent once", param="X-Tandem-Tenant")
        if named[0] not in state.named_tenants:
            # Each name is a label of every tenant metric and keys in Redis: 5,000 names in 3 s made 5,000 more series
            # and 4 MiB more memory, without end (a review)
            if len(state.named_tenants) >= MAX_NAMED_TENANTS:
                raise BadRequest(
                    f"X-Tandem-Tenant: this gateway (auth none) has served {MAX_NAMED_TENANTS} tenants' names since it "
                    "started, the most it keeps apart; send one of those, or run it with keys (TANDEM_API_KEYS)",
                    param="X-Tandem-Tenant",
                )
            state.named_tenants.add(named[0])
        return named[0]
    token = _bearer(request)
    if not token:
        raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    tenant = state.tenants.authenticate(token)
    if tenant is None:
        raise Unauthorized("invalid API key")
    claimed = request.headers.get("x-tandem-tenant")
    if claimed is not None and claimed != tenant:
        raise BadRequest(
            "X-Tandem-Tenant is only read when the gateway runs with auth: none; with keys, the key decides the tenant",
            param="X-Tandem-Tenant",
        )
    return tenant


def is_ops(request: Request) -> bool:
    """May this caller read /metrics and the details of /readyz? Anyone when auth is none; else the ops token."""
    settings = request.app.state.gateway.settings
    if settings.auth == "none":
        return True
    expected = settings.ops_token.get_secret_value() if settings.ops_token else ""
    token = _bearer(request)
    return bool(expected and token) and hmac.compare_digest(token.encode(errors="replace"), expected.encode())


def shows_backend_addresses(request: Request) -> bool:
    """May callers see backends' addresses (X-Tandem-Backend, /v1/route/explain)? Where the settings open them
    (TANDEM_SHOW_BACKEND_ADDRESSES), or with no keys (auth none: anyone is an operator); else a backend is its label
    (`cloud/0`), which the operators' /readyz maps to its address. (Not by the ops token: a generation's or an
    explain's bearer is the tenant's key.)"""
    settings = request.app.state.gateway.settings
    return settings.show_backend_addresses or settings.auth == "none"


def _bearer(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""
