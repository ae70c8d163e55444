"""Match a request's features against the policy: the first rule that matches and routes to a pool serving the
request's model wins (a rule whose pools all serve other models is passed over).

The privacy invariant is applied here too, after the rules (gateway.privacy
decides), so no rule and no fallback can send a private request to a cloud
pool; the load-time check refuses such policies, this is the second line.
"""

from dataclasses import dataclass

from gateway import privacy
from gateway.classify.features import RequestFeatures
from gateway.policy.schema import DeviceMatch, IntRange, Match, Policy, Rule
from serving.openai.errors import NoBackend


@dataclass(frozen=True)
class RuleTrace:
    rule: str
    matched: bool
    reasons: tuple[str, ...]  # why not, when it did not match


@dataclass(frozen=True)
class Decision:
    rule: str
    pools: tuple[str, ...]  # the route, then its fallbacks, all allowed for this request
    is_private: bool
    blocked_pools: tuple[str, ...] = ()  # removed by the privacy invariant
    rules: tuple[RuleTrace, ...] = ()  # every rule tried, in order, up to and including this one


def trace_rules(policy: Policy, features: RequestFeatures) -> list[RuleTrace]:
    """Every rule tried, in order, up to and including the first that matches."""
    traces = []
    for rule in policy.rules:
        reasons = _why_not(policy, rule, features)
        traces.append(RuleTrace(rule.name, not reasons, tuple(reasons)))
        if not reasons:
            break
    return traces


def decide(policy: Policy, features: RequestFeatures) -> Decision:
    """The first matching rule and the pools it allows; NoBackend when no rule matches."""
    traces = trace_rules(policy, features)
    if not traces or not traces[-1].matched:
        if policy.models and features.model not in policy.models:
            known = ", ".join(sorted(policy.models))
            raise NoBackend(f"no pool serves model {features.model!r}: the policy's `models` are {known}")
        if policy.models:  # a rule matches only where one of its pools serves the request's model
            raise NoBackend(
                f"no policy rule matched this request for model {features.model!r} (no rule routes to a pool that "
                "serves it: the policy's `models` says which pools serve each model)"
            )
        raise NoBackend("no policy rule matched this request (add a catch-all rule without `match`)")
    rule = policy.rules[len(traces) - 1]
    private = privacy.is_private(policy, features.privacy_tags)
    allowed, blocked = privacy.allowed_pools(policy, _model_pools(policy, rule, features.model), private)
    return Decision(rule.name, allowed, private, blocked, tuple(traces))


def _model_pools(policy: Policy, rule: Rule, model: str) -> tuple[str, ...]:
    """The rule's route and fallbacks that serve the model."""
    serving = policy.pools_serving(model)
    return tuple(p for p in (rule.route, *rule.fallback) if serving is None or p in serving)


def _why_not(policy: Policy, rule: Rule, features: RequestFeatures) -> list[str]:
    reasons = mismatches(rule.match, features)
    if not reasons and not _model_pools(policy, rule, features.model):
        reasons.append(f"model: none of its pools {[rule.route, *rule.fallback]} serves {features.model!r}")
    return reasons


def mismatches(match: Match, f: RequestFeatures) -> list[str]:
    """Why `match` does not hold for these features; empty when it does."""
    reasons = []
    if match.privacy is not None and not f.privacy_tags & set(match.privacy):
        reasons.append(f"privacy: none of {sorted(match.privacy)} in {sorted(f.privacy_tags) or '[]'}")
    reasons += _range("prompt_tokens", match.prompt_tokens, f.prompt_tokens)
    reasons += _range("max_tokens", match.max_tokens, f.max_tokens)
    reasons += _range("priority", match.priority, f.priority)
    if match.model is not None and f.model not in match.model:
        reasons.append(f"model: {f.model!r} not in {match.model}")
    if match.tenant is not None and f.tenant not in match.tenant:
        reasons.append(f"tenant: {f.tenant!r} not in {match.tenant}")
    if match.device is not None:
        reasons += _device_mismatches(match.device, f)
    return reasons


def _range(name: str, bounds: IntRange | None, value: int) -> list[str]:
    if bounds is None:
        return []
    if bounds.min is not None and value < bounds.min:
        return [f"{name}: {value} < min {bounds.min}"]
    if bounds.max is not None and value > bounds.max:
        return [f"{name}: {value} > max {bounds.max}"]
    return []


def _device_mismatches(want: DeviceMatch, f: RequestFeatures) -> list[str]:
    d = f.device
    if d is None:
        return ["device: the caller sent no X-Tandem-Device"]
    reasons = []
    if want.npu is not None and d.npu != want.npu:
        reasons.append(f"device.npu: {d.npu} != {want.npu}")
    if want.min_ram_gb is not None and (d.ram_gb is None or d.ram_gb < want.min_ram_gb):
        reasons.append(f"device.ram_gb: {d.ram_gb} < {want.min_ram_gb}")
    if want.min_battery is not None and (d.battery is None or d.battery < want.min_battery):
        reasons.append(f"device.battery: {d.battery} < {want.min_battery}")
    if want.network is not None and d.network not in want.network:
        reasons.append(f"device.network: {d.network!r} not in {want.network}")
    return reasons
