"""The gateway's server span and request ids (gateway/request_span.py), read back from the OpenTelemetry SDK."""

import httpx
import pytest
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from opentelemetry import baggage, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from gateway import request_span
from gateway.request_span import RequestSpan

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


@pytest.fixture
def spans(monkeypatch):
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(request_span, "tracer", provider.get_tracer("test"))
    return exporter


TRUSTED = {"trusted": True}


@pytest.fixture
def client(request):
    """The app behind RequestSpan; `@pytest.mark.parametrize("client", [TRUSTED], indirect=True)` trusts callers'
    trace context (TANDEM_TRUST_TRACE_CONTEXT)."""
    trusted = getattr(request, "param", {}).get("trusted", False)
    app = FastAPI()

    @app.get("/v1/models/{model:path}")
    async def model(model: str):
        current = trace.get_current_span()  # handlers run inside the request's span
        return {"id": model, "span": f"{current.get_span_context().span_id:016x}"}

    @app.get("/baggage")
    async def baggage_seen():
        return {"baggage": dict(baggage.get_all())}

    @app.get("/healthz")
    async def healthz():
        return {"ok": True}

    @app.get("/fails")
    async def fails():
        return JSONResponse({"error": "down"}, status_code=503)

    @app.get("/raises")
    async def raises():
        raise RuntimeError("boom")

    app.add_middleware(RequestSpan, trusts=lambda: trusted)
    transport = httpx.ASGITransport(app, raise_app_exceptions=False)
    return httpx.AsyncClient(transport=transport, base_url="http://gateway")


@pytest.mark.parametrize("client", [TRUSTED], indirect=True)
async def test_the_span_is_named_by_the_route_template_and_continues_a_trusted_callers_trace(client, spans):
    traceparent = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"
    response = await client.get("/v1/models/org/name", headers={"traceparent": traceparent, "X-Request-Id": "r-1"})
    (span,) = spans.get_finished_spans()
    assert span.name == "GET /v1/models/{model:path}"
    assert span.kind == trace.SpanKind.SERVER
    assert f"{span.context.trace_id:032x}" == CALLER_TRACE
    assert f"{span.parent.span_id:016x}" == "00f067aa0ba902b7"
    assert response.json()["span"] == f"{span.context.span_id:016x}"
    assert response.headers["x-trace-id"] == CALLER_TRACE
    assert response.headers["x-request-id"] == "r-1"
    assert span.attributes["tandem.request_id"] == "r-1"
    assert span.attributes["http.route"] == "/v1/models/{model:path}"
    assert span.attributes["http.request.method"] == "GET"
    assert span.attributes["url.path"] == "/v1/models/org/name"
    assert span.attributes["http.response.status_code"] == 200
    assert span.status.status_code == trace.StatusCode.UNSET


async def test_without_a_caller_trace_or_id_both_are_made(client, spans):
    response = await client.get("/v1/models/m")
    (span,) = spans.get_finished_spans()
    assert span.parent is None
    assert response.headers["x-trace-id"] == f"{span.context.trace_id:032x}"
    assert response.headers["x-request-id"].startswith("req-")
    assert span.attributes["tandem.request_id"] == response.headers["x-request-id"]


async def test_server_errors_and_exceptions_mark_the_span(client, spans):
    assert (await client.get("/fails")).status_code == 503
    assert (await client.get("/raises")).status_code == 500
    failed, raised = spans.get_finished_spans()
    assert failed.status.status_code == trace.StatusCode.ERROR
    assert failed.attributes["http.response.status_code"] == 503
    assert raised.status.status_code == trace.StatusCode.ERROR
    assert raised.attributes["http.response.status_code"] == 500  # sent outside the span, by Starlette
    assert raised.attributes["error.type"] == "RuntimeError"
    assert [event.name for event in raised.events] == ["exception"]


async def test_unknown_routes_are_named_by_method_only(client, spans):
    assert (await client.get("/nowhere/abc123")).status_code == 404
    (span,) = spans.get_finished_spans()
    assert span.name == "GET"  # not the path: one span name per route, not per URL
    assert span.attributes["http.response.status_code"] == 404


async def test_health_polls_are_not_traced_but_carry_a_request_id(client, spans):
    response = await client.get("/healthz")
    assert response.status_code == 200 and response.headers["x-request-id"].startswith("req-")
    assert "x-trace-id" not in response.headers
    assert spans.get_finished_spans() == ()


@pytest.mark.parametrize("headers", [[("X-Request-Id", "two words")], [("X-Request-Id", "a"), ("X-Request-Id", "b")]])
async def test_a_bad_request_id_is_a_400_naming_the_header_and_is_not_recorded(client, spans, headers):
    response = await client.get("/v1/models/m", headers=headers)
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "X-Request-Id"
    (span,) = spans.get_finished_spans()
    assert "tandem.request_id" not in span.attributes
    assert span.attributes["http.response.status_code"] == 400


@pytest.mark.parametrize("client", [TRUSTED], indirect=True)
async def test_repeated_trace_headers_read_as_w3c_says(client, spans):
    first = f"00-{CALLER_TRACE}-00f067aa0ba902b7-01"
    second = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    headers = [("traceparent", first), ("traceparent", second), ("tracestate", "a=1"), ("tracestate", "b=2")]
    await client.get("/v1/models/m", headers=headers)
    (span,) = spans.get_finished_spans()
    assert f"{span.context.trace_id:032x}" == CALLER_TRACE  # the first traceparent
    assert dict(span.context.trace_state) == {"a": "1", "b": "2"}  # tracestate lines are one list


@pytest.mark.parametrize("flags", ["01", "00"])
async def test_by_default_a_callers_trace_is_linked_not_joined(client, spans, flags):
    """A caller chooses neither the trace id (another tenant's) nor whether the request is sampled (`-00` took the
    request's every span out of the traces); its tracestate is not kept and its baggage not read (a review)."""
    caller_span = "00f067aa0ba902b7"
    headers = {
        "traceparent": f"00-{CALLER_TRACE}-{caller_span}-{flags}",
        "tracestate": "vendor=" + "x" * 200,
        "baggage": "user.email=ann@example.com",
    }
    response = await client.get("/v1/models/m", headers=headers)
    (span,) = spans.get_finished_spans()  # recorded, though the caller said not sampled
    assert span.parent is None and f"{span.context.trace_id:032x}" != CALLER_TRACE
    assert response.headers["x-trace-id"] == f"{span.context.trace_id:032x}"
    (link,) = span.links
    assert (f"{link.context.trace_id:032x}", f"{link.context.span_id:016x}") == (CALLER_TRACE, caller_span)
    assert not span.context.trace_state and not link.context.trace_state
    assert (await client.get("/baggage", headers=headers)).json() == {"baggage": {}}


@pytest.mark.parametrize("client", [TRUSTED], indirect=True)
async def test_a_trusted_callers_baggage_is_read(client, spans):
    response = await client.get("/baggage", headers={"baggage": "team=ml"})
    assert response.json() == {"baggage": {"team": "ml"}}


async def test_a_malformed_traceparent_is_no_link(client, spans):
    await client.get("/v1/models/m", headers={"traceparent": "00-zz-yy-01"})
    (span,) = spans.get_finished_spans()
    assert span.parent is None and not span.links


async def test_the_path_is_recorded_as_sent_and_cut():
    """`%0d%0a` and ESC decoded into the attribute forged a log line where a collector printed it; a 64 KB path on
    each of 70 requests pushed one export past a collector's 4 MiB limit (a review)."""
    scope = {"path": "/v1/x\r\nCRITICAL forged\x1b[31m", "raw_path": b"/v1/x%0d%0aCRITICAL forged%1b[31m"}
    assert request_span.url_path(scope) == "/v1/x%0d%0aCRITICAL%20forged%1b[31m"
    assert request_span.url_path({"path": "/a", "raw_path": "/é\x7f".encode()}) == "/%C3%A9%7F"
    long = request_span.url_path({"path": "/", "raw_path": b"/" + b"a" * 70_000})
    assert len(long) == request_span.MAX_PATH_CHARS + 1 and long.endswith("…")
