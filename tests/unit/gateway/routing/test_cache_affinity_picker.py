"""`cache-affinity`, table-driven; and a cache-aware profile end to end on candidates."""

import pytest
from pydantic import ValidationError

from gateway.policy.schema import Profile
from gateway.routing.cache_affinity_picker import CacheAffinity
from gateway.routing.profile import run_profile
from tests.unit.gateway.routing.candidates import c, names

HOT = dict(prefix_recent_requests=50)  # this request's prefix is itself hot: it may be moved
AFFINITY_CASES = [
    # name, candidates with scores, expected order
    (
        "balanced: best score wins",
        [(c("a", recent_requests=12, **HOT), 0.9), (c("b", recent_requests=10, **HOT), 0.1)],
        ["a", "b"],
    ),
    (
        "a backend with far more than its share of recent requests moves behind the rest",
        [(c("a", recent_requests=40, **HOT), 0.9), (c("b", recent_requests=5, **HOT), 0.1), (c("c", **HOT), 0.0)],
        ["b", "c", "a"],
    ),
    (
        "above the mean but within the absolute threshold: stays first",
        [(c("a", recent_requests=6, **HOT), 0.9), (c("b", recent_requests=1, **HOT), 0.1)],
        ["a", "b"],
    ),
    (
        "far above in absolute terms but not relatively: stays first",
        [(c("a", recent_requests=60, **HOT), 0.9), (c("b", recent_requests=50, **HOT), 0.1)],
        ["a", "b"],
    ),
    (
        "a rare prefix cached on a busy backend stays there",
        [
            (c("a", recent_requests=40, prompt_blocks=4, prefix_match_blocks=4, prefix_recent_requests=2), 0.9),
            (c("b", recent_requests=5, prompt_blocks=4, prefix_recent_requests=2), 0.1),
        ],
        ["a", "b"],
    ),
    (
        "the hot prefix itself spills off its busy holder",
        [
            (c("a", recent_requests=40, prompt_blocks=4, prefix_match_blocks=4, prefix_recent_requests=35), 0.9),
            (c("b", recent_requests=5, prompt_blocks=4, prefix_recent_requests=35), 0.1),
        ],
        ["b", "a"],
    ),
]


@pytest.mark.parametrize(("name", "scored", "expected"), AFFINITY_CASES, ids=[x[0] for x in AFFINITY_CASES])
def test_cache_affinity_picker(name, scored, expected):
    pick = CacheAffinity(abs_threshold=4, rel_threshold=1.5).fn
    assert names(pick(scored, 0)) == expected


def test_a_cache_aware_profile_follows_the_prefix_until_the_holder_runs_hot():
    profile = Profile.model_validate(
        {
            "scorers": [{"type": "prefix-hit", "weight": 3}, {"type": "queue-depth", "weight": 1}],
            "picker": {"type": "cache-affinity", "abs_threshold": 4, "rel_threshold": 1.5},
        }
    )
    hot_prefix = dict(prompt_blocks=8, prefix_recent_requests=30)
    holder = c("holder", prefix_match_blocks=8, queue_depth=2, recent_requests=10, **hot_prefix)
    others = [c(f"w{i}", queue_depth=1, recent_requests=8, **hot_prefix) for i in range(3)]
    assert names(run_profile(profile, [*others, holder], False).ranked)[0] == "holder"
    busy = c("holder", prefix_match_blocks=8, queue_depth=2, recent_requests=40, **hot_prefix)
    assert names(run_profile(profile, [*others, busy], False).ranked)[-1] == "holder"


@pytest.mark.parametrize(
    ("picker", "message"),
    [
        ({"type": "max-score", "abs_threshold": 3}, "abs_threshold"),
        ({"type": "cache-affinity", "rel_threshold": 0.5}, "rel_threshold"),
        ({"type": "cache-affinity", "abs_threshold": -1}, "abs_threshold"),
        ({"type": "nearest"}, "unknown picker"),
    ],
)
def test_bad_picker_config_fails_when_the_policy_loads(picker, message):
    with pytest.raises(ValidationError, match=message):
        Profile.model_validate({"picker": picker})
