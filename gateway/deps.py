"""The typed dependencies route handlers take, each one thing the gateway holds (gateway/state.py) for the app
the request came to: `Config` (its settings), `CurrentPolicy` (the policy, read once per request: a reload that
lands meanwhile does not change it under the request), `Registry` (the backends), `EdgeAgentsDep`, and `State` for
the rest. All async: FastAPI resolves an async
dependency on the event loop, a sync one in its thread pool (a hop per request).

The settings come from `gateway.config.get_settings`, once, when the app starts (gateway/lifespan.py); a test
overrides them in FastAPI's own place, `app.dependency_overrides[get_settings] = lambda: Settings(...)` (a
function of no arguments, called once when the app starts), or hands them to `create_app(settings)`. The servers use the second: while
`dependency_overrides` holds anything, FastAPI inspects every dependency's signature again on each request.
"""

from typing import Annotated

from fastapi import Depends, Request

from gateway.backends.registry import BackendRegistry
from gateway.config import Settings
from gateway.edge_agents import EdgeAgents
from gateway.policy.schema import Policy
from gateway.state import GatewayState


async def _state(request: Request) -> GatewayState:
    return request.app.state.gateway


State = Annotated[GatewayState, Depends(_state)]


async def _settings(state: State) -> Settings:
    return state.settings


async def _policy(state: State) -> Policy:
    return state.policy


async def _registry(state: State) -> BackendRegistry:
    return state.registry


async def _edge_agents(state: State) -> EdgeAgents:
    return state.edge_agents


Config = Annotated[Settings, Depends(_settings)]
CurrentPolicy = Annotated[Policy, Depends(_policy)]
Registry = Annotated[BackendRegistry, Depends(_registry)]
EdgeAgentsDep = Annotated[EdgeAgents, Depends(_edge_agents)]
