"""Circuit breaker transitions, driven by a fake clock."""

import pytest

from gateway.backends.circuit_breaker import CLOSED, HALF_OPEN, OPEN, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run(steps):
    """Apply steps (fail, ok, wait N, acquire) and return the state after each."""
    clock = Clock()
    breaker = CircuitBreaker(failure_threshold=3, open_for_s=5.0, clock=clock)
    seen = []
    for step in steps:
        if step == "fail":
            breaker.record_failure()
        elif step == "ok":
            breaker.record_success()
        elif step.startswith("wait"):
            clock.now += float(step.split()[1])
        elif step == "acquire":
            seen.append(breaker.try_acquire())
            continue
        seen.append(breaker.current_state())
    return seen


CASES = [
    ("stays closed below the threshold", ["fail", "fail"], [CLOSED, CLOSED]),
    ("opens at the threshold", ["fail", "fail", "fail"], [CLOSED, CLOSED, OPEN]),
    ("a success resets the count", ["fail", "fail", "ok", "fail", "fail"], [CLOSED] * 5),
    ("refuses while open", ["fail", "fail", "fail", "acquire"], [CLOSED, CLOSED, OPEN, False]),
    ("half-open after the wait", ["fail", "fail", "fail", "wait 5"], [CLOSED, CLOSED, OPEN, HALF_OPEN]),
    (
        "one probe at a time",
        ["fail", "fail", "fail", "wait 5", "acquire", "acquire"],
        [CLOSED, CLOSED, OPEN, HALF_OPEN, True, False],
    ),
    (
        "a good probe closes it",
        ["fail", "fail", "fail", "wait 5", "acquire", "ok", "acquire"],
        [CLOSED, CLOSED, OPEN, HALF_OPEN, True, CLOSED, True],
    ),
    (
        "a bad probe opens it again",
        ["fail", "fail", "fail", "wait 5", "acquire", "fail", "wait 4", "acquire"],
        [CLOSED, CLOSED, OPEN, HALF_OPEN, True, OPEN, OPEN, False],
    ),
]


@pytest.mark.parametrize("name, steps, expected", CASES, ids=[c[0] for c in CASES])
def test_transitions(name, steps, expected):
    assert run(steps) == expected
