"""How many events happened in the last `window_s` seconds (tokens for tokens/s, requests for load)."""

import time
from collections import deque


class SlidingCount:
    def __init__(self, window_s: float) -> None:
        assert window_s > 0
        self.window_s = window_s
        self._times: deque[float] = deque()

    def add(self, count: int = 1) -> None:
        now = time.monotonic()
        self._times.extend([now] * count)
        self._prune(now)

    def count(self, now: float | None = None) -> int:
        """Events in the window ending `now` (time.monotonic(); read here when not given)."""
        times = self._times
        if times:
            self._prune(time.monotonic() if now is None else now)
        return len(times)

    def next_change(self) -> float:
        """When (time.monotonic()) the count next drops with no new event: the oldest one leaving the window."""
        return self._times[0] + self.window_s if self._times else float("inf")

    def per_second(self) -> float:
        return self.count() / self.window_s

    def _prune(self, now: float) -> None:
        cutoff = now - self.window_s
        while self._times and self._times[0] < cutoff:
            self._times.popleft()
