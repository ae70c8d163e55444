"""`X-Request-Id` in, `X-Request-Id` and `X-Trace-Id` out, on every response (errors and streams included).

A caller's id is echoed as sent (1 to 128 printable ASCII characters, no spaces; anything else is a 400
naming the header, never silently replaced); without one the gateway makes one. The id is also the
`tandem.request_id` attribute of the request's span, and `X-Trace-Id` is that span's trace id (32 hex
digits), so a caller can find the request's whole trace from any response.
"""

import json
import re
import uuid

from opentelemetry import trace

HEADER = "x-request-id"
_VALID = re.compile(r"[\x21-\x7e]{1,128}")


class RequestId:
    """Pure ASGI (a `BaseHTTPMiddleware` would buffer streamed answers)."""

    def __init__(self, app) -> None:
        self.app = app

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = [value for name, value in scope["headers"] if name == HEADER.encode()]
        request_id = sent[0].decode("latin-1") if sent else f"req-{uuid.uuid4().hex}"
        if sent and (len(sent) > 1 or not _VALID.fullmatch(request_id)):
            await _refuse(send)
            return
        span = trace.get_current_span()
        span.set_attribute("tandem.request_id", request_id)
        trace_id = span.get_span_context().trace_id
        extra = [(b"x-request-id", request_id.encode())]
        if trace_id:
            extra.append((b"x-trace-id", f"{trace_id:032x}".encode()))

        async def with_ids(message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        await self.app(scope, receive, with_ids)


async def _refuse(send) -> None:
    message = "X-Request-Id must be one value of 1 to 128 printable ASCII characters without spaces"
    body = json.dumps(
        {"error": {"message": message, "type": "invalid_request_error", "param": "X-Request-Id", "code": None}}
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})
