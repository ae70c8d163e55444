"""Admission per tenant: rate limits (shared through Redis when it is there) and concurrency.

Two steps, so a refused request costs the gateway nothing: `admit` (a request
from the rate, a slot from the concurrency) runs before the prompt is
tokenized and scanned; `Admission.charge` takes the prompt's and max_tokens'
tokens once they are known.

Requests never fail because of Redis: when it is not configured, or stops
answering, the same buckets are kept in this process (limits then hold per
replica), and the metric `tandem_gateway_rate_limit_mode` and a log line
say which mode is active. Concurrency is counted per replica.
"""

import logging
import math
from collections import Counter
from dataclasses import dataclass, field

from gateway import metrics
from gateway.limits.buckets import Charge, LocalBuckets, RedisBuckets, Taken
from gateway.redis_client import STALLED, RedisWatch
from gateway.tenants import Tenants
from serving.openai.errors import BadRequest, RateLimited

log = logging.getLogger(__name__)


@dataclass
class Admission:
    """A request let in; `release` must be called once it is over."""

    controller: "AdmissionController"
    tenant: str
    charged_tokens: int
    released: bool = False
    # limit -> (per minute, what is left after this request, seconds until full again), for the tenant's limits
    left: dict[str, tuple[int, float, float]] = field(default_factory=dict)

    def headers(self) -> dict[str, str]:
        """OpenAI's rate-limit headers for the tenant's limits (none when it has none): what is left of each
        after this request was admitted, and when the bucket is full again."""
        return rate_headers(self.left)

    async def charge(self, tokens: int) -> None:
        """Take the request's tokens (prompt + max_tokens) from its tenant's token rate; 429 when over it."""
        await self.controller._charge(self, tokens)

    async def release(self, used_tokens: int | None = None) -> None:
        if self.released:
            return
        self.released = True
        await self.controller._release(self, used_tokens)


class AdmissionController:
    def __init__(
        self,
        tenants: Tenants,
        redis_client=None,
        unreachable: str | None = None,
        watch: RedisWatch | None = None,
    ) -> None:
        """`unreachable`: why Redis did not answer at the gateway's start, if it did not (local buckets first);
        `watch`: whether to ask Redis now, shared with the prefix hints."""
        self._tenants = tenants
        self._local = LocalBuckets()
        self._redis = RedisBuckets(redis_client) if redis_client is not None else None
        self._inflight: Counter[str] = Counter()
        self._mode: str | None = None
        self._watch = watch or RedisWatch(client=redis_client)
        if self._redis is None:
            self._set_mode("local", "REDIS_URL not set")
        elif unreachable:
            self._watch.failed(unreachable)
            self._set_mode("local", unreachable)
        else:
            self._set_mode("redis")

    def _set_mode(self, mode: str, reason: str = "") -> None:
        if mode != self._mode:
            for m in ("redis", "local"):
                metrics.RATE_LIMIT_MODE.labels(m).set(1 if m == mode else 0)
            if mode == "redis":
                log.info("rate limits: shared through Redis")
            else:
                log.warning("rate limits: kept in this process (per replica)%s", f": {reason}" if reason else "")
            self._mode = mode

    async def _take(self, charge: Charge) -> Taken:
        """From Redis's buckets while it answers within its budget (RedisWatch.ask); after a failure, from this
        process's until the watch asks Redis again (a Redis that stalls cost every limited request the client's
        0.5 s socket timeout)."""
        if self._redis is not None and self._watch.usable():
            if not charge.buckets():  # a tenant without limits: no round trip, so no word on Redis of its own (it
                if self._watch.answered:  # said `redis` while Redis was down, and the mode flapped every retry; and
                    self._set_mode("redis")  # stayed `local` after the hints found Redis back: reviews)
                return Taken(0.0)
            try:
                taken = await self._watch.ask(self._redis.take(charge))
                self._set_mode("redis")
                return taken
            except Exception as exc:  # noqa: BLE001 - any Redis failure: keep serving on local buckets
                self._set_mode("local", STALLED if isinstance(exc, TimeoutError) else f"Redis failed: {exc}")
        elif self._redis is not None and self._mode != "local":  # the prefix hints found it failing
            self._set_mode("local", self._watch.why_not())
        return await self._local.take(charge)

    async def admit(self, tenant: str, tokens: int = 0) -> Admission:
        """A request from the tenant's rate and a slot of its concurrency (and `tokens`, when given)."""
        limits = self._tenants.limits(tenant)
        if limits.max_concurrent and self._inflight[tenant] >= limits.max_concurrent:
            metrics.RATE_LIMITED.labels(tenant, "concurrency").inc()
            raise RateLimited(
                f"tenant {tenant!r} already has {limits.max_concurrent} requests in flight (its limit)", retry_after_s=1
            )
        self._check_fits(tenant, limits.tokens_per_minute, tokens)
        # The slot is taken before the rate's bucket is asked, and given back where the rate refuses: counted after
        # the await of Redis's round trip, every request of a burst passed the check before any was counted (12
        # admitted at once to a tenant with max_concurrent 2: a review).
        self._inflight[tenant] += 1
        metrics.INFLIGHT.labels(tenant).inc()
        try:
            charge = Charge(tenant, limits.requests_per_minute, limits.tokens_per_minute, tokens)
            taken = await self._take(charge)
            left = _left(charge, taken)
            if taken.wait > 0:
                metrics.RATE_LIMITED.labels(tenant, "rate").inc()
                limit = "requests" if limits.requests_per_minute else "tokens"  # which one, where only one is set
                raise RateLimited(
                    f"tenant {tenant!r} is over its rate limit", retry_after_s=math.ceil(taken.wait), limit=limit,
                    headers=rate_headers(left),
                )  # fmt: skip
        except BaseException:
            self._inflight[tenant] -= 1
            metrics.INFLIGHT.labels(tenant).dec()
            raise
        return Admission(self, tenant, tokens if limits.tokens_per_minute else 0, left=left)

    async def _charge(self, admission: Admission, tokens: int) -> None:
        limits = self._tenants.limits(admission.tenant)
        if not limits.tokens_per_minute:
            return
        self._check_fits(admission.tenant, limits.tokens_per_minute, tokens)
        charge = Charge(admission.tenant, None, limits.tokens_per_minute, tokens)
        taken = await self._take(charge)
        left = admission.left | _left(charge, taken)
        if taken.wait > 0:
            metrics.RATE_LIMITED.labels(admission.tenant, "rate").inc()
            raise RateLimited(
                f"tenant {admission.tenant!r} is over its token rate", retry_after_s=math.ceil(taken.wait),
                limit="tokens", headers=rate_headers(left),
            )  # fmt: skip
        admission.charged_tokens += tokens
        admission.left = left

    @staticmethod
    def _check_fits(tenant: str, tokens_per_minute: int | None, tokens: int) -> None:
        if tokens_per_minute and tokens > tokens_per_minute:
            raise BadRequest(
                f"this request needs {tokens} tokens (prompt + max_tokens), more than tenant {tenant!r}'s "
                f"limit of {tokens_per_minute} per minute; lower max_tokens",
                param="max_tokens",
            )

    async def _release(self, admission: Admission, used_tokens: int | None) -> None:
        self._inflight[admission.tenant] -= 1
        metrics.INFLIGHT.labels(admission.tenant).dec()
        unused = admission.charged_tokens - used_tokens if used_tokens is not None else 0
        limits = self._tenants.limits(admission.tenant)
        if unused > 0 and limits.tokens_per_minute:
            try:
                if self._redis is not None and self._mode == "redis":
                    await self._watch.ask(self._redis.give_back(admission.tenant, limits.tokens_per_minute, unused))
                else:
                    await self._local.give_back(admission.tenant, limits.tokens_per_minute, unused)
            except Exception as exc:  # noqa: BLE001 - a lost refund only makes the limit stricter
                log.debug("refund failed: %s", exc)


def _left(charge: Charge, taken: Taken) -> dict[str, tuple[int, float, float]]:
    """Each limit the charge drew on: (per minute, left, seconds until full), by OpenAI's name for it."""
    left = {}
    for (name, capacity, _), level in zip(charge.buckets(), taken.levels, strict=False):
        kind = "requests" if name.startswith("req:") else "tokens"
        left[kind] = (int(capacity), max(0.0, level), max(0.0, (capacity - level) * 60.0 / capacity))
    return left


def rate_headers(left: dict[str, tuple[int, float, float]]) -> dict[str, str]:
    headers = {}
    for kind, (limit, remaining, reset_s) in left.items():
        headers[f"x-ratelimit-limit-{kind}"] = str(limit)
        headers[f"x-ratelimit-remaining-{kind}"] = str(math.floor(remaining))
        headers[f"x-ratelimit-reset-{kind}"] = go_duration(reset_s)
    return headers


def go_duration(seconds: float) -> str:
    """A duration as OpenAI's headers write it (Go's form): `20ms`, `1.5s`, `6m0s`."""
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    minutes, rest = divmod(round(seconds, 3), 60)
    text = f"{rest:.3f}".rstrip("0").rstrip(".") + "s"
    return f"{int(minutes)}m{text}" if minutes else text
