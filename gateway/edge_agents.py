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
    # as X-Tandem-Device's are bounded (sdk device.py): `ram_gb: NaN` and `cores: -5` were taken (a review)
    cores: int | None = Field(default=None, ge=1)
    ram_gb: float | None = Field(default=None, ge=0, le=1e6, allow_inf_nan=False)
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


# The most agents one gateway keeps. Every device holds the edge token, and each new agent_id was kept, an expired
# one dropped only when its own id was asked for again: 20,000 registrations in 23 s grew the gateway 77 MB and
# /v1/edge/agents to 39 MB, never to shrink (a review).
MAX_AGENTS = 10_000


class TooManyAgents(Exception):
    """MAX_AGENTS live agents are registered: a new one is refused until some stop heartbeating."""


class AgentIdTaken(Exception):
    """A live agent registered this agent_id from another endpoint: the id is its until it stops heartbeating."""


class EdgeAgents:
    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.monotonic, most: int = MAX_AGENTS) -> None:
        self.ttl_s, self._clock, self._most = ttl_s, clock, most
        self._agents: dict[str, _Entry] = {}
        self._swept = clock()

    def heartbeat(self, registration: Registration) -> bool:
        """Record a registration or heartbeat; True when the agent is new. TooManyAgents for a new agent when
        `most` live ones are registered; AgentIdTaken for a live agent's id from another endpoint."""
        live = self._live(registration.agent_id)
        if live is not None and live.endpoint != registration.endpoint:
            # Every device holds the edge token: a registration of another's id replaced its report, and the device
            # capability its requests were routed by (a review). Its own agent moving to a new endpoint waits a TTL.
            raise AgentIdTaken(
                f"agent_id {registration.agent_id!r} is registered from another endpoint; it is free once that agent "
                f"has not been heard from for {self.ttl_s:g} s"
            )
        is_new = live is None
        if is_new:
            if self._clock() - self._swept > self.ttl_s or len(self._agents) >= self._most:
                self._sweep()  # the expired go, at most once a TTL (or when full): not an O(n) walk per agent
            if len(self._agents) >= self._most:
                raise TooManyAgents(f"this gateway holds {self._most} live edge agents, the most it keeps")
        self._agents[registration.agent_id] = _Entry(registration, self._clock())
        return is_new

    def _sweep(self) -> None:
        self._swept = now = self._clock()
        for agent_id in [a for a, entry in self._agents.items() if now - entry.last_seen > self.ttl_s]:
            del self._agents[agent_id]

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
