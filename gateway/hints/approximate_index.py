"""The gateway's own guess of which backend holds which prefix blocks: its routing history.

Every routed request records its prompt's block hashes against the backend
it was sent to, at once. Two uses:
- without Redis, or while Redis fails, it is the whole picture (approximate:
  it sees neither evictions nor other replicas' routing);
- with Redis, its *recent* entries cover what the workers cannot have
  published yet: a prompt still in prefill on a worker. Without that, a burst
  of requests sharing a new prefix would spread over the pool before the
  first one's blocks were announced.

Memory is bounded: at most `capacity` hashes, least recently recorded dropped first.
"""

import time
from collections import OrderedDict
from collections.abc import Sequence


class ApproximateIndex:
    def __init__(self, capacity: int = 200_000) -> None:
        assert capacity > 0
        self.capacity = capacity
        self._holders: OrderedDict[bytes, dict[str, float]] = OrderedDict()  # hash -> worker -> when recorded

    def __len__(self) -> int:
        return len(self._holders)

    def record(self, worker_id: str, hashes: list[bytes]) -> None:
        now = time.monotonic()
        for h in hashes:
            holders = self._holders.get(h)
            if holders is None:
                self._holders[h] = {worker_id: now}
            else:
                holders[worker_id] = now
                self._holders.move_to_end(h)
        while len(self._holders) > self.capacity:
            self._holders.popitem(last=False)

    def match(self, hashes: list[bytes], worker_ids: Sequence[str], max_age_s: float | None = None) -> dict[str, int]:
        """Per worker holding the first hash, how many leading hashes it is believed to hold (recorded within
        max_age_s, if given); a worker left out holds none. Only the holders are touched: at 256 candidates, a
        dict of every one was a measurable part of a routing decision (bench/scaling.py)."""
        holders = self._holders.get(hashes[0]) if hashes else None
        if not holders:
            return {}
        oldest = time.monotonic() - max_age_s if max_age_s is not None else None
        alive = holders.keys() & worker_ids  # a set operation, not a loop over every worker
        matched: dict[str, int] = {}
        for h in hashes:
            holders = self._holders.get(h)
            if not holders:
                break
            alive &= holders.keys()
            if oldest is not None:
                alive = {w for w in alive if holders[w] >= oldest}
            if not alive:
                break
            for w in alive:
                matched[w] = matched.get(w, 0) + 1
        return matched
