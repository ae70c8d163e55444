"""Where a request goes, and why: the one routing pipeline.

`plan_route(policy, features, candidates per pool)` is pure: the rules give a
rule and the pools it allows (gateway.policy.decide, with the privacy
invariant), and each allowed pool's profile filters, scores and orders its
candidates (gateway.routing.profile). The plan holds every step: the rules
tried, the decision, each candidate's filter result and scores, the pick,
and the time each plugin took. Dispatch gathers the candidates (the only
I/O: backend snapshots and one prefix-hint lookup), plans, then tries the
backends in the plan's order; explain, replay and `tandem policy explain`
print the same plan.
"""

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from opentelemetry import trace

from gateway.classify.features import RequestFeatures
from gateway.policy.decide import Decision, RuleTrace, decide, trace_rules
from gateway.policy.schema import Policy
from gateway.routing.candidate import Candidate
from gateway.routing.profile import CandidateReport, PoolRanking, run_profile
from serving import spans
from serving.openai.errors import NoBackend

tracer = spans.get_tracer(__name__)  # the SDK's spans at a fraction of their cost (serving/spans.py)
_SPAN_CANDIDATES = 8  # endpoints named on the span, best first: 256 would make every span large


@dataclass(frozen=True)
class PoolPlan:
    pool: str
    ranking: PoolRanking

    @property
    def ranked(self) -> list[Candidate]:
        """Best first; empty when no backend of the pool may serve now."""
        return self.ranking.ranked

    @property
    def reports(self) -> list[CandidateReport]:
        """Every candidate: the filter that dropped it, or its scores (built when asked: explain, replay)."""
        return self.ranking.reports

    @property
    def plugin_seconds(self) -> dict[str, float]:
        return self.ranking.plugin_seconds


@dataclass(frozen=True)
class RoutePlan:
    features: RequestFeatures
    rules: tuple[RuleTrace, ...]
    decision: Decision | None  # None: no rule matched (`error` says so)
    pools: tuple[PoolPlan, ...] = ()  # the allowed pools, in the order they are tried
    error: str | None = None

    @property
    def pick(self) -> tuple[str, Candidate] | None:
        """The backend that would answer now: the best of the first pool with one."""
        return next(((p.pool, p.ranked[0]) for p in self.pools if p.ranked), None)


def plan_route(
    policy: Policy,
    features: RequestFeatures,
    candidates: Mapping[str, Sequence[Candidate]],
    turn: int = 0,
    decision: Decision | None = None,
    hinted: Collection[str] = (),
) -> RoutePlan:
    """The route plan. A pool missing from `candidates` has none; `turn` rotates ties; `decision` is the
    caller's own `decide(policy, features)` when it already made it to know which pools to gather; `hinted` names
    the pools whose candidates this prompt's prefix hints were looked up for (the span then says what the pick
    holds, 0 included)."""
    with spans.Stages.stage(tracer, "gateway.route_plan") as span:
        if decision is None:
            try:
                decision = decide(policy, features)
            except NoBackend as exc:
                span.set_attribute("tandem.outcome", "no_rule")
                return RoutePlan(features, tuple(trace_rules(policy, features)), None, error=exc.message)
        pools = []
        for name in decision.pools:
            ranking = run_profile(policy.pools[name].profile, list(candidates.get(name, ())), decision.is_private, turn)
            pools.append(PoolPlan(name, ranking))
        plan = RoutePlan(features, decision.rules, decision, tuple(pools))
        _describe(span, plan, hinted)
        return plan


def _describe(span: trace.Span, plan: RoutePlan, hinted: Collection[str]) -> None:
    if not span.is_recording():
        return
    decision = plan.decision
    span.set_attribute("tandem.rule", decision.rule)
    span.set_attribute("tandem.private", decision.is_private)
    span.set_attribute("tandem.pools", list(decision.pools))
    pick = plan.pick
    if pick is None:
        span.set_attribute("tandem.outcome", "no_backend")
        return
    pool, best = pick
    span.set_attribute("tandem.pool", pool)
    span.set_attribute("tandem.backend", best.endpoint)
    first = next(p for p in plan.pools if p.pool == pool)
    span.set_attribute("tandem.candidates", [c.endpoint for c in first.ranked[:_SPAN_CANDIDATES]])
    if pool in hinted:
        span.set_attribute("tandem.predicted_prefix_blocks", best.prefix_match_blocks)
    for label, seconds in first.plugin_seconds.items():
        span.set_attribute(f"tandem.plugin_us.{label}", round(seconds * 1e6, 1))
