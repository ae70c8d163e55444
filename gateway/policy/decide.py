"""Match a request's features against the policy: first matching rule wins.

The privacy invariant is enforced here, after the rules, so no rule and no
fallback can send a private request to a cloud pool.
"""

from dataclasses import dataclass

from gateway.classify.features import RequestFeatures
from gateway.errors import NoBackend
from gateway.policy.schema import DeviceMatch, Match, Policy


@dataclass(frozen=True)
class Decision:
    rule: str
    pools: tuple[str, ...]  # the route, then its fallbacks, all allowed for this request
    is_private: bool
    blocked_pools: tuple[str, ...] = ()  # removed by the privacy invariant


def is_private(policy: Policy, features: RequestFeatures) -> bool:
    return bool(features.privacy_tags & set(policy.privacy.never_leave_device))


def decide(policy: Policy, features: RequestFeatures) -> Decision:
    rule = next((r for r in policy.rules if matches(r.match, features)), None)
    if rule is None:
        raise NoBackend("no policy rule matched this request (add a catch-all rule without `match`)")
    candidates = (rule.route, *rule.fallback)
    private = is_private(policy, features)
    allowed = tuple(p for p in candidates if not private or policy.pools[p].kind == "edge")
    blocked = tuple(p for p in candidates if p not in allowed)
    return Decision(rule.name, allowed, private, blocked)


def matches(match: Match, f: RequestFeatures) -> bool:
    return (
        (match.privacy is None or bool(f.privacy_tags & set(match.privacy)))
        and (match.prompt_tokens is None or match.prompt_tokens.contains(f.prompt_tokens))
        and (match.max_tokens is None or match.max_tokens.contains(f.max_tokens))
        and (match.tenant is None or f.tenant in match.tenant)
        and (match.device is None or _device_matches(match.device, f))
    )


def _device_matches(want: DeviceMatch, f: RequestFeatures) -> bool:
    d = f.device
    if d is None:
        return False  # a rule about the device never matches a caller that did not describe one
    return (
        (want.npu is None or d.npu == want.npu)
        and (want.min_ram_gb is None or (d.ram_gb is not None and d.ram_gb >= want.min_ram_gb))
        and (want.min_battery is None or (d.battery is not None and d.battery >= want.min_battery))
        and (want.network is None or d.network in want.network)
    )
