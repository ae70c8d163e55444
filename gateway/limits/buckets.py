"""Token buckets for per-tenant rate limits: one for requests, one for tokens, per minute.

A bucket holds up to a minute's allowance and refills continuously. A
request takes one request and its token estimate from both buckets, or
neither; when it cannot, the answer says how long until it could.
`LocalBuckets` keeps them in this process; `RedisBuckets` keeps them in Redis
so every gateway replica draws from the same ones.
"""

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Charge:
    tenant: str
    requests_per_minute: int | None
    tokens_per_minute: int | None
    tokens: int

    def buckets(self) -> list[tuple[str, float, float]]:
        """(bucket name, capacity, cost) for each limit that is set."""
        out = []
        if self.requests_per_minute:
            out.append((f"req:{self.tenant}", float(self.requests_per_minute), 1.0))
        if self.tokens_per_minute:
            out.append((f"tok:{self.tenant}", float(self.tokens_per_minute), float(self.tokens)))
        return out


@dataclass(frozen=True)
class Taken:
    """A charge's outcome: `wait` seconds until it could be taken (0: taken), and what each of its buckets
    (`Charge.buckets`, in order) holds now: after the charge when taken, before it when not."""

    wait: float
    levels: tuple[float, ...] = ()


class LocalBuckets:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._levels: dict[str, tuple[float, float]] = {}  # name -> (level, at)

    def _level(self, name: str, capacity: float, now: float) -> float:
        level, at = self._levels.get(name, (capacity, now))
        return min(capacity, level + (now - at) * capacity / 60.0)

    async def take(self, charge: Charge) -> Taken:
        """Taken (wait 0) with what each bucket holds after; otherwise the seconds until it could be."""
        now, buckets = self._clock(), charge.buckets()
        levels = [self._level(name, capacity, now) for name, capacity, _ in buckets]
        short = [
            (cost - level) * 60.0 / capacity
            for (_, capacity, cost), level in zip(buckets, levels, strict=True)
            if level < cost
        ]
        if short:
            return Taken(max(short), tuple(levels))
        after = tuple(level - cost for (_, _, cost), level in zip(buckets, levels, strict=True))
        for (name, _, _), level in zip(buckets, after, strict=True):
            self._levels[name] = (level, now)
        return Taken(0.0, after)

    async def give_back(self, tenant: str, tokens_per_minute: int, tokens: int) -> None:
        name, now = f"tok:{tenant}", self._clock()
        capacity = float(tokens_per_minute)
        self._levels[name] = (min(capacity, self._level(name, capacity, now) + tokens), now)


# Both buckets are checked and charged in one atomic step, on Redis's clock, so replicas agree.
_TAKE = """
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) + tonumber(now_t[2]) / 1e6
local wait, levels = 0, {}
for i, key in ipairs(KEYS) do
  local capacity, cost = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  local state = redis.call('HMGET', key, 'level', 'at')
  local level, at = tonumber(state[1]), tonumber(state[2])
  if level == nil then level, at = capacity, now end
  level = math.min(capacity, level + (now - at) * capacity / 60.0)
  levels[i] = level
  if level < cost then wait = math.max(wait, (cost - level) * 60.0 / capacity) end
end
local out = {tostring(wait)}
if wait > 0 then
  for i = 1, #KEYS do out[i + 1] = tostring(levels[i]) end
  return out
end
for i, key in ipairs(KEYS) do
  local capacity, cost = tonumber(ARGV[2 * i - 1]), tonumber(ARGV[2 * i])
  redis.call('HSET', key, 'level', levels[i] - cost, 'at', now)
  redis.call('EXPIRE', key, 120)
  out[i + 1] = tostring(levels[i] - cost)
end
return out
"""
_GIVE_BACK = """
local now_t = redis.call('TIME')
local now = tonumber(now_t[1]) + tonumber(now_t[2]) / 1e6
local capacity, amount = tonumber(ARGV[1]), tonumber(ARGV[2])
local state = redis.call('HMGET', KEYS[1], 'level', 'at')
local level, at = tonumber(state[1]), tonumber(state[2])
if level == nil then return 0 end
level = math.min(capacity, level + (now - at) * capacity / 60.0 + amount)
redis.call('HSET', KEYS[1], 'level', level, 'at', now)
redis.call('EXPIRE', KEYS[1], 120)
return 1
"""
KEY_PREFIX = "tandem:ratelimit:"


class RedisBuckets:
    def __init__(self, client) -> None:
        self._take = client.register_script(_TAKE)
        self._give_back = client.register_script(_GIVE_BACK)

    async def take(self, charge: Charge) -> Taken:
        buckets = charge.buckets()
        if not buckets:
            return Taken(0.0)
        keys = [KEY_PREFIX + name for name, _, _ in buckets]
        args = [x for _, capacity, cost in buckets for x in (capacity, cost)]
        wait, *levels = (float(x) for x in await self._take(keys=keys, args=args))
        return Taken(wait, tuple(levels))

    async def give_back(self, tenant: str, tokens_per_minute: int, tokens: int) -> None:
        await self._give_back(keys=[f"{KEY_PREFIX}tok:{tenant}"], args=[tokens_per_minute, tokens])
