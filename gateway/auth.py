"""Who is calling: a bearer API key maps to a tenant. With no keys configured the gateway is open."""

from fastapi import Request

from gateway.errors import Unauthorized


def require_api_key(request: Request) -> None:
    """Sets request.state.tenant, or raises 401."""
    tenants = request.app.state.gateway.tenants
    if not tenants.requires_key:
        request.state.tenant = request.headers.get("x-tandem-tenant", "default")
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    tenant = tenants.authenticate(token.strip())
    if tenant is None:
        raise Unauthorized("invalid API key")
    request.state.tenant = tenant  # the key decides the tenant; X-Tandem-Tenant is ignored
