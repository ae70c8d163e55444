"""Requests that pass from gateway to gateway: each one names itself in the standard `Via` header (RFC 9110 7.6.3).

A pool may be another OpenAI-compatible server, and that may be a Tandem gateway (an edge site's gateway in front
of a region's). When a pool's endpoint is the gateway itself, or two gateways route to each other, a request went
round until the first-token timeout: a review saw a hundred nested calls, a 10 s stall and log lines growing with
each. Now a gateway that finds its own name in `Via`, or MOST_HOPS Tandem gateways there, refuses the request at
once (508, `routing_loop`), and the answer says which gateways it passed. `Via`, not an `X-Tandem-*` header: a
gateway of an earlier version refuses an `X-Tandem-*` header it does not know, and in a rolling upgrade every
request a new gateway sent to an old one failed (a review); every server and proxy takes `Via`, and proxies add to it.
"""

import uuid
from contextvars import ContextVar

from serving.openai.errors import GatewayError

HEADER = "Via"
GATEWAY_ID = f"tandem-{uuid.uuid4().hex[:12]}"  # this process: replicas each have their own
MOST_HOPS = 4
_RECEIVED: ContextVar[str] = ContextVar("tandem_via", default="")


class RoutingLoop(GatewayError):
    status_code, error_type, code = 508, "server_error", "routing_loop"


def arrived(values: list[str]) -> None:
    """The `Via` lines the request came with: refused if this gateway is among those it passed, or too many are."""
    received = ", ".join(value.strip() for value in values if value.strip())
    entries = (entry.split() for entry in received.split(","))
    passed = [words[1] for words in entries if len(words) >= 2]  # `1.1 name [comment]`
    ours = [name for name in passed if name.startswith("tandem-")]
    if GATEWAY_ID in ours or len(ours) >= MOST_HOPS:
        why = "came back to this gateway" if GATEWAY_ID in ours else f"passed {len(ours)} Tandem gateways"
        raise RoutingLoop(
            f"routing loop: this request {why} (Via: {', '.join(ours)}); a pool's endpoint is a gateway that routes "
            "back, or the gateway itself: check the policy's endpoints"
        )
    _RECEIVED.set(received)


def onward() -> str:
    """The `Via` value for a request this gateway sends on to another server."""
    received = _RECEIVED.get()
    return f"{received}, 1.1 {GATEWAY_ID}" if received else f"1.1 {GATEWAY_ID}"
