"""Each request's server span, and its ids on every response (errors and streams included). Pure ASGI (a
`BaseHTTPMiddleware` would buffer streamed answers), the outermost of the gateway's own middleware.

The span: `METHOD /route` (the matched route's template, e.g. `POST /v1/chat/completions`; the method alone when
no route matched, or the request was refused before routing: a 413, a bad `X-Request-Id`), kind SERVER, the root of
the gateway's own trace with a link to the caller's span where a W3C `traceparent` is sent (its child, and its
`tracestate` and `baggage` read, where TANDEM_TRUST_TRACE_CONTEXT says the callers are trusted), with the HTTP
semantic-convention attributes (`http.request.method`, `url.path` as sent, `url.scheme`, `http.route`,
`http.response.status_code`, `client.address`) and status ERROR for a 5xx or an exception. /healthz, /readyz and
/metrics are not traced: they are polled, and say nothing a trace needs. Made here rather than by
opentelemetry-instrumentation-fastapi, which matched every route again on each request to name the span and added
two more middleware layers: about a tenth of the gateway's CPU per request (bench/gateway_overhead.py,
docs/benchmarks.md).

The ids: a caller's `X-Request-Id` is echoed as sent (1 to 128 printable ASCII characters, no spaces; anything else
is a 400 naming the header, never silently replaced); without one the gateway makes one. The id is the span's
`tandem.request_id` attribute, and `X-Trace-Id` is the span's trace id (32 hex digits), so a caller can find the
request's whole trace from any response.
"""

import json
import re
import secrets
from collections.abc import Callable

from opentelemetry import context, propagate, trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from serving import spans

HEADER = b"x-request-id"
UNTRACED_PATHS = frozenset({"/healthz", "/readyz", "/metrics"})
_VALID = re.compile(r"[\x21-\x7e]{1,128}")
tracer = spans.get_tracer(__name__)  # the SDK's spans at a fraction of their cost (serving/spans.py)


# A caller's trace context, where the gateway does not trust its callers' (the default): read for its traceparent
# alone, which the server span links to. Its baggage is never read (the propagator logged a malformed header's
# text, keys and cards included, before any key was checked), nor its tracestate kept (8 KB on every span).
_CALLERS = TraceContextTextMapPropagator()
_ROOT = context.Context()  # no parent: the gateway's own trace


class RequestSpan:
    def __init__(self, app, trusts: Callable[[], bool] = lambda: False) -> None:
        """`trusts`: whether a caller's trace context is the request's parent (TANDEM_TRUST_TRACE_CONTEXT)."""
        self.app, self.trusts = app, trusts

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        sent = [value for name, value in scope["headers"] if name == HEADER]
        request_id = sent[0].decode("latin-1") if sent else f"req-{secrets.token_hex(16)}"
        valid = not sent or (len(sent) == 1 and _VALID.fullmatch(request_id))
        parent = None
        if scope["path"] in UNTRACED_PATHS:
            span = trace.INVALID_SPAN
        else:
            carrier = _carrier(scope["headers"])
            if self.trusts():
                parent, links = propagate.extract(carrier), None
            else:
                parent, links = _ROOT, _caller_link(carrier)
            span = tracer.start_span(
                scope["method"],
                context=parent,
                kind=trace.SpanKind.SERVER,
                attributes=_request_attributes(scope, request_id if valid else None),
                links=links,
            )
        token = context.attach(trace.set_span_in_context(span, parent))
        started = False
        try:
            if not valid:
                span.set_attribute("http.response.status_code", 400)
                await _refuse(send, span)
                return
            scope.setdefault("state", {})["request_id"] = request_id  # request.state.request_id (the decision log)
            extra = [(HEADER, request_id.encode())]
            trace_id = span.get_span_context().trace_id
            if trace_id:
                extra.append((b"x-trace-id", f"{trace_id:032x}".encode()))

            async def with_ids(message) -> None:
                nonlocal started
                if message["type"] == "http.response.start":
                    started = True
                    message = {**message, "headers": [*message.get("headers", []), *extra]}
                    span.set_attribute("http.response.status_code", message["status"])
                    if message["status"] >= 500:
                        span.set_status(trace.StatusCode.ERROR)
                await send(message)

            await self.app(scope, receive, with_ids)
        except BaseException as exc:
            if not started:  # the 500 is sent outside, by Starlette's ServerErrorMiddleware
                span.set_attribute("http.response.status_code", 500)
            span.record_exception(exc)
            span.set_status(trace.StatusCode.ERROR, type(exc).__name__)
            span.set_attribute("error.type", type(exc).__qualname__)
            raise
        finally:
            context.detach(token)
            route = getattr(scope.get("route"), "path", None)  # set by the router once it matched one
            if route:
                span.update_name(f"{scope['method']} {route}")
                span.set_attribute("http.route", route)
            span.end()


def _carrier(headers) -> dict[str, str]:
    """The headers as the propagators read them: a repeated `tracestate` or `baggage` is one list (W3C), any other
    repeated header counts once, first."""
    carrier: dict[str, str] = {}
    for raw_name, raw_value in headers:
        name, value = raw_name.decode("latin-1"), raw_value.decode("latin-1")
        if name not in carrier:
            carrier[name] = value
        elif name in ("tracestate", "baggage"):
            carrier[name] += f",{value}"
    return carrier


def _caller_link(carrier: dict[str, str]) -> list[trace.Link] | None:
    """A link to the caller's span where it sent a valid traceparent: its trace is found from the gateway's, and a
    caller chooses neither the gateway's trace id (another tenant's, whose X-Trace-Id it then shared) nor whether it
    is sampled (`-00` took every span of a request out of the traces, the workers' too: a review)."""
    if "traceparent" not in carrier:
        return None
    caller = trace.get_current_span(_CALLERS.extract({"traceparent": carrier["traceparent"]})).get_span_context()
    return [trace.Link(caller)] if caller.is_valid else None


_NOT_PRINTABLE = re.compile(rb"[^\x21-\x7e]")
MAX_PATH_CHARS = 1024


def url_path(scope) -> str:
    """The path as sent (percent-encoded; a byte that is not printable ASCII as %XX), cut at MAX_PATH_CHARS: the
    decoded path put a caller's `%0d%0a` and ESC in the span as line breaks and an escape (a review)."""
    raw = scope.get("raw_path")
    if raw is None:
        raw = scope["path"].encode("utf-8", "surrogateescape")
    raw = raw.partition(b"?")[0][: MAX_PATH_CHARS + 1]
    if _NOT_PRINTABLE.search(raw):
        raw = _NOT_PRINTABLE.sub(lambda m: b"%%%02X" % m[0][0], raw)
    path = raw.decode("ascii")
    return path if len(path) <= MAX_PATH_CHARS else path[:MAX_PATH_CHARS] + "…"


def _request_attributes(scope, request_id: str | None) -> dict:
    attributes = {"http.request.method": scope["method"], "url.path": url_path(scope), "url.scheme": scope["scheme"]}
    if request_id is not None:
        attributes["tandem.request_id"] = request_id
    if client := scope.get("client"):
        attributes["client.address"] = client[0]
    return attributes


async def _refuse(send, span) -> None:
    """The 400 for an X-Request-Id that cannot be one, shaped as every other error, with an id of the gateway's own
    (the caller's cannot be echoed) and the trace's, as every answer has."""
    message = "X-Request-Id must be one value of 1 to 128 printable ASCII characters without spaces"
    body = json.dumps(
        {
            "error": {
                "message": message,
                "type": "invalid_request_error",
                "param": "X-Request-Id",
                "code": "invalid_request",
            }
        }
    ).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    headers.append((HEADER, f"req-{secrets.token_hex(16)}".encode()))
    if trace_id := span.get_span_context().trace_id:
        headers.append((b"x-trace-id", f"{trace_id:032x}".encode()))
    await send({"type": "http.response.start", "status": 400, "headers": headers})
    await send({"type": "http.response.body", "body": body})
