"""gateway/main.py's GenerationShortcut: which requests it serves itself and which it leaves to FastAPI, body intact.

What the two generation routes answer is tested end to end through the real gateway (tests/integration/
test_request_path.py and the rest); here, the seam."""

import json
from types import SimpleNamespace

import httpx
import pytest
from fastapi import Depends
from fastapi.responses import JSONResponse
from fastapi.routing import APIRoute

from gateway import main
from gateway.main import GenerationShortcut, _check_dependencies
from serving.openai.errors import ModelNotFound

BODY = {"model": "tandem-demo", "messages": [{"role": "user", "content": "hi"}]}


class FastAPIStandIn:
    """What the shortcut hands on to: records the request and the body it read."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, bytes]] = []

    async def __call__(self, scope, receive, send) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body, more = body + message.get("body", b""), message.get("more_body", False)
        self.seen.append((scope["path"], body))
        await JSONResponse({"from": "fastapi"})(scope, receive, send)


@pytest.fixture
def shortcut(monkeypatch):
    async def no_auth(request, state) -> None:
        request.state.tenant = "default"

    fastapi = FastAPIStandIn()
    shortcut = GenerationShortcut(fastapi)
    monkeypatch.setattr(main, "require_api_key", no_auth)
    calls = []

    async def endpoint(body, request, state, policy):
        calls.append((body, policy))
        if body.model == "missing":
            raise ModelNotFound("no model 'missing'", param="model")
        return JSONResponse({"from": "shortcut", "model": body.model})

    model = shortcut._routes["/v1/chat/completions"][1]
    monkeypatch.setitem(shortcut._routes, "/v1/chat/completions", (SimpleNamespace(endpoint=endpoint), model))
    app_state = SimpleNamespace(state=SimpleNamespace(gateway=SimpleNamespace(policy="the policy")))

    async def app(scope, receive, send):
        scope["app"] = app_state
        await shortcut(scope, receive, send)

    client = httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://gateway")
    return SimpleNamespace(client=client, fastapi=fastapi, calls=calls)


async def test_a_valid_request_goes_straight_to_the_route_function(shortcut):
    response = await shortcut.client.post("/v1/chat/completions", json=BODY)
    assert response.json() == {"from": "shortcut", "model": "tandem-demo"}
    assert shortcut.fastapi.seen == []
    assert shortcut.calls[0][1] == "the policy"


async def test_the_route_functions_errors_are_openai_shaped(shortcut):
    response = await shortcut.client.post("/v1/chat/completions", json=BODY | {"model": "missing"})
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize(
    "content, headers",
    [
        (b"{not json", {"content-type": "application/json"}),
        (json.dumps({"model": "m"}).encode(), {"content-type": "application/json"}),  # no messages: invalid
        (json.dumps(BODY).encode(), {"content-type": "text/plain"}),
        (json.dumps(BODY).encode(), {}),  # no content type: FastAPI refuses it, so the shortcut leaves it to FastAPI
        (b"", {}),
    ],
)
async def test_anything_else_goes_to_fastapi_with_its_body_as_sent(shortcut, content, headers):
    response = await shortcut.client.post("/v1/chat/completions", content=content, headers=headers)
    assert response.json() == {"from": "fastapi"}
    assert shortcut.fastapi.seen == [("/v1/chat/completions", content)]
    assert shortcut.calls == []


async def test_other_paths_and_methods_go_to_fastapi(shortcut):
    await shortcut.client.get("/v1/chat/completions")
    await shortcut.client.post("/v1/embeddings", json=BODY)
    assert [path for path, _ in shortcut.fastapi.seen] == ["/v1/chat/completions", "/v1/embeddings"]


def test_the_real_routes_dependencies_are_the_ones_the_shortcut_gives():
    GenerationShortcut(FastAPIStandIn())  # checks them; raises otherwise


def test_a_route_with_a_dependency_the_shortcut_does_not_give_stops_the_gateway():
    async def quota() -> None: ...

    async def handler(extra: None = Depends(quota)) -> None: ...

    with pytest.raises(RuntimeError, match="quota"):
        _check_dependencies(APIRoute("/v1/chat/completions", handler, methods=["POST"]))
