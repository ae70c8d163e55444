"""Replay recorded decisions (the gateway's decision log) against a policy, and compare two.

Replay re-runs the policy's decision on each recorded request's features. It
does not know which backends were healthy then: the pool reported is the
first one the policy allows, and "none" means the policy itself leaves no
pool (a 503 whatever the backends do). A request carrying a tag the policy
does not know would be refused (a 400, gateway.privacy.request_tags): its
pool is "refused", and the report counts each such tag.
"""

import json
import os
import stat
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tandem_sdk.tags import privacy_tags

from gateway.classify.features import DeviceCapability, RequestFeatures
from gateway.policy.route_plan import plan_route
from gateway.policy.schema import Policy

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

    def add(self, outcome: Outcome) -> None:
        self.total += 1
        self.by_rule[outcome.rule or "(no rule matched)"] += 1
        self.by_pool[outcome.pool] += 1
        self.privacy_blocked += outcome.private_blocked
        self.unknown_tags.update(outcome.unknown_tags)

    def as_dict(self) -> dict:
        share = lambda c: {k: round(v / self.total, 4) for k, v in c.most_common()} if self.total else {}  # noqa: E731
        return {"requests": self.total, "rule_share": share(self.by_rule), "pool_share": share(self.by_pool),
                "privacy_blocked": self.privacy_blocked, "unknown_privacy_tags": dict(self.unknown_tags.most_common())}  # fmt: skip


def read_trace(path: Path) -> list[RequestFeatures]:
    features = []
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
                raw = record["features"]
                device = raw.get("device")
                features.append(
                    RequestFeatures(
                        prompt_tokens=int(raw["prompt_tokens"]),
                        max_tokens=int(raw["max_tokens"]),
                        privacy_tags=privacy_tags(raw.get("privacy_tags", [])),  # an older gateway's, read as now
                        device=DeviceCapability(**device) if device else None,
                        tenant=raw.get("tenant", "default"),
                        priority=int(raw.get("priority", 0)),
                        detected=tuple(raw.get("detected", [])),
                        model=str(raw.get("model", "")),
                    )
                )
            except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
                raise TraceError(f"{path}:{number}: not a decision record ({exc.__class__.__name__}: {exc})") from exc
    return features


def outcome(policy: Policy, features: RequestFeatures) -> Outcome:
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
    return report, outcomes


def differences(a: list[Outcome], b: list[Outcome]) -> dict:
    moved = Counter((x.pool, y.pool) for x, y in zip(a, b, strict=True) if x.pool != y.pool)
    rule_changed = sum(x.rule != y.rule for x, y in zip(a, b, strict=True))
    return {
        "requests_changing_pool": sum(moved.values()),
        "requests_changing_rule": rule_changed,
        "pool_moves": [{"from": f, "to": t, "requests": n} for (f, t), n in moved.most_common()],
    }
