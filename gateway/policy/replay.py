"""Replay recorded decisions (the gateway's decision log) against a policy, and compare two.

Replay re-runs the policy's decision on each recorded request's features. It
does not know which backends were healthy then: the pool reported is the
first one the policy allows, and "none" means the policy itself leaves no
pool (a 503 whatever the backends do). A request carrying a tag the policy
does not know would be refused (a 400, gateway.privacy.request_tags): its
pool is "refused", and the report counts each such tag.

Each request is tagged again as the replayed policy would tag it: the caller's own tags (`tagged`), and the
policy's `detected_tag` where one of its detectors is among those that fired (`detected`). Reusing the tags the
recording policy gave (its detection already in them) said `edge` for an e-mail under a policy without the e-mail
detector, which sends it to the cloud (a review). What a detector the recording policy did not run would have found
is not known; records of an older gateway, without `tagged`, keep the tags it gave, and the report counts them.
"""

import dataclasses
import json
import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tandem_sdk.tags import privacy_tags

from gateway.classify.features import RequestFeatures, parse_device_header
from gateway.policy.route_plan import plan_route
from gateway.policy.schema import Policy
from gateway.privacy import tags_with_detection
from serving.openai.errors import BadRequest

NO_POOL = "none"
REFUSED = "refused"


class TraceError(ValueError):
    """The trace file has a line that is not a decision record; the message says which."""


@dataclass(frozen=True)
class Outcome:
    rule: str | None
    pool: str
    private_blocked: bool
    unknown_tags: tuple[str, ...] = ()


@dataclass
class ReplayReport:
    total: int = 0
    by_rule: Counter = field(default_factory=Counter)
    by_pool: Counter = field(default_factory=Counter)
    privacy_blocked: int = 0
    unknown_tags: Counter = field(default_factory=Counter)
    tagged_as_recorded: int = 0  # older records: their tags as the recording policy's detection left them

    def add(self, outcome: Outcome) -> None:
        self.total += 1
        self.by_rule[outcome.rule or "(no rule matched)"] += 1
        self.by_pool[outcome.pool] += 1
        self.privacy_blocked += outcome.private_blocked
        self.unknown_tags.update(outcome.unknown_tags)

    def as_dict(self) -> dict:
        share = lambda c: {k: round(v / self.total, 4) for k, v in c.most_common()} if self.total else {}  # noqa: E731
        return {"requests": self.total, "rule_share": share(self.by_rule), "pool_share": share(self.by_pool),
                "privacy_blocked": self.privacy_blocked, "unknown_privacy_tags": dict(self.unknown_tags.most_common()),
                **({"tagged_as_recorded": self.tagged_as_recorded} if self.tagged_as_recorded else {})}  # fmt: skip


@dataclass
class Trace:
    """A decision log's requests; `torn`: the records left out, cut short (a crash or a full disk mid-write)."""

    features: list[RequestFeatures]
    torn: int = 0


def _cut_short(line: bytes, exc: Exception) -> bool:
    """Whether `line` is a record cut short: JSON that ends where it had more to say (or mid-character), or the
    run of NUL bytes a crash can leave where a file's end was allocated and not written."""
    whole = line.rstrip()
    if whole and not whole.strip(b"\0"):
        return True
    if isinstance(exc, UnicodeDecodeError):
        return exc.start >= len(whole) - 3 and whole.startswith(b"{")
    if not (isinstance(exc, json.JSONDecodeError) and whole.startswith(b"{")) or exc.msg.startswith("Extra data"):
        return False  # (a whole record with more after it is no record cut short: named, as a line that is none)
    # Cut inside a string or a number, the error is where it starts (a review: 244 of 327 cuts of one record refused
    # the whole log): a record that does not end its object was cut, wherever JSON says it broke
    return exc.pos >= len(exc.doc.rstrip()) or not whole.endswith(b"}")


def _count(raw: dict, key: str, default: int | None = None, least: int | None = 0) -> int:
    value = raw.get(key, default) if default is not None else raw[key]
    if isinstance(value, bool) or not isinstance(value, int) or (least is not None and value < least):
        shown = json.dumps(value)[:40]
        raise TypeError(f"{key} is a whole number{f' from {least}' if least is not None else ''}, not {shown}")
    return value


def _strings(raw: dict, key: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{key} is a list of names, not {json.dumps(value)[:40]}")
    return tuple(value)


def _text(raw: dict, key: str, default: str) -> str:
    value = raw.get(key, default)
    if not isinstance(value, str):
        raise TypeError(f"{key} is text, not {json.dumps(value)[:40]}")
    return value


def _features(raw: dict) -> RequestFeatures:
    device = raw.get("device")
    if device is not None and not isinstance(device, dict):
        raise TypeError("device is an object or null")
    try:
        capability = parse_device_header(json.dumps(device)) if device else None  # as the gateway reads the header
    except BadRequest as exc:
        raise ValueError(exc.message.replace("X-Tandem-Device", "device")) from None
    tagged = raw.get("tagged")
    return RequestFeatures(
        prompt_tokens=_count(raw, "prompt_tokens"),
        max_tokens=_count(raw, "max_tokens"),
        privacy_tags=privacy_tags(raw.get("privacy_tags", [])),  # an older gateway's, read as now
        device=capability,
        tenant=_text(raw, "tenant", "default"),
        priority=_count(raw, "priority", 0, least=None),
        detected=_strings(raw, "detected"),
        model=_text(raw, "model", ""),
        tagged=privacy_tags(tagged) if tagged is not None else None,
    )


def read_trace(path: Path) -> Trace:
    """The decision records in the log at `path`; TraceError naming the line of one that is none. A record cut short
    is left out and counted (`torn`): a gateway that crashed mid-write, then wrote its next record after it, made the
    whole log unusable (a review; the gateway now ends such a line as it starts)."""
    features, torn = [], 0
    # Not blocking in open() (a FIFO waited for a writer for ever; a review), and only a regular file is read
    with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise TraceError(f"{path}: not a regular file; a trace is the gateway's decision log (JSON lines)")
        for number, raw_line in enumerate(f, start=1):
            if not raw_line.strip():
                continue
            try:
                record = json.loads(raw_line.decode("utf-8"))  # a line that is not UTF-8 is named, as a bad one is
                if not isinstance(record, dict) or not isinstance(record.get("features", {}), dict):
                    raise TypeError("a record is a JSON object with a `features` object")
                if record.get("kind") == "usage":  # what a request used, written when it ended: not a decision
                    continue
                features.append(_features(record["features"]))
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError, OverflowError) as exc:
                if _cut_short(raw_line, exc):
                    torn += 1
                    continue
                said = str(exc)[:200]
                raise TraceError(f"{path}:{number}: not a decision record ({exc.__class__.__name__}: {said})") from exc
    return Trace(features, torn)


def tagged_now(policy: Policy, features: RequestFeatures) -> RequestFeatures:
    """`features` tagged as `policy` tags a request: the caller's tags, and its `detected_tag` where one of its
    detectors fired (of those the recording policy ran). An older record, without the caller's tags, as it is."""
    if features.tagged is None:
        return features
    fired = [name for name in features.detected if name in policy.privacy.detectors]
    return dataclasses.replace(features, privacy_tags=tags_with_detection(policy, features.tagged, fired))


def outcome(policy: Policy, features: RequestFeatures) -> Outcome:
    features = tagged_now(policy, features)
    unknown = tuple(sorted(features.privacy_tags - policy.known_privacy_tags))
    if unknown:
        return Outcome(None, REFUSED, False, unknown)
    decision = plan_route(policy, features, {}).decision  # no candidates: which backends were up is not recorded
    if decision is None:
        return Outcome(None, NO_POOL, False)
    blocked = decision.is_private and bool(decision.blocked_pools)
    return Outcome(decision.rule, decision.pools[0] if decision.pools else NO_POOL, blocked)


def replay(policy: Policy, trace: list[RequestFeatures]) -> tuple[ReplayReport, list[Outcome]]:
    report, outcomes = ReplayReport(), [outcome(policy, f) for f in trace]
    for o in outcomes:
        report.add(o)
    report.tagged_as_recorded = sum(f.tagged is None and bool(f.detected) for f in trace)
    return report, outcomes


def differences(a: list[Outcome], b: list[Outcome]) -> dict:
    moved = Counter((x.pool, y.pool) for x, y in zip(a, b, strict=True) if x.pool != y.pool)
    rule_changed = sum(x.rule != y.rule for x, y in zip(a, b, strict=True))
    return {
        "requests_changing_pool": sum(moved.values()),
        "requests_changing_rule": rule_changed,
        "pool_moves": [{"from": f, "to": t, "requests": n} for (f, t), n in moved.most_common()],
    }
