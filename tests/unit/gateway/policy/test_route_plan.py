"""The one routing pipeline: rules, privacy, each pool's profile and the pick, in one pure plan."""

from pathlib import Path

from gateway.classify.classify import classify
from gateway.policy.explain import plan_as_dict
from gateway.policy.loader import load_policy
from gateway.policy.replay import outcome
from gateway.policy.route_plan import plan_route
from tests.unit.gateway.routing.candidates import c, names

DEFAULT = load_policy(Path(__file__).parents[4] / "policies" / "default.yaml")


def features(**kwargs):
    return classify(DEFAULT, **{"text": "hi", "prompt_tokens": 10, "max_tokens": 16, **kwargs})


def test_the_plan_holds_every_step():
    cands = {"edge": [c("e1", kind="edge")], "cloud": [c("busy", queue_depth=3), c("idle"), c("down", healthy=False)]}
    plan = plan_route(DEFAULT, features(prompt_tokens=900), cands)
    assert [t.rule for t in plan.rules][-1] == plan.decision.rule == "default"
    assert [p.pool for p in plan.pools] == ["cloud", "edge"]
    cloud = plan.pools[0]
    assert names(cloud.ranked) == ["idle", "busy"]
    by_host = {names([r.candidate])[0]: r for r in cloud.reports}
    assert by_host["down"].filtered_out_by == "healthy"
    assert by_host["idle"].scores == {"prefix-hit": 0.0, "queue-depth": 1.0}
    assert by_host["busy"].scores == {"prefix-hit": 0.0, "queue-depth": 0.25}
    assert by_host["busy"].score == 0.0625  # weights 3 and 1
    assert plan.pick[0] == "cloud" and names([plan.pick[1]]) == ["idle"]
    assert set(cloud.plugin_seconds) == {"filter:healthy", "prefix-hit", "queue-depth", "picker:cache-affinity"}


def test_the_first_pool_with_a_backend_is_picked():
    cands = {"cloud": [c("down", healthy=False)], "edge": [c("e", kind="edge")]}
    plan = plan_route(DEFAULT, features(prompt_tokens=900), cands)
    assert plan.pick[0] == "edge"


def test_a_pool_without_candidates_ranks_nothing():
    plan = plan_route(DEFAULT, features(prompt_tokens=900), {})
    assert plan.decision.rule == "default" and all(not p.ranked for p in plan.pools) and plan.pick is None


def test_a_private_request_never_plans_a_cloud_backend():
    cands = {"edge": [c("says-cloud")], "cloud": [c("cloud")]}  # an edge-pool backend that reports kind=cloud
    plan = plan_route(DEFAULT, features(text="mail ann@example.com"), cands)
    assert plan.decision.is_private and [p.pool for p in plan.pools] == ["edge"]
    assert plan.pick is None
    assert plan.pools[0].reports[0].filtered_out_by.startswith("privacy")


def test_explain_and_replay_read_the_same_plan():
    f = features(prompt_tokens=900)
    cands = {"cloud": [c("a")], "edge": [c("e", kind="edge")]}
    explained = plan_as_dict(plan_route(DEFAULT, f, cands))
    assert explained["decision"]["rule"] == outcome(DEFAULT, f).rule == "default"
    assert explained["decision"]["pools"][0] == outcome(DEFAULT, f).pool == "cloud"
    assert explained["pick"] == {"pool": "cloud", "endpoint": "grpc://a:1"}
    assert set(explained["plugin_us"]) == {"cloud", "edge"}
