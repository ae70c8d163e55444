"""`prefix-hit`, table-driven, with its `min_blocks` setting."""

import pytest
from pydantic import ValidationError

from gateway.routing.prefix_hit_scorer import PrefixHit
from tests.unit.gateway.routing.candidates import c

CASES = [
    ({}, c("a", prompt_blocks=4, prefix_match_blocks=4), 1.0),
    ({}, c("a", prompt_blocks=4, prefix_match_blocks=1), 0.25),
    ({}, c("a", prompt_blocks=4), 0.0),
    ({}, c("a"), 0.0),  # a prompt shorter than one block: nothing to match
    ({"min_blocks": 2}, c("a", prompt_blocks=4, prefix_match_blocks=1), 0.0),  # only the shared system prompt
    ({"min_blocks": 2}, c("a", prompt_blocks=4, prefix_match_blocks=2), 0.5),
]


@pytest.mark.parametrize(("config", "candidate", "score"), CASES)
def test_prefix_hit_is_the_matched_fraction(config, candidate, score):
    assert PrefixHit(**config).fn(candidate) == score


def test_negative_min_blocks_is_refused():
    with pytest.raises(ValidationError, match="min_blocks"):
        PrefixHit(min_blocks=-1)
