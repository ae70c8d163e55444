"""`queue-depth`, table-driven, with its `half_at` setting."""

import pytest
from pydantic import ValidationError

from gateway.routing.queue_depth_scorer import QueueDepth
from tests.unit.gateway.routing.candidates import c

CASES = [
    ({}, c("a"), 1.0),
    ({}, c("a", queue_depth=1), 0.5),
    ({}, c("a", queue_depth=1, inflight=2), 0.25),
    ({"half_at": 4}, c("a", queue_depth=4), 0.5),
    ({"half_at": 4}, c("a", inflight=12), 0.25),
    ({"half_at": 0.5}, c("a", queue_depth=1), 1 / 3),
]


@pytest.mark.parametrize(("config", "candidate", "score"), CASES)
def test_queue_depth(config, candidate, score):
    assert QueueDepth(**config).fn(candidate) == pytest.approx(score)


@pytest.mark.parametrize("config", [{"half_at": 0}, {"half_at": -1}, {"weight": -1}, {"half": 2}])
def test_bad_settings_are_refused(config):
    with pytest.raises(ValidationError):
        QueueDepth(**config)
