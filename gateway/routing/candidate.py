"""What routing plugins see of a backend: a snapshot, gathered before scoring.

Everything a scorer needs is in here, so scorers are pure functions: the
producer step (`gateway/gather.py`) fills in the prefix match from
the hint index before the profile runs.
"""

from typing import NamedTuple

RECENT_WINDOW_S = 5.0  # the window of `recent_requests` and `prefix_recent_requests`


class Candidate(NamedTuple):
    """Immutable, and a tuple rather than a frozen dataclass: a gateway reads one per backend per request, and a
    frozen dataclass's constructor (a checked set per field) took 1.4 µs of a 2.7 µs snapshot (256 workers: 0.7 ms
    a decision, bench/scaling.py). Fields after `kind` are built positionally by WorkerBackend.candidate and
    with_prefix: keep their order in step with them."""

    endpoint: str
    is_healthy: bool
    kind: str | None  # as the backend reports it in Stats; None until first heard from
    # What the worker last reported (Stats), in the order WorkerBackend caches them (worker_backend.py)
    queue_depth: int = 0  # waiting in the worker
    running: int = 0  # sequences the worker is running
    kv_blocks_used: int = 0
    kv_blocks_total: int = 0  # 0: not reported
    block_size_tokens: int = 0  # 0: not reported
    inflight: int = 0  # requests this gateway has open on it
    recent_requests: int = 0  # requests this gateway sent it in the last RECENT_WINDOW_S: its share of the flow
    # This request's prompt, filled in only where the backend holds some of it (0 elsewhere: what a plugin reads
    # them for is the part held, and leaving them out lets a backend's snapshot be kept between requests).
    prompt_blocks: int = 0  # full blocks in this request's prompt
    prefix_match_blocks: int = 0  # of those, how many leading ones the hint index says this backend holds
    prefix_recent_requests: int = 0  # requests with this prompt's first block, same window

    @property
    def load(self) -> int:
        """Requests on the backend: its own count (all gateways, as of the last poll) or ours (now), the larger."""
        return max(self.queue_depth + self.running, self.inflight)
