"""The decision that must be made before the network: is this request private?

It is when the app says so (`privacy=` a tag, or tags) or when one of the
same PII detectors the gateway runs fires on the messages' text. A private
request is only ever sent to a local agent on this device's loopback.
"""

from collections.abc import Iterable
from urllib.parse import urlparse

from tandem_sdk.detectors import DETECTORS, detect

PRIVATE_TAGS = frozenset({"private", "pii", "confidential"})
DEFAULT_DETECTORS = tuple(DETECTORS)
LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}


def message_text(messages: Iterable[dict]) -> str:
    parts = []
    for m in messages:
        content = m.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # OpenAI content parts
            parts.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return "\n".join(parts)


def private_reason(
    messages: list[dict], privacy: str | list[str] | None, detectors: tuple[str, ...] = DEFAULT_DETECTORS
) -> str | None:
    """Why this request must stay on the device, or None when it may go to the gateway."""
    tags = {privacy} if isinstance(privacy, str) else set(privacy or ())
    tagged = sorted(tags & PRIVATE_TAGS)
    if tagged:
        return f"the app tagged it {tagged[0]!r}"
    fired = detect(message_text(messages), detectors)
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
