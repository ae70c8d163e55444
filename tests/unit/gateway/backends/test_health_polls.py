"""A Stats poll that fails makes its backend unhealthy, but one late answer alone does not."""

import asyncio

import grpc

from gateway.backends.worker_backend import BackendError, WorkerBackend
from proto.gen import worker_pb2


class Scripted(WorkerBackend):
    """A backend whose Stats polls answer, or fail with the given status, in turn."""

    def __init__(self, *outcomes) -> None:
        super().__init__("grpc://10.9.9.9:1", "m", "cloud")
        self.outcomes = list(outcomes)

    async def _fetch_stats(self) -> worker_pb2.StatsReply:
        outcome = self.outcomes.pop(0)
        if outcome is None:
            return worker_pb2.StatsReply(model_id="m", kind="cloud")
        raise BackendError(self.endpoint, outcome, "scripted")


def health(backend: Scripted) -> list[bool]:
    async def poll():
        seen = []
        for _ in range(len(backend.outcomes)):
            await backend.refresh()
            seen.append(backend.is_healthy)
        return seen

    return asyncio.run(poll())


LATE, GONE = grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.UNAVAILABLE


def test_one_late_poll_is_no_verdict_and_two_in_a_row_are():
    """A gateway whose event loop was held a second misses every backend's deadline at once: marking them all
    unhealthy for it made 503s for every caller. A hung worker misses the next poll too."""
    assert health(Scripted(None, LATE, None, LATE, LATE, None)) == [True, True, True, True, False, True]


def test_a_worker_that_is_gone_is_unhealthy_at_the_first_poll():
    assert health(Scripted(None, GONE, None)) == [True, False, True]
    assert health(Scripted(LATE)) == [True]  # never heard from, but not a verdict yet either
