"""The profile runner: filters, weighted scorers clamped to [0, 1], the picker; privacy; per-plugin time."""

import math
from types import SimpleNamespace

import pytest
from pydantic import ValidationError

from gateway.policy.schema import Profile
from gateway.routing import plugin
from gateway.routing.max_score_picker import max_score_picker
from gateway.routing.profile import CompiledProfile, clamp, run_profile
from gateway.routing.queue_depth_scorer import queue_depth_scorer
from tests.unit.gateway.routing.candidates import c, names

CASES = [
    ("unhealthy backends are filtered out", [c("a", healthy=False), c("b")], 0, ["b"]),
    ("all unhealthy: nothing", [c("a", healthy=False)], 0, []),
    ("least loaded first", [c("a", queue_depth=3), c("b", inflight=1), c("c")], 0, ["c", "b", "a"]),
    ("ties rotate with the turn (turn 1)", [c("a"), c("b"), c("c")], 1, ["b", "c", "a"]),
]


@pytest.mark.parametrize(("name", "candidates", "turn", "expected"), CASES, ids=[x[0] for x in CASES])
def test_default_profile_ranks(name, candidates, turn, expected):
    assert names(run_profile(Profile(), candidates, False, turn).ranked) == expected


@pytest.mark.parametrize(("raw", "clamped"), [(0.5, 0.5), (1.5, 1.0), (-2.0, 0.0), (math.nan, 0.0), (math.inf, 1.0)])
def test_clamp(raw, clamped):
    assert clamp(raw) == clamped


def test_a_scorer_out_of_range_cannot_outweigh_the_others():
    """A scorer answering 50 (or NaN) for a backend counts as 1 (or 0), so the other scorer's weight still decides."""
    wild = {"grpc://a:1": 50.0, "grpc://b:1": 1.0, "grpc://n:1": math.nan}
    steps = CompiledProfile(
        filters=(),
        scorers=(("wild", 0.25, lambda x: wild[x.endpoint]), ("queue-depth", 0.75, queue_depth_scorer)),
        picker=("picker:max-score", max_score_picker),
    )
    ranking = run_profile(SimpleNamespace(compiled=steps), [c("a", queue_depth=4), c("b"), c("n")], False)
    assert names(ranking.ranked) == ["b", "n", "a"]
    assert {r.candidate.endpoint: r.scores["wild"] for r in ranking.reports} == {
        "grpc://a:1": 1.0, "grpc://b:1": 1.0, "grpc://n:1": 0.0
    }  # fmt: skip


def test_one_type_twice_with_different_settings():
    profile = Profile.model_validate(
        {"scorers": [{"type": "queue-depth", "half_at": 8}, {"type": "queue-depth", "half_at": 1, "weight": 0}]}
    )
    ranking = run_profile(profile, [c("a", queue_depth=8)], False)
    assert ranking.reports[0].scores == {"queue-depth": 0.5, "queue-depth#2": pytest.approx(1 / 9)}
    assert ranking.reports[0].score == 0.5  # the second has weight 0


def test_every_plugin_is_timed():
    profile = Profile.model_validate(
        {"scorers": [{"type": "prefix-hit"}, {"type": "queue-depth"}], "picker": "cache-affinity"}
    )
    ranking = run_profile(profile, [c("a"), c("b")], False)
    assert set(ranking.plugin_seconds) == {"filter:healthy", "prefix-hit", "queue-depth", "picker:cache-affinity"}
    assert all(0 <= s < 1 for s in ranking.plugin_seconds.values())


def test_a_private_request_sees_only_backends_that_report_edge():
    ranking = run_profile(Profile(), [c("cloud"), c("edge", kind="edge"), c("unknown", kind=None)], True)
    assert names(ranking.ranked) == ["edge"]
    refused = {r.candidate.endpoint: r.filtered_out_by for r in ranking.reports if r.filtered_out_by}
    assert set(refused) == {"grpc://cloud:1", "grpc://unknown:1"}
    assert all(reason.startswith("privacy") for reason in refused.values())


def test_plugin_labels():
    assert plugin.labels(Profile.model_validate({"scorers": ["queue-depth", "prefix-hit", "queue-depth"]}).scorers) == [
        "queue-depth", "prefix-hit", "queue-depth#2"
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"filters": ["healty"]}, "unknown filter 'healty'; known: \\['healthy'\\]"),
        ({"scorers": [{"weight": 1}]}, "a scorer needs a `type`"),
        ({"scorers": [{"type": "queue-depth", "min_blocks": 1}]}, "min_blocks"),
    ],
)
def test_bad_profiles_are_refused_naming_the_problem(profile, message):
    with pytest.raises(ValidationError, match=message):
        Profile.model_validate(profile)
