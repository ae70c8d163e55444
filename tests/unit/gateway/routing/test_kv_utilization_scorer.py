"""`kv-utilization`, table-driven, with its `full_at` setting."""

import pytest
from pydantic import ValidationError

from gateway.routing.kv_utilization_scorer import KvUtilization
from tests.unit.gateway.routing.candidates import c

CASES = [
    ({}, c("a", kv_blocks_used=0, kv_blocks_total=100), 1.0),
    ({}, c("a", kv_blocks_used=75, kv_blocks_total=100), 0.25),
    ({}, c("a", kv_blocks_used=120, kv_blocks_total=100), 0.0),  # never below 0
    ({}, c("a"), 1.0),  # not reported (an edge agent, an HTTP backend): neutral
    ({"full_at": 0.8}, c("a", kv_blocks_used=40, kv_blocks_total=100), 0.5),
    ({"full_at": 0.8}, c("a", kv_blocks_used=90, kv_blocks_total=100), 0.0),
    ({"full_at": 0.8}, c("a"), 1.0),
]


@pytest.mark.parametrize(("config", "candidate", "score"), CASES)
def test_kv_utilization_is_the_free_fraction(config, candidate, score):
    assert KvUtilization(**config).fn(candidate) == pytest.approx(score)


@pytest.mark.parametrize("full_at", [0, 1.5])
def test_full_at_outside_0_1_is_refused(full_at):
    with pytest.raises(ValidationError, match="full_at"):
        KvUtilization(full_at=full_at)
