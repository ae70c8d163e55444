"""The gateway's one Redis client (prefix hints, tenants' shared rate buckets), traced, with hiredis packing.

redis-py's asyncio connections pack every command in Python, about 1.5 µs an argument here: a prefix-hint lookup
at 256 workers sends ~300 (the prompt's block keys and the candidates), 0.45 ms of the gateway's CPU before the
command leaves. Its sync connections use hiredis's C packer; `connect` gives the asyncio pool the same
(docs/benchmarks.md, "Routing cost as the work grows").
"""

import asyncio
import contextlib
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
# costs one request this, and the requests after it go on without Redis until a probe finds it answering again.
ANSWER_BUDGET_S = 0.05
# A command that must open its connection first: a TCP and a HELLO round trip before the command's. Within the 50 ms
# of a command alone, a Redis 20 ms away never answered a new connection in time, and a timeout drops the one it
# had: one blip and that gateway never used Redis again (a review).
CONNECT_BUDGET_S = 0.5
RETRY_AFTER_S = 5.0
START_PROBE_S = 2.0  # how long the gateway's start (and a probe after a failure) waits for Redis's PING
STALLED = f"Redis answered not within {ANSWER_BUDGET_S * 1000:g} ms"


def where(client) -> str:
    """Redis's address as the client reaches it, never its password."""
    kwargs = client.connection_pool.connection_kwargs
    return kwargs.get("path") or f"{kwargs.get('host', 'localhost')}:{kwargs.get('port', 6379)}"


def with_password(client) -> str:
    """REDIS_URL as the client reads it with PASSWORD written in: its scheme, socket, database and options kept
    (the hint said redis://:PASSWORD@host for a rediss:// URL, which the next start refused as TLS, and for a
    Unix socket named localhost:6379, another Redis; a review)."""
    kwargs = client.connection_pool.connection_kwargs
    db = kwargs.get("db", 0)
    if path := kwargs.get("path"):
        return f"unix://{path}?db={db}&password=PASSWORD"
    scheme = "rediss" if "SSL" in client.connection_pool.connection_class.__name__ else "redis"
    host = kwargs.get("host", "localhost")
    host = f"[{host}]" if ":" in host else host
    return f"{scheme}://:PASSWORD@{host}:{kwargs.get('port', 6379)}/{db}"


def misconfigured(client, exc: BaseException) -> str | None:
    """Why REDIS_URL cannot work as written, where that is the failure (a password missing or refused, a database
    Redis has not): an operator's mistake no retry mends, which read as an outage (two WARNING lines, limits per
    replica for good, a ready gateway: a review). None for anything else."""
    import redis.exceptions

    at = where(client)
    if isinstance(exc, redis.exceptions.AuthenticationError):
        if "must be called with the client already authenticated" in str(exc) or "NOAUTH" in str(exc):
            return f"Redis at {at} needs a password: write it in REDIS_URL ({with_password(client)})"
        return f"Redis at {at} refused REDIS_URL's user or password: {exc}"
    if isinstance(exc, redis.exceptions.ResponseError) and "DB index is out of range" in str(exc):
        db = client.connection_pool.connection_kwargs.get("db", 0)
        return f"Redis at {at} has no database {db}: the /N at the end of REDIS_URL must be one it has"
    return None


class RedisWatch:
    """Whether to ask Redis now, one verdict for all its users (prefix hints, rate limits): after a failure of any,
    none asks until Redis answers a probe (every RETRY_AFTER_S, with START_PROBE_S to answer, in the background: a
    request never pays for a new connection to a Redis that failed). Each user kept its own verdict, so a request paid
    both budgets when Redis stalled (a review). Without a client (tests), it asks again after `retry_after_s`."""

    def __init__(self, retry_after_s: float = RETRY_AFTER_S, client=None) -> None:
        self.retry_after_s, self._client = retry_after_s, client
        self._down_until = 0.0
        self._probe: asyncio.Task | None = None
        self.answered = True  # Redis's last word was an answer (not a failure)
        self.last_error: str | None = None

    def usable(self) -> bool:
        if self._probe is not None:
            return False
        return time.monotonic() >= self._down_until

    def failed(self, why: str | None = None) -> None:
        self.answered = False
        if why:
            self.last_error = why
        self._down_until = time.monotonic() + self.retry_after_s
        if self._client is not None and self._probe is None:
            try:
                self._probe = asyncio.get_running_loop().create_task(self._probe_until_it_answers())
            except RuntimeError:  # no event loop (a test's construction): asked again after retry_after_s
                pass

    async def _probe_until_it_answers(self) -> None:
        try:
            while True:
                await asyncio.sleep(self.retry_after_s)
                try:
                    async with asyncio.timeout(START_PROBE_S):
                        await _ping(self._client)  # and the connection it opens stays in the pool, warm
                except Exception as exc:  # noqa: BLE001 - any failure: probe again later
                    self.last_error = misconfigured(self._client, exc) or f"{type(exc).__name__}: {exc}"[:300]
                    continue
                self.answered, self._down_until = True, 0.0
                return
        finally:
            self._probe = None

    def why_not(self) -> str:
        """Why Redis is not asked now, for a user that did not see the failure itself (its mode, metric and log line
        followed only its own failures: the rate limits said `redis` while hints had found it stalled, and their
        buckets were this process's)."""
        if self._probe is not None:
            return f"Redis failed moments ago; probed every {self.retry_after_s:g} s until it answers"
        return f"Redis failed moments ago; asked again in {max(0.0, self._down_until - time.monotonic()):.1f} s"

    def _has_idle_connection(self) -> bool:
        """Whether the next command finds a connection open: a command takes its connection from the pool as it
        starts, before its first wait, so the ones in flight are off the idle list already (counting them again
        gave half of a burst the longer budget: a review)."""
        if self._client is None:
            return True
        return bool(getattr(self._client.connection_pool, "_available_connections", ()))

    async def ask(self, awaitable):
        """Redis's answer within ANSWER_BUDGET_S (CONNECT_BUDGET_S where no idle connection is left for it); a failure
        (TimeoutError past it) is raised, and no user asks Redis again until it answers a probe."""
        budget = ANSWER_BUDGET_S if self._has_idle_connection() else CONNECT_BUDGET_S
        try:
            async with asyncio.timeout(budget):
                answer = await awaitable
        except Exception as exc:
            self.failed(STALLED if isinstance(exc, TimeoutError) else f"{type(exc).__name__}: {exc}"[:300])
            raise
        self.answered = True
        return answer

    async def close(self) -> None:
        if self._probe is not None:
            self._probe.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._probe


async def unreachable(client) -> str | None:
    """Why Redis does not answer a PING at start, in words (its address, never its password); None when it does.
    RedisMisconfigured where REDIS_URL cannot work as written (misconfigured)."""
    try:
        async with asyncio.timeout(START_PROBE_S):
            await _ping(client)
    except TimeoutError:
        return f"Redis at {where(client)} did not answer within {START_PROBE_S:g} s"
    except Exception as exc:  # noqa: BLE001 - any failure is reported, none stops the gateway but a wrong URL
        if problem := misconfigured(client, exc):
            raise RedisMisconfigured(problem) from None
        return f"Redis at {where(client)} did not answer: {exc}"
    return None


async def _ping(client) -> None:
    """A PING, answered: a refusal of the command itself (an ACL user without `ping`, NOPERM) is an answer too: a
    least-privilege user's gateway never had Redis back after a failure (a review)."""
    import redis.exceptions

    try:
        await client.ping()
    except redis.exceptions.NoPermissionError:
        pass


def misconfigured_url(url: str) -> str | None:
    """`misconfigured`'s words for REDIS_URL, from one PING without an event loop (`tandem gateway` checks it before
    its port is bound); None where Redis answers or is merely not there (an outage is no verdict: the gateway starts
    without Redis and probes it)."""
    import redis
    import redis.exceptions

    client = redis.Redis.from_url(url, socket_timeout=START_PROBE_S, socket_connect_timeout=START_PROBE_S)
    try:
        client.ping()
    except redis.exceptions.NoPermissionError:  # answered: an ACL user without `ping` (as `_ping`)
        pass
    except Exception as exc:  # noqa: BLE001 - only a URL that cannot work is a verdict
        return misconfigured(client, exc) or wrong_scheme(url)
    finally:
        client.close()
    return None


SCHEME_PROBE_S = 0.5


def wrong_scheme(url: str) -> str | None:
    """Where Redis does not answer REDIS_URL: whether it speaks the other protocol at that address. rediss:// to a
    plain Redis stalls (Redis waits for a line the TLS hello never ends) and redis:// to a TLS one is dropped: each
    read as an outage, the gateway ready without Redis for good (a review). A TLS handshake alone (no certificate
    checked, nothing sent over it) or a plain PING tells; None where neither answers."""
    import socket
    import ssl

    import redis
    import redis.exceptions
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    kwargs = redis.asyncio.connection.parse_url(url)
    if "path" in kwargs:  # a Unix socket: no TLS to mistake
        return None
    host, port = kwargs.get("host", "localhost"), kwargs.get("port", 6379)
    at = f"{host}:{port}"
    if url.startswith("rediss://"):
        plain = redis.Redis(
            host=host,
            port=port,
            socket_timeout=SCHEME_PROBE_S,
            socket_connect_timeout=SCHEME_PROBE_S,
            retry=Retry(NoBackoff(), 0),  # (redis-py's default retries a refused connection for 4 s)
        )
        try:
            plain.ping()
        except (redis.exceptions.ResponseError, redis.exceptions.AuthenticationError):
            pass  # it answered in plain RESP: a refusal is an answer
        except Exception:  # noqa: BLE001 - not a plain Redis either
            return None
        finally:
            plain.close()
        return f"Redis at {at} speaks plain TCP, not TLS: REDIS_URL must start redis://, not rediss://"
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE  # which protocol, not whom: nothing is sent
    try:
        with socket.create_connection((host, port), SCHEME_PROBE_S) as s:
            with context.wrap_socket(s, server_hostname=host):
                pass
    except (OSError, ValueError):
        return None
    return f"Redis at {at} speaks TLS: REDIS_URL must start rediss://, not redis://"


class RedisMisconfigured(ValueError):
    """REDIS_URL cannot work as written; the message says why."""
