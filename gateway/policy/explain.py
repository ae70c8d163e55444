"""Why a request would go where it goes: the route plan (gateway.policy.route_plan) as JSON. Nothing is generated."""

from collections.abc import Mapping, Sequence
from dataclasses import asdict

from gateway.classify.features import RequestFeatures
from gateway.policy.route_plan import RoutePlan, plan_route
from gateway.policy.schema import Policy
from gateway.routing.candidate import Candidate


def features_dict(features: RequestFeatures) -> dict:
    out = asdict(features)
    out["privacy_tags"] = sorted(features.privacy_tags)
    out["detected"] = list(features.detected)
    out["tagged"] = sorted(features.tagged) if features.tagged is not None else None
    return out


def explain(
    policy: Policy,
    features: RequestFeatures,
    candidates: Mapping[str, Sequence[Candidate]],
    labels: Mapping[str, Mapping[str, str]] | None = None,
    addresses: bool = True,
) -> dict:
    """The plan as JSON; `labels` (pool -> endpoint -> label) adds each backend's `backend` label, and without
    `addresses` its label is all that names it (a caller's explain: backend addresses are the operators')."""
    return plan_as_dict(plan_route(policy, features, candidates), labels, addresses)


def plan_as_dict(
    plan: RoutePlan, labels: Mapping[str, Mapping[str, str]] | None = None, addresses: bool = True
) -> dict:
    def named(pool: str, endpoint: str) -> dict:
        out = {"backend": labels[pool][endpoint]} if labels is not None else {}
        return out | {"endpoint": endpoint} if addresses or labels is None else out

    out = {"features": features_dict(plan.features), "rules": [asdict(t) for t in plan.rules]}
    decision = plan.decision
    if decision is None:
        return out | {"decision": None, "candidates": [], "pick": None, "error": plan.error}
    out["decision"] = {
        "rule": decision.rule,
        "pools": list(decision.pools),
        "private": decision.is_private,
        "blocked_pools": list(decision.blocked_pools),
    }
    candidates = []
    for pool in plan.pools:
        rank = {c.endpoint: i for i, c in enumerate(pool.ranked, start=1)}
        for r in pool.reports:
            candidates.append({
                "pool": pool.pool,
                **named(pool.pool, r.candidate.endpoint),
                "kind": r.candidate.kind,
                "healthy": r.candidate.is_healthy,
                "filtered_out_by": r.filtered_out_by,
                "scores": r.scores,
                "score": r.score,
                "rank": rank.get(r.candidate.endpoint),
            })  # fmt: skip
    pick = plan.pick
    out |= {
        "candidates": candidates,
        "pick": {"pool": pick[0], **named(pick[0], pick[1].endpoint)} if pick else None,
        "plugin_us": {p.pool: {k: round(v * 1e6, 1) for k, v in p.plugin_seconds.items()} for p in plan.pools},
    }
    if pick is None:
        out["error"] = "no backend could serve this request now" + (
            " (private: only edge backends may)" if decision.is_private else ""
        )
    return out
