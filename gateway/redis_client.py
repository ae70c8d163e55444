"""The gateway's one Redis client (prefix hints, tenants' shared rate buckets), traced, with hiredis packing.

redis-py's asyncio connections pack every command in Python, about 1.5 µs an argument here: a prefix-hint lookup
at 256 workers sends ~300 (the prompt's block keys and the candidates), 0.45 ms of the gateway's CPU before the
command leaves. Its sync connections use hiredis's C packer; `connect` gives the asyncio pool the same
(docs/benchmarks.md, "Routing cost as the work grows").
"""

import asyncio
import time

import hiredis


def _hiredis_packing(base: type) -> type:
    class HiredisPacking(base):
        def pack_command(self, *args):
            if isinstance(args[0], str):  # "CONFIG GET": the words go as separate arguments, as redis-py does
                args = (*args[0].encode().split(), *args[1:])
            elif b" " in args[0]:
                args = (*args[0].split(), *args[1:])
            try:
                return [hiredis.pack_command(args)]
            except TypeError:  # what hiredis does not take (None, a memoryview): redis-py's own error or packing
                return super().pack_command(*args)

    HiredisPacking.__name__ = HiredisPacking.__qualname__ = f"HiredisPacking{base.__name__}"
    return HiredisPacking


def connect(url: str, **kwargs):
    """A redis.asyncio client for `url` (redis://, rediss://, unix://), traced by OpenTelemetry, packing with hiredis.
    No connection is made until the first command."""
    import redis.asyncio
    from opentelemetry.instrumentation.redis import RedisInstrumentor

    if not RedisInstrumentor().is_instrumented_by_opentelemetry:
        RedisInstrumentor().instrument()
    client = redis.asyncio.from_url(url, **kwargs)
    pool = client.connection_pool
    pool.connection_class = _hiredis_packing(pool.connection_class)  # the scheme's class (TLS, Unix socket) kept
    return client


# The longest a request waits on Redis (a round trip takes 0.2-2 ms here, bench/scaling.py). A Redis that stalls
# (SIGSTOP, a fork for a snapshot, a network hiccup) cost every request the client's 0.5 s socket timeout; now it
# costs one request this, and the requests after it go on without Redis until RETRY_AFTER_S has passed.
ANSWER_BUDGET_S = 0.05
RETRY_AFTER_S = 5.0
START_PROBE_S = 2.0  # how long the gateway's start waits for Redis's first answer
STALLED = f"Redis answered not within {ANSWER_BUDGET_S * 1000:g} ms"


class RedisWatch:
    """Whether to ask Redis now, one verdict for all its users (prefix hints, rate limits): after a failure of any,
    none asks for RETRY_AFTER_S. Each kept its own, so a request paid both budgets when Redis stalled (a review)."""

    def __init__(self, retry_after_s: float = RETRY_AFTER_S) -> None:
        self.retry_after_s = retry_after_s
        self._down_until = 0.0

    def usable(self) -> bool:
        return time.monotonic() >= self._down_until

    def failed(self) -> None:
        self._down_until = time.monotonic() + self.retry_after_s

    def why_not(self) -> str:
        """Why Redis is not asked now, for a user that did not see the failure itself (its mode, metric and log line
        followed only its own failures: the rate limits said `redis` while hints had found it stalled, and their
        buckets were this process's)."""
        return f"Redis failed moments ago; asked again in {max(0.0, self._down_until - time.monotonic()):.1f} s"

    async def ask(self, awaitable):
        """Redis's answer within ANSWER_BUDGET_S; a failure (TimeoutError past it) is raised, and no user asks Redis
        again for `retry_after_s`."""
        try:
            async with asyncio.timeout(ANSWER_BUDGET_S):
                return await awaitable
        except Exception:
            self.failed()
            raise


async def unreachable(client) -> str | None:
    """Why Redis does not answer a PING at start, in words (its address, never its password); None when it does."""
    kwargs = client.connection_pool.connection_kwargs
    where = kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"
    try:
        async with asyncio.timeout(START_PROBE_S):
            await client.ping()
    except TimeoutError:
        return f"Redis at {where} did not answer within {START_PROBE_S:g} s"
    except Exception as exc:  # noqa: BLE001 - any failure is reported, none stops the gateway
        return f"Redis at {where} did not answer: {exc}"
    return None
