"""A per-backend circuit breaker: stop sending to a backend that keeps failing, then probe it.

closed: requests flow; `failure_threshold` consecutive failures open it.
open: nothing is sent for `open_for_s`; then it is half-open.
half-open: one request at a time probes; success closes it, failure opens it again. A request that finds the
probe slot taken may wait for its verdict (`probe_settled`) instead of giving up.
"""

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

CLOSED, OPEN, HALF_OPEN = "closed", "open", "half-open"


@dataclass
class CircuitBreaker:
    failure_threshold: int = 3
    open_for_s: float = 5.0
    clock: Callable[[], float] = time.monotonic
    state: str = field(default=CLOSED, init=False)
    consecutive_failures: int = field(default=0, init=False)
    _opened_at: float = field(default=0.0, init=False)
    _probe_in_flight: bool = field(default=False, init=False)
    _settled: asyncio.Event | None = field(default=None, init=False)  # set when the probe in flight has its verdict

    def __post_init__(self) -> None:
        assert self.failure_threshold >= 1 and self.open_for_s > 0

    def current_state(self) -> str:
        if self.state == OPEN and self.clock() - self._opened_at >= self.open_for_s:
            self.state, self._probe_in_flight = HALF_OPEN, False
        return self.state

    def seconds_to_probe(self) -> float:
        """While open, how long until a request may probe the backend again; 0 otherwise."""
        if self.current_state() != OPEN:
            return 0.0
        return max(0.0, self.open_for_s - (self.clock() - self._opened_at))

    def can_send(self) -> bool:
        """Whether a request may be sent now (does not take the half-open probe slot)."""
        state = self.current_state()
        return state == CLOSED or (state == HALF_OPEN and not self._probe_in_flight)

    def try_acquire(self) -> bool:
        """Take permission to send one request; in half-open, only one at a time."""
        if not self.can_send():
            return False
        if self.state == HALF_OPEN:
            self._probe_in_flight = True
        return True

    def probing(self) -> bool:
        """Whether a request is probing the backend now (half-open, its one slot taken)."""
        return self.current_state() == HALF_OPEN and self._probe_in_flight

    async def probe_settled(self) -> None:
        """Returns once the probe in flight has ended (a verdict, or its caller left); at once where none is."""
        if not self.probing():
            return
        if self._settled is None:
            self._settled = asyncio.Event()
        await self._settled.wait()

    def _settle(self) -> None:
        self._probe_in_flight = False
        if self._settled is not None:
            self._settled.set()
            self._settled = None

    def release(self) -> None:
        """A request ended with no verdict on the backend (the caller left first): free the probe slot."""
        self._settle()

    def record_success(self) -> None:
        self.state, self.consecutive_failures = CLOSED, 0
        self._settle()

    def record_failure(self) -> None:
        self.consecutive_failures += 1
        if self.state == HALF_OPEN or self.consecutive_failures >= self.failure_threshold:
            self.state, self._opened_at = OPEN, self.clock()
        self._settle()
