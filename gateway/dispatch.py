"""From features to a running stream: gather candidates, plan the route (gateway.policy.route_plan), start, fall back.

A backend counts as serving a request once its first chunk arrives; until
then any retryable failure moves on to the next backend of the pool, then to
the next pool the decision allows. The privacy invariant is checked again
against what each backend says it is, so a mislabelled pool cannot leak.
"""

import asyncio
import logging
import math
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from itertools import count

import grpc

from gateway import metrics, privacy
from gateway.backends.circuit_breaker import CLOSED
from gateway.backends.registry import BackendRegistry
from gateway.backends.worker_backend import BackendError, WorkerBackend, hide_addresses
from gateway.classify.features import RequestFeatures
from gateway.gather import Gathered, PromptKey, gather_pools
from gateway.hints.prefix_hints import PrefixHints
from gateway.policy.decide import Decision, decide
from gateway.policy.route_plan import PoolPlan, RoutePlan, plan_route
from gateway.policy.schema import Policy
from proto.gen import worker_pb2
from proto.prefix_hash import DEFAULT_BLOCK_SIZE_TOKENS
from serving import spans
from serving.openai.errors import BadRequest, NoBackend

log = logging.getLogger(__name__)
tracer = spans.get_tracer(__name__)  # the SDK's spans at a fraction of their cost (serving/spans.py)
_turns = count()


@dataclass
class RoutedStream:
    pool: str
    rule: str
    backend: WorkerBackend
    label: str  # what callers are shown for the backend where its address is not theirs to see (backend_label)
    first: worker_pb2.GenerateChunk
    rest: AsyncIterator[worker_pb2.GenerateChunk]
    tenant: str
    predicted_cached_tokens: int = 0  # what the prefix hints promised for the chosen backend
    ttft_s: float = 0.0  # set by the caller when the first token is in hand
    idle_timeout_s: float | None = None  # a backend silent this long mid-answer is hung
    on_end: Callable[..., None] | None = None  # (usage=, status=) once the answer ends: the usage record
    recorded: bool = False  # its outcome is counted (tandem_gateway_requests_total)
    prompt_tokens: int = 0  # the prompt sent, in tokens
    streamed_tokens: int = 0  # the answer's tokens so far (chunks() counts them)
    counted_exactly: bool = True  # every chunk of text came with its tokens' ids (an HTTP backend's do not)

    async def chunks(self) -> AsyncIterator[worker_pb2.GenerateChunk]:
        """The answer's chunks; a BackendError when the backend goes silent mid-answer (hung, not dead)."""
        self._count(self.first)
        yield self.first
        while True:
            try:
                async with asyncio.timeout(self.idle_timeout_s):  # a timer, not a task per chunk
                    chunk = await anext(self.rest)
            except StopAsyncIteration:
                return
            except TimeoutError as exc:
                self.backend.breaker.record_failure()
                raise BackendError.ours(
                    self.backend.endpoint, grpc.StatusCode.DEADLINE_EXCEEDED,
                    f"no token for {self.idle_timeout_s:g} s mid-answer",
                ) from exc  # fmt: skip
            self._count(chunk)
            yield chunk

    def _count(self, chunk: worker_pb2.GenerateChunk) -> None:
        """The answer's tokens a chunk carries; an HTTP backend's, text without its ids, counts as one (as most such
        servers stream a token an event), and the count is no longer exact."""
        if chunk.text and not chunk.token_ids:
            self.counted_exactly = False
        self.streamed_tokens += len(chunk.token_ids) or (1 if chunk.text else 0)

    async def aclose(self) -> None:
        await self.rest.aclose()


async def dispatch(
    policy: Policy,
    registry: BackendRegistry,
    features: RequestFeatures,
    request: worker_pb2.GenerateRequest,
    timeout_s: float,
    first_token_deadline_s: float = 30.0,
    attempt_timeout_s: float = 10.0,
    hints: PrefixHints | None = None,
    prompt_ids: Sequence[int] | None = None,
) -> RoutedStream:
    """Start the request on the best allowed backend; retry others until a first token or the deadline.

    Each attempt may wait `attempt_timeout_s` for its first token, so one stalled
    backend cannot use up the whole `first_token_deadline_s`. `prompt_ids`: the prompt as the caller holds it (a
    list), for the prefix hints; without it the request's repeated field is read, ~0.07 µs a token in Python (2.4 ms
    of the event loop at 32k tokens, where slicing a list's first 4,096 costs ~10 µs).
    """
    decision = decide(policy, features)  # the rule and its pools first: they say which pools to gather
    if decision.blocked_pools:
        metrics.PRIVACY_BLOCKS.labels(decision.rule).inc()
    request.private = decision.is_private
    started = time.perf_counter()
    ids = request.prompt_token_ids if prompt_ids is None else prompt_ids
    prompt = PromptKey(request.cache_salt or request.tenant, ids)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + first_token_deadline_s
    failures: list[str] = []
    attempts = 0
    while True:  # once, unless every backend is left out while one is being probed (below)
        gathered = await gather_pools(
            registry, policy, decision.pools, prompt, privacy.hints_for(decision.is_private, hints)
        )
        hinted = [pool for pool, hashes in gathered.hashes.items() if hashes]
        plan = plan_route(policy, features, gathered.candidates, next(_turns), decision, hinted)
        metrics.ROUTING_DECISION.observe(time.perf_counter() - started)
        metrics.observe_plugins(plan)
        for pool in plan.pools:
            hashes = gathered.hashes[pool.pool]
            for candidate in pool.ranked:
                backend = gathered.backends[pool.pool][candidate.endpoint]
                label = gathered.labels[pool.pool][candidate.endpoint]
                remaining = deadline - loop.time()
                if remaining <= 0:
                    failures.append(f"gave up after {first_token_deadline_s:g} s without a first token")
                    raise NoBackend(_no_backend_message(decision, failures))
                attempts += 1
                if hashes:
                    # Now, so the next request sharing the prefix follows, through any replica.
                    hints.record(backend.endpoint, hashes, candidate.prefix_match_blocks)
                # Queued behind others of ours at the last backend the plan has (an edge agent answers one at a time:
                # a batch's prompts, n choices, other callers): giving up early would leave nothing to try, so it waits
                # its turn up to the deadline.
                queued_at_last = backend.inflight > 0 and pool is plan.pools[-1] and candidate is pool.ranked[-1]
                wait_s = remaining if queued_at_last else min(attempt_timeout_s, remaining)
                # One span per attempt, up to its first token; the gRPC client span is its child.
                with tracer.start_as_current_span("gateway.backend_call") as span:
                    span.set_attribute("tandem.pool", pool.pool)
                    span.set_attribute("tandem.backend", backend.endpoint)
                    span.set_attribute("tandem.attempt", attempts)
                    stream = backend.generate(request, timeout_s)
                    try:
                        async with asyncio.timeout(wait_s):  # a timer on this task: wait_for would start another task
                            first = await anext(stream)
                    except TimeoutError:
                        await stream.aclose()
                        busy = backend.inflight > 0  # it is answering others of ours: queued behind them, not failing
                        if not busy:  # (a hung one fails its health polls, and routing leaves it then)
                            backend.breaker.record_failure()
                        said = f"no first token within {wait_s:.1f} s" + (
                            f" (busy answering {backend.inflight} other request(s))" if busy else ""
                        )
                        failures.append(f"{label}: {said}")
                        log.warning("backend %s (%s): %s", backend.endpoint, label, said)
                        span.set_attribute("tandem.outcome", "timeout")
                        continue
                    except BackendError as exc:
                        await stream.aclose()
                        span.set_attribute("tandem.outcome", "error")
                        if not exc.is_retryable:
                            raise BadRequest(hide_addresses(exc.details, exc.endpoint)) from exc
                        log.warning("backend %s (%s) failed before its first token: %s", backend.endpoint, label, exc)
                        failures.append(exc.told(label))
                        continue
                    span.set_attribute("tandem.outcome", "first_token")
                if attempts > 1:
                    metrics.FALLBACKS.labels(decision.rule).inc()
                predicted = 0
                if hashes:
                    predicted = candidate.prefix_match_blocks * (
                        candidate.block_size_tokens or DEFAULT_BLOCK_SIZE_TOKENS
                    )
                    metrics.PREFIX_TOKENS.labels(pool.pool, "predicted").inc(predicted)
                return RoutedStream(
                    pool.pool, decision.rule, backend, label, first, stream, request.tenant, predicted,
                    prompt_tokens=len(request.prompt_token_ids),
                )  # fmt: skip
            if pool.ranked:
                failures.append(f"pool {pool.pool!r}: no backend left to try")
            else:
                failures.append(f"pool {pool.pool!r}: no backend may serve now ({_why_none(pool, gathered)})")
        probing = _left_out_for_a_probe(plan, gathered) if not attempts else []
        if probing and (left := deadline - loop.time()) > 0:
            # Every backend left out, one of them because another request is probing it (half-open after failures in
            # a row): its verdict is a first token away. A request beside the probe after a worker's restart was a 503
            # at once, the worker back (a review); now it waits for the verdict and plans again.
            await _a_probe_settles(probing, left)
            started, failures = time.perf_counter(), []
            continue
        raise NoBackend(_no_backend_message(decision, failures), headers=_retry_after(plan, gathered))


def _left_out_for_a_probe(plan: RoutePlan, gathered: Gathered) -> list:
    """The backends left out only because another request is probing them: by the `healthy` filter, with no
    problem of their own, their breaker's one slot taken. Not one left out for privacy or a failing health check: a
    private request waited out another request's probe of a backend it could never use, then had the wrong reason
    (a review)."""
    found = []
    for pool in plan.pools:
        backends = gathered.backends[pool.pool]
        for candidate in pool.ranking.candidates:
            backend = backends.get(candidate.endpoint)
            if (
                backend is not None
                and backend.problem is None
                and pool.ranking.dropped.get(id(candidate)) == "healthy"
                and backend.breaker.probing()
            ):
                found.append(backend)
    return found


async def _a_probe_settles(backends: list, timeout_s: float) -> None:
    """Returns when the probe of one of `backends` has its verdict, or after `timeout_s`."""
    waits = [asyncio.ensure_future(backend.breaker.probe_settled()) for backend in backends]
    try:
        await asyncio.wait(waits, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()


def _why_none(pool: PoolPlan, gathered: Gathered) -> str:
    """Why a pool's backends were left out, counted by reason for the caller (`2 failing their health checks, 1 with
    its circuit breaker open, probed again in 4.2 s`); each backend by address in the gateway's log only: a caller
    learns no internal address. A private request's 503 said only "no healthy backend left" (an edge review)."""
    backends = gathered.backends[pool.pool]
    counted: Counter[str] = Counter()
    soonest = math.inf
    for candidate in pool.ranking.candidates:
        backend = backends.get(candidate.endpoint)
        reason = pool.ranking.dropped.get(id(candidate), "not ranked")
        if backend is not None and backend.problem:
            said, why = "failing its health checks", backend.problem
        elif backend is not None and (wait := backend.breaker.seconds_to_probe()) > 0:
            said, why, soonest = (
                "with its circuit breaker open",
                f"breaker open, probed in {wait:.1f} s",
                min(soonest, wait),
            )
        elif backend is not None and backend.breaker.current_state() != CLOSED:
            said = why = "being probed after failures in a row"
        elif reason.startswith("privacy") and candidate.kind is None:
            said = why = "not heard from yet"
        elif reason.startswith("privacy"):
            said, why = f"reporting kind={candidate.kind}, not edge", reason
        else:
            said = why = f"left out by {reason}"
        counted[said] += 1
        log.warning(
            "pool %r: backend %s left out: %s", pool.pool, backend.named if backend else candidate.endpoint, why
        )
    if not counted:
        return "it has no backends"
    parts = [f"{n} {_THEIR.get(said, said) if n > 1 else said}" for said, n in counted.most_common()]
    return ", ".join(parts) + (f", probed again in {soonest:.1f} s" if soonest < math.inf else "")


_THEIR = {  # `2 failing their health checks`
    "failing its health checks": "failing their health checks",
    "with its circuit breaker open": "with their circuit breakers open",
}


PROBE_IN_FLIGHT_RETRY_S = 1


def _retry_after(plan: RoutePlan, gathered: Gathered) -> dict[str, str] | None:
    """Retry-After for a 503 where every backend left out waits on its breaker: when the first is probed again, or
    1 s where another request's probe is in flight (its verdict outlived this request's wait; that 503 said nothing
    of when to come back)."""
    waits = [
        PROBE_IN_FLIGHT_RETRY_S if backend.breaker.probing() else backend.breaker.seconds_to_probe()
        for pool in plan.pools
        if not pool.ranked
        for backend in gathered.backends[pool.pool].values()
    ]
    if waits and min(waits) > 0:
        return {"Retry-After": str(math.ceil(min(waits)))}
    return None


def _no_backend_message(decision: Decision, failures: list[str]) -> str:
    parts = [f"no backend could serve this request (rule {decision.rule!r})"]
    if decision.is_private:
        never = (
            f"; cloud pool(s) {list(decision.blocked_pools)} are never used for it" if decision.blocked_pools else ""
        )
        parts.append(f"private request: only edge pools may serve it{never}")
    if not decision.pools:
        parts.append("no allowed pool is left")
    parts.extend(failures)
    return "; ".join(parts)
