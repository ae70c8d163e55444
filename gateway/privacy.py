"""Every privacy decision the gateway makes, in one place: a private request never reaches a cloud backend.

Each path asks this module and nothing else:
- load time (`policy_problems`, from the policy schema): a policy in which a
  rule could send a never-leave tag to a cloud pool, or whose detectors tag
  requests with a tag that is not never-leave, does not load;
- classify (`request_tags`, `detected`): the tags a request carries, from
  its body, its header and the PII detectors on the text it would send; a
  tag the policy does not know is refused, never ignored;
- decide, explain, replay (`is_private`, `allowed_pools`): which pools a
  request may go to;
- rank, dispatch, failover (`candidate_refusal`): which backends of a pool
  may see it, by the kind each backend reports of itself;
- the wire (`check_before_wire`): the backend client's last check, which
  fails closed;
- hints and traces (`hints_for`, `may_trace_content`): a private prompt is
  never hashed into shared prefix hints, and its text never goes into a span.
The property test (tests/unit/gateway/test_privacy_guarantee.py) drives
dispatch against all of them; tests/unit/gateway/test_privacy_owner.py names
each path.
"""

import json
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, TypeVar

from tandem_sdk.detectors import Scan, detect
from tandem_sdk.tags import TagError, misplaced_privacy_key, privacy_tags, resembles

from serving.openai.errors import BadRequest

if TYPE_CHECKING:
    from gateway.policy.schema import Policy

H = TypeVar("H")


# The tag callers are told to mark a private request with (docs/api.md, the SDK's `private`): a policy that keeps
# requests on the device at all keeps these.
CANONICAL_TAG = "private"


class PrivacyViolation(RuntimeError):
    """A private request was about to leave for a backend that may not see it."""


# -- load time ---------------------------------------------------------------------------------------


def policy_problems(policy: "Policy") -> list[tuple[tuple[str | int, ...], str]]:
    """Where (a path into the policy file) and why the policy could let a private request reach a cloud pool."""
    never = set(policy.privacy.never_leave_device)
    problems = []
    if policy.privacy.detectors and policy.privacy.detected_tag not in never:
        problems.append((
            ("privacy", "detected_tag"),
            f"detected_tag {policy.privacy.detected_tag!r} is not in privacy.never_leave_device {sorted(never)}: "
            "requests in which a detector finds PII would be free to leave the device",
        ))  # fmt: skip
    if never and CANONICAL_TAG not in never:
        problems.append((
            ("privacy", "never_leave_device"),
            f"{sorted(never)} leaves out {CANONICAL_TAG!r}, the tag the SDK and the API "
            f"docs tell callers to mark private requests with: such requests would be free to leave the device; add "
            f"it (or write never_leave_device: [] to turn the privacy guarantee off in so many words)",
        ))  # fmt: skip
    problems += _lookalike_tags(policy, never)
    # Per model (the rules a model's requests can reach are those routing to a pool serving it). A model no edge
    # pool serves has nowhere to send a private request: the rules cannot help, and decide() refuses such a request.
    # Each model reads the rules for any model and those naming it, not every rule: a policy of 4,000 models and as
    # many rules took 9 s to load (a review), reading 16 million (model, rule) pairs.
    general = [i for i, rule in enumerate(policy.rules) if rule.match.model is None]
    naming: dict[str, list[int]] = {}
    for i, rule in enumerate(policy.rules):
        for name in rule.match.model or ():
            naming.setdefault(name, []).append(i)
    for model in policy.models or [None]:
        serving = policy.pools_serving(model) if model is not None else None
        if serving is not None and not any(policy.pools[p].kind == "edge" for p in serving):
            continue
        indices = sorted(general + naming.get(model, [])) if model is not None else range(len(policy.rules))
        problem = _first_leaking_rule(policy, never, model, serving, indices)
        if problem is not None and problem not in problems:
            problems.append(problem)
    return problems


def _lookalike_tags(policy: "Policy", never: set[str]) -> list[tuple[tuple[str | int, ...], str]]:
    """Tags the policy accepts that read like a never-leave tag (`privat`): a caller's typo of `private` would be
    accepted as that tag, and may go where it routes. Only tags of rules that name a cloud pool, and known_tags."""
    named = [(("privacy", "known_tags", i), tag) for i, tag in enumerate(policy.privacy.known_tags)]
    for i, rule in enumerate(policy.rules):
        if any(policy.pools[p].kind == "cloud" for p in (rule.route, *rule.fallback)):
            named += [(("rules", i, "match", "privacy", j), tag) for j, tag in enumerate(rule.match.privacy or ())]
    problems = []
    for loc, tag in named:
        meant = None if tag in never else resembles(tag, never)
        if meant is not None:
            problems.append((loc, f"tag {tag!r} reads like never-leave tag {meant!r}: a caller's typo of {meant!r} "
                                  f"would be read as {tag!r} and could leave the device; name it differently"))  # fmt: skip
    return problems


def _first_leaking_rule(
    policy: "Policy", never: set[str], model: str | None, serving: frozenset[str] | None, indices: Iterable[int]
):
    # A rule that matches on privacy alone catches every request with those tags: later rules no longer get them.
    reachable = set(never)
    for i in indices:
        rule = policy.rules[i]
        match = rule.match
        pools = [p for p in (rule.route, *rule.fallback) if serving is None or p in serving]
        if not pools or (model is not None and match.model is not None and model not in match.model):
            continue  # this model's requests never take this rule
        receives = reachable & set(match.privacy) if match.privacy is not None else set(reachable)
        # A rule on other tags gets the never-leave ones too: one request may carry both (`vip` from the caller,
        # `pii` from a detector), and the first rule that matches takes it.
        beside = set(reachable) if match.privacy is not None and not receives else set()
        cloud = [p for p in pools if policy.pools[p].kind == "cloud"]
        if (receives or beside) and cloud:
            for_model = f" for model {model!r}" if model is not None and len(policy.models) > 1 else ""
            tagged = (
                f"tagged {sorted(receives)}"
                if receives
                else f"tagged {sorted(match.privacy)} and {sorted(beside)} at once"
            )
            return (
                ("rules", i),
                f"rule {rule.name!r} could receive requests{for_model} {tagged} (privacy.never_leave_device) and "
                f"names cloud pool(s) {cloud}; send those tags to edge pools in an earlier rule "
                f"(e.g. match: {{privacy: {sorted(receives or beside)}}}, route: <edge pool>, fallback: [])",
            )
        if match.privacy is not None and match.model_dump(exclude_none=True).keys() <= {"privacy", "model"}:
            reachable -= set(match.privacy)
    return None


def detection_warning(policy: "Policy") -> str | None:
    """What to log when the policy turned content detection off (only ever by writing `detectors: []`), or the
    guarantee itself (`never_leave_device: []`)."""
    if not policy.privacy.never_leave_device:
        return (
            "privacy.never_leave_device is [] in the policy: the PRIVACY GUARANTEE IS OFF; no request is kept on "
            "the device, whatever its tags or content"
        )
    if policy.privacy.detectors:
        return None
    return (
        "privacy.detectors is [] in the policy: PII detection is OFF; only requests the caller tags "
        f"{sorted(policy.privacy.never_leave_device)} stay on the device"
    )


# -- classify ----------------------------------------------------------------------------------------


def request_tags(policy: "Policy", metadata_value: object, header_value: str | None) -> frozenset[str]:
    """Tags from `metadata.privacy` and X-Tandem-Privacy, read as the SDK reads them (tandem_sdk.tags). A tag the
    policy does not know is refused with a 400 naming where it came from: a misspelled `privat` would otherwise
    route as if the request carried no tag at all."""
    tags = frozenset()
    for value, where in ((metadata_value, "metadata.privacy"), (header_value, "X-Tandem-Privacy")):
        try:
            read = privacy_tags(value)
        except TagError as exc:
            raise BadRequest(f"{where}: {exc}", param=where) from exc
        unknown = sorted(read - policy.known_privacy_tags)
        if unknown:
            raise BadRequest(_unknown_tags_message(policy, where, unknown), code=UNKNOWN_TAG, param=where)
        tags |= read
    return tags


UNKNOWN_TAG = "unknown_privacy_tag"


# An escaped lower-case ASCII letter (`\u0079` for "y"): no JSON encoder writes one, and a key spelled with it
# (`"privac\u0079"`) is `privacy` to the parser while a byte count does not see it.
_ESCAPED_LETTER = re.compile(rb"\\u00(?:6[1-9a-fA-F]|7[0-9aA])")


def may_repeat_keys(raw: bytes) -> bool:
    """Whether the body may name `metadata` or `privacy` twice in one object: its bytes hold either twice (as a
    client's merging bug writes it), a name may hide behind an escaped letter, or the body is not UTF-8 (UTF-16 and
    UTF-32 JSON parse too). Only then is it parsed again (check_no_repeated_keys); a count and a scan in C else."""
    return (
        raw.count(b'"metadata"') > 1
        or raw.count(b'"privacy"') > 1
        or json.detect_encoding(raw[:4]) not in ("utf-8", "utf-8-sig")
        or _ESCAPED_LETTER.search(raw) is not None
    )


def check_no_repeated_keys(raw: bytes) -> None:
    """Refuse a body that names `metadata`, or `privacy`, twice in one object: JSON parsers keep the last, so
    `{"privacy": "pii", "privacy": ""}` would read as untagged."""
    json.loads(raw, object_pairs_hook=_refuse_repeats)


def _refuse_repeats(pairs: list[tuple[str, object]]) -> dict:
    names = [name for name, _ in pairs]
    for name in ("metadata", "privacy"):
        if names.count(name) > 1:
            raise BadRequest(
                f"the body names {name!r} twice in one object; JSON keeps only the last, which could read a tagged "
                "request as untagged: send it once",
                param="metadata" if name == "metadata" else "metadata.privacy",
            )
    return dict(pairs)


def metadata_privacy(policy: "Policy", body) -> object:
    """`metadata.privacy` of a request body. A key the caller meant for it (`Privacy`, `privcy`, `{"pii": "yes"}`,
    `{"local_only": true}`) is a 400 naming it: read as any other metadata, it would route the request as untagged.
    Then a value OpenAI refuses (no string, or over 512 characters) is a 400 naming its key."""
    metadata = body.metadata
    if not metadata:
        return None
    misplaced = misplaced_privacy_key(metadata, policy.known_privacy_tags, policy.privacy.never_leave_device)
    if misplaced is not None:
        raise BadRequest(
            f'metadata.{misplaced}: privacy tags go in metadata.privacy, e.g. {{"privacy": "pii"}}; the request '
            "was not routed",
            code=UNKNOWN_TAG,
            param=f"metadata.{misplaced}",
        )
    if (refused := body.metadata_value_refused()) is not None:
        raise BadRequest(f"metadata.{refused[0]}: {refused[1]}", param=f"metadata.{refused[0]}")
    return metadata.get("privacy")


def _unknown_tags_message(policy: "Policy", where: str, unknown: list[str]) -> str:
    known = policy.known_privacy_tags
    shown = [(tag if len(tag) <= 24 else f"{tag[:20]}…", resembles(tag, known)) for tag in unknown[:3]]
    listed = ", ".join(f"{tag!r} (did you mean {meant!r}?)" if meant else repr(tag) for tag, meant in shown)
    more = f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
    advice = (
        "Correct the tag"
        if any(meant for _, meant in shown)
        else "An operator can accept more tags in the policy's privacy.known_tags"
    )
    return (
        f"{where}: unknown privacy tag{'s' if len(unknown) > 1 else ''} {listed}{more}; this gateway's policy "
        f"knows {sorted(known)}. The request was not routed: a tag no rule names is refused rather than ignored. "
        f"{advice}"
    )


def detected(policy: "Policy", text: str | Scan) -> tuple[str, ...]:
    """The policy's detectors that fire on the text the request would send (tandem_sdk.scan.request_text)."""
    return tuple(detect(text, policy.privacy.detectors))


def tags_with_detection(policy: "Policy", tags: frozenset[str], fired: Sequence[str]) -> frozenset[str]:
    return tags | {policy.privacy.detected_tag} if fired else tags


# -- decide ------------------------------------------------------------------------------------------


def is_private(policy: "Policy", tags: Iterable[str]) -> bool:
    return bool(set(tags) & set(policy.privacy.never_leave_device))


def allowed_pools(policy: "Policy", pools: Sequence[str], private: bool) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(allowed, blocked): a private request keeps only edge pools, whatever the rule named."""
    allowed = tuple(p for p in pools if not private or policy.pools[p].kind == "edge")
    return allowed, tuple(p for p in pools if p not in allowed)


# -- rank, dispatch, failover ------------------------------------------------------------------------


def candidate_refusal(reported_kind: str | None, private: bool) -> str | None:
    """Why a backend may not be ranked for this request (it must report kind=edge itself), or None."""
    if private and reported_kind != "edge":
        return f"privacy: backend reports kind={reported_kind}"
    return None


def check_before_wire(private: bool, pool_kind: str, reported_kind: str | None, endpoint: str) -> None:
    """The backend client's last check: a private request goes only to an edge-pool backend that says it is edge."""
    if private and not (pool_kind == "edge" and reported_kind == "edge"):
        raise PrivacyViolation(
            f"refused to send a private request to {endpoint} ({pool_kind} pool, reports kind={reported_kind})"
        )


# -- hints and traces --------------------------------------------------------------------------------


def hints_for(private: bool, hints: H | None) -> H | None:
    """Prefix hints to use: none for a private prompt, which is never hashed into what other replicas read."""
    return None if private else hints


def may_trace_content(private: bool, trace_content: bool) -> bool:
    return trace_content and not private
