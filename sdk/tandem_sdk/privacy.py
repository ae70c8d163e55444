"""The decision that must be made before the network: is this request private?

It is when the app tags it with a tag of the never-leave set (default
`private`, `pii`, `confidential`; tags are read as the gateway reads them,
by `tandem_sdk.tags`) or when one of the same PII
detectors the gateway runs fires on the text the request would carry
(`tandem_sdk.scan`). A private request is only ever sent to a local agent on
this device's loopback. The gateway reads the same tags from
`X-Tandem-Privacy`, which the SDK always sends, so it decides too.
"""

from collections.abc import Iterable, Mapping
from urllib.parse import urlparse

from tandem_sdk.detectors import DETECTORS, detect
from tandem_sdk.scan import request_text

NEVER_LEAVE_DEVICE = frozenset({"private", "pii", "confidential"})
DEFAULT_DETECTORS = tuple(DETECTORS)
LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}


def private_reason(
    body: Mapping,
    tags: Iterable[str] = (),
    detectors: tuple[str, ...] = DEFAULT_DETECTORS,
    never_leave: Iterable[str] = NEVER_LEAVE_DEVICE,
) -> str | None:
    """Why this request must stay on the device, or None when it may go to the gateway."""
    tagged = sorted(set(tags) & set(never_leave))
    if tagged:
        return f"the app tagged it {tagged[0]!r}"
    text = request_text(body)
    if tags:  # a tag leaves in X-Tandem-Privacy: an address passed as one went out unscanned (a review)
        text = "\n".join((text, *sorted(tags)))
    fired = detect(text, detectors)
    if fired:
        return f"the {', '.join(fired)} detector{'s' if len(fired) > 1 else ''} fired on its text"
    return None


def check_loopback(url: str) -> str:
    """A local agent URL must point at this device; anything else could carry private text off it."""
    host = urlparse(url).hostname
    if host not in LOOPBACK_HOSTS:
        raise ValueError(
            f"local agent {url!r} is not on loopback ({sorted(LOOPBACK_HOSTS)}); private prompts would leave"
        )
    return url.rstrip("/")
