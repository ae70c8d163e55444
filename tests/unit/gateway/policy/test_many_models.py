"""Many models per gateway: the policy's `models` says which pools serve each; a request is routed among its model's
pools, then by the rules; the policy and the gateway's checkpoints must agree."""

import pytest
import yaml

from gateway.classify.features import RequestFeatures
from gateway.policy.decide import decide, trace_rules
from gateway.policy.loader import PolicyError, parse_policy
from gateway.state import check_models
from serving.openai.errors import NoBackend

POLICY = {
    "version": 1,
    "pools": {
        "edge": {"kind": "edge", "endpoints": ["grpc://h:1"], "plaintext_grpc": True},
        "cloud": {"kind": "cloud", "endpoints": ["grpc://h:2"]},
        "big": {"kind": "cloud", "endpoints": ["grpc://h:3"]},
    },
    "models": {"small": {"pools": ["edge", "cloud"]}, "large": {"pools": ["big"], "owned_by": "acme"}},
    "rules": [
        {"name": "private", "match": {"privacy": ["private", "pii", "confidential"]}, "route": "edge"},
        {"name": "default", "route": "cloud", "fallback": ["edge"]},
        {"name": "large", "match": {"model": ["large"]}, "route": "big"},
    ],
}


def policy(changes: dict | None = None, rules: list | None = None):
    raw = POLICY | (changes or {}) | ({"rules": rules} if rules is not None else {})
    return parse_policy(yaml.safe_dump(raw), "policy.yaml")


def features(model: str, privacy=()) -> RequestFeatures:
    return RequestFeatures(10, 16, frozenset(privacy), None, "default", model=model)


@pytest.mark.parametrize(
    ("model", "privacy", "rule", "pools"),
    [
        ("small", (), "default", ("cloud", "edge")),
        ("small", ("pii",), "private", ("edge",)),
        # rules whose pools all serve another model are passed over
        ("large", (), "large", ("big",)),
    ],
)
def test_a_request_goes_only_to_pools_serving_its_model(model, privacy, rule, pools):
    decision = decide(policy(), features(model, privacy))
    assert (decision.rule, decision.pools) == (rule, pools)


def test_a_private_request_for_a_model_no_edge_pool_serves_goes_nowhere():
    decision = decide(policy(), features("large", ("pii",)))
    assert decision.is_private and decision.pools == () and decision.blocked_pools == ("big",)


def test_the_rule_trace_says_why_a_rule_was_passed_over():
    traces = trace_rules(policy(), features("large"))
    assert [t.rule for t in traces] == ["private", "default", "large"]
    assert "serves 'large'" in traces[1].reasons[0] and traces[2].matched


def test_a_model_no_rule_routes_is_no_backend_naming_it():
    with pytest.raises(NoBackend, match="model 'large'"):
        decide(policy(rules=POLICY["rules"][:2]), features("large"))


def test_a_match_on_model_without_pools_for_it_never_matches():
    rules = [{"name": "only-large", "match": {"model": ["large"]}, "route": "cloud"}, *POLICY["rules"]]
    assert decide(policy(rules=rules), features("large")).rule == "large"


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"models": {"small": {"pools": ["edge", "cloud", "nowhere"]}, "large": {"pools": ["big"]}}}, "unknown pool"),
        ({"models": {"small": {"pools": ["edge", "cloud", "big"]}, "large": {"pools": ["big"]}}}, "a pool's workers"),
        ({"models": {"small": {"pools": ["edge", "cloud"]}}}, "serve no model"),
        ({"models": {"small": {"pools": []}, "large": {"pools": ["big"]}}}, "at least 1"),
        (
            {"pools": POLICY["pools"] | {"big": {"kind": "cloud", "endpoints": ["grpc://h:2"]}}},
            "serve different models",
        ),
    ],
)
def test_a_policy_whose_models_do_not_add_up_is_refused(changes, message):
    with pytest.raises(PolicyError, match=message):
        policy(changes)


def test_a_rule_matching_an_unknown_model_is_refused():
    with pytest.raises(PolicyError, match="unknown model"):
        policy(rules=[{"name": "x", "match": {"model": ["medium"]}, "route": "cloud"}])


def test_the_policy_must_name_exactly_the_models_the_gateway_has_checkpoints_for():
    check_models(policy(), ["small", "large"])
    with pytest.raises(ValueError, match="not the gateway's"):
        check_models(policy(), ["small"])  # a reload naming a model the gateway cannot tokenize for
    single = parse_policy(yaml.safe_dump({k: v for k, v in POLICY.items() if k != "models"} | {
        "rules": POLICY["rules"][:2]}), "p.yaml")  # fmt: skip
    check_models(single, ["small"])
    with pytest.raises(ValueError, match="which pools serve each"):
        check_models(single, ["small", "large"])


def test_the_load_time_privacy_check_follows_each_model_through_the_rules():
    # For "small", which an edge pool serves, a cloud rule before the private one would take its private requests.
    leaky = [{"name": "small-to-cloud", "match": {"model": ["small"]}, "route": "cloud"}, *POLICY["rules"]]
    with pytest.raises(PolicyError, match="small-to-cloud.*for model 'small'"):
        policy(rules=leaky)
    # "large" has no edge pool: its private requests are refused at run time whatever the rules say.
    first = [{"name": "large-first", "match": {"model": ["large"]}, "route": "big"}, *POLICY["rules"]]
    assert decide(policy(rules=first), features("large", ("pii",))).pools == ()


def test_a_match_on_model_in_a_policy_without_models_is_refused():
    """Else `match: {privacy: [...], model: [typo]}` would load as if it caught private requests, and the
    load-time check would pass a later cloud rule that receives them."""
    raw = {k: v for k, v in POLICY.items() if k != "models"}
    rules = [{"name": "priv", "match": {"privacy": ["private", "pii", "confidential"], "model": ["nonexistent"]},
              "route": "edge"}, {"name": "all", "route": "cloud"}]  # fmt: skip
    with pytest.raises(PolicyError, match="names no `models`"):
        parse_policy(yaml.safe_dump(raw | {"rules": rules}), "p.yaml")
