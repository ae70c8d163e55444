"""Policy decisions, table-driven. The privacy property test is in test_privacy_guarantee.py."""

from pathlib import Path

import pytest

from gateway.classify.features import DeviceCapability, RequestFeatures
from gateway.policy.decide import decide
from gateway.policy.loader import load_policy
from gateway.policy.schema import Policy
from serving.openai.errors import NoBackend
from tests.policies import unchecked_policy

DEFAULT = load_policy(Path(__file__).parents[4] / "policies" / "default.yaml")


def features(prompt_tokens=10, privacy=(), device=None, tenant="default", max_tokens=16):
    return RequestFeatures(prompt_tokens, max_tokens, frozenset(privacy), device, tenant)


NPU = DeviceCapability(npu=True, ram_gb=8)
EDGE_AND_CLOUD = {
    "edge": {"kind": "edge", "endpoints": ["grpc://h:1"], "plaintext_grpc": True},
    "cloud": {"kind": "cloud", "endpoints": ["grpc://h:2"]},
}


def two_pool_policy(*rules: dict) -> Policy:
    """Unvalidated: these rules would be refused at load; decide() must still keep private requests off the cloud."""
    return unchecked_policy({"version": 1, "pools": EDGE_AND_CLOUD, "rules": list(rules)})


CASES = [
    # (name, features, rule, pools)
    ("private tag goes to the edge only", features(privacy={"pii"}), "private", ("edge",)),
    ("header-style tag, other case handled upstream", features(privacy={"confidential"}), "private", ("edge",)),
    (
        "short prompt on an NPU device stays local",
        features(100, device=NPU),
        "short-on-capable-device",
        ("edge", "cloud"),
    ),
    ("long prompt on an NPU device goes to the cloud", features(513, device=NPU), "default", ("cloud", "edge")),
    ("boundary: exactly 512 tokens is short", features(512, device=NPU), "short-on-capable-device", ("edge", "cloud")),
    ("no device header: default rule", features(100), "default", ("cloud", "edge")),
    (
        "device without NPU: default rule",
        features(100, device=DeviceCapability(npu=False)),
        "default",
        ("cloud", "edge"),
    ),
    ("unrelated tag does not make a request private", features(privacy={"marketing"}), "default", ("cloud", "edge")),
]


@pytest.mark.parametrize("name, f, rule, pools", CASES, ids=[c[0] for c in CASES])
def test_default_policy(name, f, rule, pools):
    decision = decide(DEFAULT, f)
    assert (decision.rule, decision.pools) == (rule, pools)


def test_private_request_matching_a_cloud_rule_is_narrowed_to_edge_pools():
    policy = two_pool_policy({"name": "everything-to-cloud", "route": "cloud", "fallback": ["edge"]})
    decision = decide(policy, features(privacy={"private"}))
    assert decision.pools == ("edge",) and decision.blocked_pools == ("cloud",)


def test_no_matching_rule_is_a_503_that_says_so():
    policy = Policy.model_validate(
        {
            "version": 1,
            "pools": {"edge": {"kind": "edge", "endpoints": ["grpc://h:1"], "plaintext_grpc": True}},
            "rules": [{"name": "only-acme", "match": {"tenant": ["acme"]}, "route": "edge"}],
        }
    )
    with pytest.raises(NoBackend, match="no policy rule matched"):
        decide(policy, features())


def test_private_request_with_cloud_fallback_says_the_cloud_was_never_an_option():
    from gateway.dispatch import _no_backend_message

    policy = two_pool_policy({"name": "any", "route": "edge", "fallback": ["cloud"]})
    message = _no_backend_message(decide(policy, features(privacy={"pii"})), ["pool 'edge': no healthy backend left"])
    assert "only edge pools may serve it; cloud pool(s) ['cloud'] are never used for it" in message


def test_priority_ranges_match():
    policy = two_pool_policy(
        {"name": "urgent", "match": {"priority": {"min": 5}}, "route": "edge"},
        {"name": "rest", "route": "edge"},
    )
    urgent = RequestFeatures(10, 16, frozenset(), None, "t", priority=7)
    assert decide(policy, urgent).rule == "urgent"
    assert decide(policy, features()).rule == "rest"
