"""The decision that must be made before the network: is this request private?

It is when the app tags it with a tag of the never-leave set (default
`private`, `pii`, `confidential`; tags are read as the gateway reads them,
by `privacy_tags`) or when one of the same PII
detectors the gateway runs fires on the text the request would carry
(`tandem_sdk.scan`). A private request is only ever sent to a local agent on
this device's loopback. The gateway reads the same tags from
`X-Tandem-Privacy`, which the SDK always sends, so it decides too.
"""

import difflib
import re
from collections.abc import Iterable, Mapping
from urllib.parse import urlparse

from tandem_sdk.detectors import DETECTORS, detect
from tandem_sdk.errors import TandemError
from tandem_sdk.normalize import normalize
from tandem_sdk.scan import request_text

NEVER_LEAVE_DEVICE = frozenset({"private", "pii", "confidential"})
DEFAULT_DETECTORS = tuple(DETECTORS)
LOOPBACK_HOSTS = {"127.0.0.1", "::1", "localhost"}
TYPO_CUTOFF = 0.75  # difflib's similarity ratio: "privat"/"private" 0.92, "pi"/"pii" 0.8, "public"/"pii" 0.44
KEY_TYPO_CUTOFF = 0.8  # "privcy" 0.92, "Privasy" 0.86; "private_key" 0.78 and "priority" 0.53 are other keys
TAG_SEPARATORS = re.compile("[,\uff0c\u3001]")  # a comma, a full-width comma, an ideographic comma


class TagError(TandemError, ValueError):
    """Privacy tags that are not a string or a list of strings, or one that reads like a misspelled never-leave
    tag. Nothing was sent anywhere."""


def privacy_tags(*values: object) -> frozenset[str]:
    """Tags from any of: None, "pii", "Private, PII", ["PII", "internal"], "ｐｒｉｖａｔｅ、pii": each string split at
    commas (ASCII, full-width or ideographic) and read by `normalize_tag`."""
    tags: set[str] = set()
    for value in values:
        if value is None:
            continue
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list | tuple | set | frozenset) or not all(isinstance(v, str) for v in items):
            raise TagError(f'privacy tags must be a string or a list of strings, e.g. "pii"; got {value!r}')
        tags |= {normalize_tag(part) for item in items for part in TAG_SEPARATORS.split(item)} - {""}
    return frozenset(tags)


def normalize_tag(tag: str) -> str:
    """One tag as people type it, in the form policies and never-leave sets compare: invisible characters
    dropped, full-width letters and Unicode spaces made ASCII (`tandem_sdk.normalize`), lower-cased, stripped."""
    return normalize(tag).lower().strip()


def resembles(tag: str, tags: Iterable[str], cutoff: float = TYPO_CUTOFF) -> str | None:
    """The tag of `tags` that `tag` reads like a misspelling of ("privat", "PIl", "confidental"), or None."""
    close = difflib.get_close_matches(tag, sorted(tags), n=1, cutoff=cutoff)
    return close[0] if close else None


def misplaced_privacy_key(metadata: Mapping, tags: Iterable[str]) -> str | None:
    """A key of `metadata` other than `privacy` that the caller meant for privacy tags (`Privacy`, `privcy`,
    `privacy_tags`, or a tag as a key: `{"pii": "yes"}`), or None. Read as any other metadata, it would leave
    the request untagged."""
    tags = set(tags)
    for key in metadata:
        if key == "privacy" or not isinstance(key, str):
            continue
        name = normalize_tag(key)
        if name.startswith("privacy") or name in tags or resembles(name, ["privacy"], KEY_TYPO_CUTOFF):
            return key
    return None


def check_spelling(
    tags: Iterable[str], never_leave: Iterable[str] = NEVER_LEAVE_DEVICE, known: Iterable[str] = ()
) -> None:
    """Refuse, before anything is sent, a tag that reads like a misspelled never-leave tag: sent on, it would not
    keep the request on the device. `known` are the app's own tags that only look like one."""
    never = set(never_leave)
    for tag in sorted(set(tags) - never - set(known)):
        meant = resembles(tag, never)
        if meant is not None:
            raise TagError(
                f"privacy tag {tag!r} is not a never-leave tag but reads like {meant!r}; the request was not sent "
                f"anywhere. Correct the tag, or pass known_tags=[{tag!r}] if it is a tag of its own"
            )


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
    fired = detect(request_text(body), detectors)
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
