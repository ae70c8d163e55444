"""Bearer API keys. With none configured the gateway is open (local use)."""

import hmac

from fastapi import Request

from gateway.errors import Unauthorized


def require_api_key(request: Request) -> None:
    keys = request.app.state.gateway.settings.api_keys
    if not keys:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("missing API key: send 'Authorization: Bearer <key>'")
    if not any(hmac.compare_digest(token, key) for key in keys):
        raise Unauthorized("invalid API key")
