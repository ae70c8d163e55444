"""`healthy`, table-driven."""

import pytest

from gateway.routing.healthy_filter import Healthy
from tests.unit.gateway.routing.candidates import c, names

CASES = [
    ("keeps the healthy, drops the rest", [c("a", healthy=False), c("b"), c("c")], ["b", "c"]),
    ("all unhealthy: nothing", [c("a", healthy=False)], []),
    ("none: none", [], []),
    ("order is kept", [c("z"), c("a")], ["z", "a"]),
]


@pytest.mark.parametrize(("name", "candidates", "kept"), CASES, ids=[x[0] for x in CASES])
def test_healthy(name, candidates, kept):
    assert names(Healthy().fn(candidates)) == kept
