"""The edge agents that registered with this gateway, kept while they heartbeat.

A request from a device whose agent registered names it in `X-Tandem-Agent`;
without an `X-Tandem-Device` header, the agent's own report is the device's
capability. An agent not heard from for `ttl_s` is dropped.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from gateway.classify.features import DeviceCapability

# What a registration's words may be: they are written to the log, the spans and /v1/edge/agents as sent, and an
# agent_id with a line break wrote a forged line into the gateway's log (every device holds the edge token: a review)
ProviderName = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9_]{0,63}$")]  # onnxruntime's CPUExecutionProvider
Address = Annotated[str, Field(pattern=r"^[\x21-\x7e]{1,256}$")]  # printable ASCII without blanks
Name = Annotated[str, Field(pattern=r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]{1,256}$")]  # a line of any script


class AgentDevice(BaseModel):
    model_config = ConfigDict(extra="ignore")
    execution_providers: list[ProviderName] = Field(default=[], max_length=32)
    npu: bool = False
    cores: int | None = None
    ram_gb: float | None = None
    battery: float | None = Field(default=None, ge=0, le=1)
    charging: bool | None = None
    network: str | None = Field(default=None, pattern=r"^[^\x00-\x1f\x7f-\x9f\u2028\u2029]{1,32}$")


class Registration(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$")
    endpoint: Address
    model: Name
    execution_provider: ProviderName
    max_context_tokens: int = Field(ge=1)
    device: AgentDevice


@dataclass
class _Entry:
    registration: Registration
    last_seen: float


class EdgeAgents:
    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s, self._clock = ttl_s, clock
        self._agents: dict[str, _Entry] = {}

    def heartbeat(self, registration: Registration) -> bool:
        """Record a registration or heartbeat; True when the agent is new."""
        is_new = self._live(registration.agent_id) is None
        self._agents[registration.agent_id] = _Entry(registration, self._clock())
        return is_new

    def _live(self, agent_id: str) -> Registration | None:
        entry = self._agents.get(agent_id)
        if entry is None:
            return None
        if self._clock() - entry.last_seen > self.ttl_s:
            del self._agents[agent_id]
            return None
        return entry.registration

    def device(self, agent_id: str | None) -> DeviceCapability | None:
        registration = self._live(agent_id) if agent_id else None
        if registration is None:
            return None
        d = registration.device
        return DeviceCapability(npu=d.npu, ram_gb=d.ram_gb, battery=d.battery, network=d.network)

    def live(self) -> list[Registration]:
        return [r for agent_id in list(self._agents) if (r := self._live(agent_id)) is not None]
