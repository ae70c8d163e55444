"""The gateway's own guess of which backend holds which prefix blocks: its routing history.

Used when there is no Redis, or while Redis is failing. Every routed request
records its prompt's block hashes against the backend that served it; a
lookup counts, per backend, the leading hashes recorded for it. It is
approximate: it does not see evictions or other replicas' routing. Memory is
bounded: at most `capacity` hashes, least recently used dropped first.
"""

from collections import OrderedDict


class ApproximateIndex:
    def __init__(self, capacity: int = 200_000) -> None:
        assert capacity > 0
        self.capacity = capacity
        self._holders: OrderedDict[bytes, set[str]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._holders)

    def record(self, worker_id: str, hashes: list[bytes]) -> None:
        for h in hashes:
            holders = self._holders.get(h)
            if holders is None:
                self._holders[h] = {worker_id}
            else:
                holders.add(worker_id)
                self._holders.move_to_end(h)
        while len(self._holders) > self.capacity:
            self._holders.popitem(last=False)

    def match(self, hashes: list[bytes], worker_ids: list[str]) -> dict[str, int]:
        """Per worker, how many leading hashes it is believed to hold."""
        matched = dict.fromkeys(worker_ids, 0)
        alive = set(worker_ids)
        for h in hashes:
            holders = self._holders.get(h)
            if not holders:
                break
            alive &= holders
            if not alive:
                break
            for w in alive:
                matched[w] += 1
        return matched
