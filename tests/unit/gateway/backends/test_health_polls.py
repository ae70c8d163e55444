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


def test_an_edge_pool_backend_that_reports_another_kind_is_said_once(caplog):
    """A policy review: an edge pool's backend that said kind=cloud showed healthy with no problem in /readyz and
    nothing in the log; only private callers' 503s hinted at it."""

    class CloudInEdgePool(Scripted):
        def __init__(self) -> None:
            WorkerBackend.__init__(self, "grpc://10.9.9.8:1", "m", "edge")
            self.outcomes = [None, None]

    backend = CloudInEdgePool()
    with caplog.at_level("WARNING", logger="gateway.backends.worker_backend"):
        health(backend)
    assert backend.privacy_refusal == "reports kind=cloud in an edge pool: private requests never go to it"
    assert [r.getMessage() for r in caplog.records] == [f"backend {backend.endpoint}: {backend.privacy_refusal}"]
    cloud = Scripted(None, None)  # a cloud pool's cloud backend, heard from: nothing to say
    health(cloud)
    assert cloud.stats.kind == "cloud" and cloud.privacy_refusal is None
