"""Policy decisions, table-driven, and the privacy invariant as a property."""

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.classify.features import DeviceCapability, RequestFeatures
from gateway.errors import NoBackend
from gateway.policy.decide import decide
from gateway.policy.loader import load_policy
from gateway.policy.schema import Policy

DEFAULT = load_policy(Path(__file__).parents[3] / "policies" / "default.yaml")


def features(prompt_tokens=10, privacy=(), device=None, tenant="default", max_tokens=16):
    return RequestFeatures(prompt_tokens, max_tokens, frozenset(privacy), device, tenant)


NPU = DeviceCapability(npu=True, ram_gb=8)
EDGE_AND_CLOUD = {
    "edge": {"kind": "edge", "endpoints": ["grpc://h:1"]},
    "cloud": {"kind": "cloud", "endpoints": ["grpc://h:2"]},
}


def two_pool_policy(*rules: dict) -> Policy:
    return Policy.model_validate({"version": 1, "pools": EDGE_AND_CLOUD, "rules": list(rules)})


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
            "pools": {"cloud": {"kind": "cloud", "endpoints": ["grpc://h:2"]}},
            "rules": [{"name": "only-acme", "match": {"tenant": ["acme"]}, "route": "cloud"}],
        }
    )
    with pytest.raises(NoBackend, match="no policy rule matched"):
        decide(policy, features())


TAGS = st.sampled_from(["private", "pii", "confidential", "public", "marketing"])
POOL_NAMES = ["p0", "p1", "p2", "p3"]


@st.composite
def policies(draw):
    kinds = {name: draw(st.sampled_from(["edge", "cloud"])) for name in POOL_NAMES}
    pools = {name: {"kind": kind, "endpoints": [f"grpc://h:{i + 1}"]} for i, (name, kind) in enumerate(kinds.items())}
    rules = []
    for i in range(draw(st.integers(1, 4))):
        match = {}
        if draw(st.booleans()):
            match["privacy"] = draw(st.lists(TAGS, min_size=1, max_size=3))
        if draw(st.booleans()):
            match["prompt_tokens"] = {"max": draw(st.integers(0, 4096))}
        rules.append(
            {
                "name": f"r{i}",
                "match": match,
                "route": draw(st.sampled_from(POOL_NAMES)),
                "fallback": draw(st.lists(st.sampled_from(POOL_NAMES), max_size=3)),
            }
        )
    rules.append({"name": "catch-all", "route": draw(st.sampled_from(POOL_NAMES))})
    never = draw(st.lists(TAGS, min_size=1, max_size=3))
    return Policy.model_validate(
        {"version": 1, "privacy": {"never_leave_device": never}, "pools": pools, "rules": rules}
    )


@settings(max_examples=500, deadline=None)
@given(policy=policies(), tags=st.frozensets(TAGS, max_size=3), prompt_tokens=st.integers(0, 5000))
def test_private_requests_never_get_a_cloud_pool(policy, tags, prompt_tokens):
    decision = decide(policy, features(prompt_tokens, privacy=tags))
    if tags & set(policy.privacy.never_leave_device):
        assert decision.is_private
        assert all(policy.pools[p].kind == "edge" for p in decision.pools)
    else:
        assert not decision.is_private


def test_private_request_with_cloud_fallback_says_the_cloud_was_never_an_option():
    from gateway.dispatch import _no_backend_message

    policy = two_pool_policy({"name": "any", "route": "edge", "fallback": ["cloud"]})
    message = _no_backend_message(decide(policy, features(privacy={"pii"})), ["pool 'edge': no healthy backend left"])
    assert "only edge pools may serve it; cloud pool(s) ['cloud'] are never used for it" in message
