"""Why a request would go where it goes: features, rules tried, candidates, pick. Nothing is generated."""

from collections.abc import Callable
from dataclasses import asdict

from gateway.classify.features import RequestFeatures
from gateway.errors import NoBackend
from gateway.policy.decide import decide, trace_rules
from gateway.policy.schema import Policy
from gateway.routing.candidate import Candidate
from gateway.routing.profile import evaluate_pool


def features_dict(features: RequestFeatures) -> dict:
    out = asdict(features)
    out["privacy_tags"] = sorted(features.privacy_tags)
    out["detected"] = list(features.detected)
    return out


def explain(policy: Policy, features: RequestFeatures, candidates_for: Callable[[str], list[Candidate]]) -> dict:
    out = {
        "features": features_dict(features),
        "rules": [asdict(t) for t in trace_rules(policy, features)],
    }
    try:
        decision = decide(policy, features)
    except NoBackend as exc:
        return out | {"decision": None, "candidates": [], "pick": None, "error": exc.message}
    out["decision"] = {
        "rule": decision.rule,
        "pools": list(decision.pools),
        "private": decision.is_private,
        "blocked_pools": list(decision.blocked_pools),
    }
    candidates, pick = [], None
    for pool in decision.pools:
        ranked, reports = evaluate_pool(policy.pools[pool].profile, candidates_for(pool), decision.is_private)
        order = [c.endpoint for c in ranked]
        for r in reports:
            candidates.append({
                "pool": pool,
                "endpoint": r.candidate.endpoint,
                "kind": r.candidate.kind,
                "healthy": r.candidate.is_healthy,
                "filtered_out_by": r.filtered_out_by,
                "scores": r.scores,
                "score": r.score,
                "rank": order.index(r.candidate.endpoint) + 1 if r.candidate.endpoint in order else None,
            })  # fmt: skip
        if pick is None and ranked:
            pick = {"pool": pool, "endpoint": ranked[0].endpoint}
    out |= {"candidates": candidates, "pick": pick}
    if pick is None:
        out["error"] = "no backend could serve this request now" + (
            " (private: only edge backends may)" if decision.is_private else ""
        )
    return out
