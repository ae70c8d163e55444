"""Register this agent with a gateway and keep the registration alive with heartbeats.

The gateway drops an agent it has not heard from for its TTL, so a dead
agent disappears by itself. Failures are logged and retried; serving never
depends on the gateway being reachable.
"""

import asyncio
import logging
import re
import unicodedata

import httpx
from opentelemetry import propagate, trace

from edge_agent.device import probe
from edge_agent.providers import NPU_PROVIDERS

log = logging.getLogger(__name__)
tracer = trace.get_tracer(__name__)
MIN_INTERVAL_S, MAX_BACKOFF_S = 0.2, 30.0


async def keep_registered(
    gateway_url: str,
    token: str,
    agent_id: str,
    endpoint: str,
    model_id: str,
    execution_provider: str,
    max_context_tokens: int,
) -> None:
    body = {
        "agent_id": agent_id,
        "endpoint": endpoint,
        "model": model_id,
        "execution_provider": execution_provider,
        "max_context_tokens": max_context_tokens,
    }
    headers = {"Authorization": f"Bearer {token}"}
    backoff = 1.0
    registered = False
    async with httpx.AsyncClient(timeout=5.0) as client:
        while True:
            try:
                response = await _post(client, gateway_url, body | {"device": device(execution_provider)}, headers,
                                       registered)  # fmt: skip
                interval = max(MIN_INTERVAL_S, float(response.json()["heartbeat_interval_s"]))
                if not registered:
                    log.info("registered with %s as %s; heartbeat every %.1f s", gateway_url, agent_id, interval)
                registered, backoff = True, 1.0
                await asyncio.sleep(interval)
            except (httpx.HTTPError, KeyError, ValueError) as exc:
                detail = exc.response.text[:200] if isinstance(exc, httpx.HTTPStatusError) else str(exc)
                log.warning("registration with %s failed (%s); retrying in %.0f s", gateway_url, detail, backoff)
                registered = False
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF_S, backoff * 2)


def default_agent_id(hostname: str, port: int) -> str:
    """`hostname-port` in the characters an agent id may hold (the gateway refuses others: they reach its log):
    accents dropped, anything else a `-`. A Windows PC named `Büro-PC` registered as nothing, retrying for ever
    (a review); it is `Buro-PC-50061`."""
    plain = unicodedata.normalize("NFKD", hostname).encode("ascii", "ignore").decode()
    plain = re.sub(r"[^A-Za-z0-9._:@-]+", "-", plain).strip("-._:@") or "edge-agent"
    return f"{plain[:100]}-{port}"


def device(execution_provider: str) -> dict:
    """The device's report, its `npu` whether an NPU runs this agent's model: an NPU provider installed beside the
    one that runs it told the gateway's `device.npu` rules the model ran there (a review)."""
    return probe().as_dict() | {"npu": execution_provider in NPU_PROVIDERS}


async def _post(client: httpx.AsyncClient, gateway_url: str, body: dict, headers: dict, heartbeat: bool):
    """A heartbeat is untraced; a (re-)registration is a span whose context the gateway continues."""
    url = f"{gateway_url.rstrip('/')}/v1/edge/register"
    if heartbeat:
        response = await client.post(url, json=body, headers=headers)
        response.raise_for_status()
        return response
    with tracer.start_as_current_span("edge.register") as span:
        span.set_attribute("tandem.agent_id", body["agent_id"])
        span.set_attribute("tandem.execution_provider", body["execution_provider"])
        carrier = dict(headers)
        propagate.inject(carrier)
        response = await client.post(url, json=body, headers=carrier)
        span.set_attribute("http.response.status_code", response.status_code)
        response.raise_for_status()
        return response
