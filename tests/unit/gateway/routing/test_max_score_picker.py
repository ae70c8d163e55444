"""`max-score`, table-driven."""

import pytest

from gateway.routing.max_score_picker import MaxScore
from tests.unit.gateway.routing.candidates import c, names

CASES = [
    ("best score first", [(c("a"), 0.1), (c("b"), 0.9), (c("c"), 0.5)], 0, ["b", "c", "a"]),
    ("ties rotate with the turn (turn 0)", [(c("a"), 1.0), (c("b"), 1.0), (c("c"), 1.0)], 0, ["a", "b", "c"]),
    ("ties rotate with the turn (turn 1)", [(c("a"), 1.0), (c("b"), 1.0), (c("c"), 1.0)], 1, ["b", "c", "a"]),
    ("rotation never beats a better score", [(c("a"), 1.0), (c("b"), 0.2)], 1, ["a", "b"]),
    ("nothing to pick", [], 3, []),
]


@pytest.mark.parametrize(("name", "scored", "turn", "expected"), CASES, ids=[x[0] for x in CASES])
def test_max_score(name, scored, turn, expected):
    assert names(MaxScore().fn(scored, turn)) == expected
