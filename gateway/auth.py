"""Who is calling: a bearer API key maps to a tenant. With no keys configured the gateway is open."""

from fastapi import Request
from opentelemetry import trace

from gateway.errors import Unauthorized

tracer = trace.get_tracer(__name__)


def require_api_key(request: Request) -> None:
    """Sets request.state.tenant, or raises 401."""
    with tracer.start_as_current_span("gateway.auth") as span:
        tenants = request.app.state.gateway.tenants
        span.set_attribute("tandem.auth", "api_key" if tenants.requires_key else "open")
        request.state.tenant = _tenant(request, tenants)
        span.set_attribute("tandem.tenant", request.state.tenant)


def _tenant(request: Request, tenants) -> str:
    if not tenants.requires_key:
        return request.headers.get("x-tandem-tenant", "default")
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    tenant = tenants.authenticate(token.strip())
    if tenant is None:
        raise Unauthorized("invalid API key")
    return tenant  # the key decides the tenant; X-Tandem-Tenant is ignored
