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

    def match(self, hashes: list[bytes], worker_ids: list[str], max_age_s: float | None = None) -> dict[str, int]:
        """Per worker, how many leading hashes it is believed to hold (recorded within max_age_s, if given)."""
        oldest = time.monotonic() - max_age_s if max_age_s is not None else None
        matched = dict.fromkeys(worker_ids, 0)
        alive = set(worker_ids)
        for h in hashes:
            holders = self._holders.get(h)
            if not holders:
                break
            alive &= holders.keys()  # a set operation, not a loop over every worker (256 workers: 1.5 ms -> µs)
            if oldest is not None:
                alive = {w for w in alive if holders[w] >= oldest}
            if not alive:
                break
            for w in alive:
                matched[w] += 1
        return matched
