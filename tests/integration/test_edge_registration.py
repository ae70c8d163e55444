"""A real edge agent registers with a real gateway; its report becomes the device's capability."""

import time

import httpx
import pytest

from tandem.stack import start_local_stack
from tests.conftest import free_port
from tests.stack import write_policy

pytestmark = pytest.mark.integration
TOKEN = "edge-secret"
BODY = {"model": "tandem-demo", "messages": [{"role": "user", "content": "hi"}]}


def live_agents(url):
    return httpx.get(f"{url}/v1/edge/agents", headers={"Authorization": f"Bearer {TOKEN}"}).json()["agents"]


def test_registration_heartbeat_use_in_classification_and_expiry(demo_checkpoint, tmp_path):
    gateway_port = free_port()
    url = f"http://127.0.0.1:{gateway_port}"
    env = {"TANDEM_EDGE_TOKEN": TOKEN, "TANDEM_EDGE_REGISTER_URL": url, "TANDEM_EDGE_AGENT_TTL_S": "3"}
    stack = start_local_stack(
        demo_checkpoint, write_policy(tmp_path / "p.yaml", free_port(), free_port()), tmp_path, gateway_port, env
    )
    try:
        deadline = time.monotonic() + 15
        while not (agents := live_agents(url)):
            assert time.monotonic() < deadline, "the edge agent never registered"
            time.sleep(0.2)
        agent = agents[0]
        edge_endpoint = next(c.endpoint for c in stack.children if c.pool == "edge")
        assert agent["endpoint"] == edge_endpoint and agent["execution_provider"] == "CPUExecutionProvider"
        assert agent["device"]["cores"] >= 1 and "CPUExecutionProvider" in agent["device"]["execution_providers"]

        explained = httpx.post(
            f"{url}/v1/route/explain", json=BODY, headers={"X-Tandem-Agent": agent["agent_id"]}
        ).json()
        assert explained["features"]["device"]["npu"] is agent["device"]["npu"]
        assert explained["features"]["device"]["ram_gb"] == agent["device"]["ram_gb"]
        reasons = next(r["reasons"] for r in explained["rules"] if r["rule"] == "short-on-capable-device")
        assert reasons == ["device.npu: False != True"]  # judged on the agent's report, not "no device"

        wrong = httpx.post(f"{url}/v1/edge/register", json={}, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401

        stack.stop("edge")  # no more heartbeats
        deadline = time.monotonic() + 10
        while live_agents(url):
            assert time.monotonic() < deadline, "a dead agent was kept"
            time.sleep(0.2)
        # an agent the gateway no longer knows was no device at all, silently; now the caller hears of it
        gone = httpx.post(f"{url}/v1/route/explain", json=BODY, headers={"X-Tandem-Agent": agent["agent_id"]})
        assert gone.status_code == 400, gone.text
        error = gone.json()["error"]
        assert error["param"] == "X-Tandem-Agent" and "is registered with this gateway" in error["message"]
        assert "X-Tandem-Device" in error["message"]
        both = {"X-Tandem-Agent": agent["agent_id"], "X-Tandem-Device": '{"npu": true}'}  # the device's own wins
        empty = {"X-Tandem-Agent": agent["agent_id"], "X-Tandem-Device": ""}  # is no device: the agent is read
        assert httpx.post(f"{url}/v1/route/explain", json=BODY, headers=empty).status_code == 400
        assert httpx.post(f"{url}/v1/route/explain", json=BODY, headers=both).json()["features"]["device"]["npu"]
    finally:
        stack.stop()
