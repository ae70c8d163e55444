"""Requests that pass from gateway to gateway: each one names itself in `X-Tandem-Via`.

A pool may be another OpenAI-compatible server, and that may be a Tandem gateway (an edge site's gateway in front
of a region's). When a pool's endpoint is the gateway itself, or two gateways route to each other, a request went
round until the first-token timeout: a review saw a hundred nested calls, a 10 s stall and log lines growing with
each. Now a gateway that finds its own name in the header, or more than MOST_HOPS names, refuses the request at
once (508, `routing_loop`), and the answer says which gateways it passed.
"""

import uuid
from contextvars import ContextVar

from serving.openai.errors import GatewayError

HEADER = "X-Tandem-Via"
GATEWAY_ID = f"gw-{uuid.uuid4().hex[:12]}"  # this process: replicas each have their own
MOST_HOPS = 4
_PASSED: ContextVar[tuple[str, ...]] = ContextVar("tandem_via", default=())


class RoutingLoop(GatewayError):
    status_code, error_type, code = 508, "server_error", "routing_loop"


def arrived(value: str | None) -> None:
    """The gateways this request passed (the header's value, or None): refused if this one is among them."""
    passed = tuple(name.strip() for name in (value or "").split(",") if name.strip())
    if GATEWAY_ID in passed or len(passed) >= MOST_HOPS:
        why = "came back to this gateway" if GATEWAY_ID in passed else f"passed {len(passed)} gateways"
        raise RoutingLoop(
            f"routing loop: this request {why} ({HEADER}: {', '.join(passed)}); a pool's endpoint is a gateway "
            "that routes back, or the gateway itself: check the policy's endpoints"
        )
    _PASSED.set(passed)


def onward() -> str:
    """The header's value for a request this gateway sends on to another server."""
    return ", ".join((*_PASSED.get(), GATEWAY_ID))
