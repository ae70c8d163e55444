"""Routing profile: filters, weighted scorers, picker."""

import pytest

from gateway.policy.schema import Profile
from gateway.routing.candidate import Candidate
from gateway.routing.profile import evaluate


def c(name, healthy=True, queue=0, inflight=0):
    return Candidate(f"grpc://{name}:1", healthy, "cloud", queue, inflight)


CASES = [
    ("unhealthy backends are filtered out", [c("a", healthy=False), c("b")], 0, ["b"]),
    ("all unhealthy: nothing", [c("a", healthy=False)], 0, []),
    ("least loaded first", [c("a", queue=3), c("b", inflight=1), c("c")], 0, ["c", "b", "a"]),
    ("ties rotate with the turn (turn 0)", [c("a"), c("b"), c("c")], 0, ["a", "b", "c"]),
    ("ties rotate with the turn (turn 1)", [c("a"), c("b"), c("c")], 1, ["b", "c", "a"]),
    ("rotation never beats a better score", [c("a"), c("b", queue=5)], 1, ["a", "b"]),
]


@pytest.mark.parametrize("name, candidates, turn, expected", CASES, ids=[x[0] for x in CASES])
def test_rank(name, candidates, turn, expected):
    ranked, _ = evaluate(Profile(), candidates, turn)
    assert [x.endpoint.split("//")[1].split(":")[0] for x in ranked] == expected
