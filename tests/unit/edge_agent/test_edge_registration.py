"""The gateway's directory of registered edge agents, and the agent's device probe."""

import pytest

from edge_agent.device import probe
from gateway.edge_agents import AgentDevice, AgentIdTaken, EdgeAgents, Registration, TooManyAgents


class Clock:
    now = 0.0

    def __call__(self):
        return self.now


def registration(agent_id="a1", npu=True, ram_gb=16.0, endpoint="grpc://10.0.0.2:50061"):
    return Registration(agent_id=agent_id, endpoint=endpoint, model="m", execution_provider="QNNExecutionProvider",
                        max_context_tokens=2048, device=AgentDevice(npu=npu, ram_gb=ram_gb))  # fmt: skip


def test_a_live_agents_id_is_not_taken_by_another_endpoint():
    """(a review) Every device holds the edge token: registering another device's agent_id replaced its report, and
    with it the capability its requests were routed by. The id is the first endpoint's while it heartbeats."""
    clock = Clock()
    agents = EdgeAgents(ttl_s=10, clock=clock)
    agents.heartbeat(registration(npu=False))
    with pytest.raises(AgentIdTaken, match="registered from another endpoint"):
        agents.heartbeat(registration(npu=True, endpoint="grpc://10.6.6.6:50061"))
    assert agents.device("a1").npu is False
    clock.now = 11  # the first stopped heartbeating: the id is free
    assert agents.heartbeat(registration(npu=True, endpoint="grpc://10.6.6.6:50061")) is True


def test_an_agent_is_kept_while_it_heartbeats_and_dropped_after_the_ttl():
    clock = Clock()
    agents = EdgeAgents(ttl_s=10, clock=clock)
    assert agents.heartbeat(registration()) is True
    clock.now = 8
    assert agents.heartbeat(registration()) is False  # a heartbeat, not a new agent
    clock.now = 17
    assert agents.device("a1").npu is True and agents.device("a1").ram_gb == 16.0
    clock.now = 18.5
    assert agents.device("a1") is None and agents.live() == []


def test_registrations_are_bounded_and_the_expired_swept_without_being_asked_for():
    """(a review) Every device holds the edge token: each new agent_id was kept, and an expired one dropped only when
    its own id was asked for again; 20,000 registrations grew the gateway 77 MB, never to shrink."""
    clock = Clock()
    agents = EdgeAgents(ttl_s=10, clock=clock, most=3)
    for i in range(3):
        agents.heartbeat(registration(f"a{i}"))
    with pytest.raises(TooManyAgents, match="holds 3 live edge agents"):
        agents.heartbeat(registration("a3"))
    assert agents.heartbeat(registration("a0")) is False  # one registered heartbeats on
    clock.now = 11  # a1 and a2 expired, never asked for; a0 heartbeat at 0: expired too
    assert agents.heartbeat(registration("a3")) is True
    assert [r.agent_id for r in agents.live()] == ["a3"] and len(agents._agents) == 1


@pytest.mark.parametrize("device", [{"ram_gb": float("nan")}, {"ram_gb": -1}, {"cores": -5}, {"cores": 0}])
def test_a_device_report_x_tandem_device_would_refuse_is_refused(device):
    with pytest.raises(ValueError):
        AgentDevice(**device)


def test_unknown_or_absent_agent_gives_no_device():
    agents = EdgeAgents(ttl_s=10)
    agents.heartbeat(registration())
    assert agents.device(None) is None and agents.device("other") is None


def test_probe_reports_what_this_machine_has():
    report = probe()
    assert "CPUExecutionProvider" in report.execution_providers
    assert report.cores and report.cores >= 1
    assert report.ram_gb is None or report.ram_gb > 0
    assert report.battery is None or 0 <= report.battery <= 1
    assert report.npu == any(p in report.execution_providers for p in ("QNNExecutionProvider", "OpenVINOExecutionProvider",
                                                                       "VitisAIExecutionProvider", "CoreMLExecutionProvider",
                                                                       "DmlExecutionProvider"))  # fmt: skip


def test_the_default_agent_id_is_one_the_gateway_takes_whatever_the_hostname():
    """A hostname outside ASCII (`Büro-PC`) made a default id the gateway refused: the agent retried for ever."""
    from edge_agent.registration import default_agent_id

    for hostname, expected in (("Büro-PC", "Buro-PC-50061"), ("laptop.local", "laptop.local-50061"),
                               ("我的电脑", "edge-agent-50061"), ("a b\nc", "a-b-c-50061")):  # fmt: skip
        assert default_agent_id(hostname, 50061) == expected
        assert registration(agent_id=expected).agent_id == expected  # the gateway's own model takes it
