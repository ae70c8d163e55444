"""One backend as the gateway sees it: health, circuit breaker, and the privacy guard.

Subclasses supply the wire (`_fetch_stats`, `_stream`): `GrpcWorkerBackend` for
Tandem workers, `HttpWorkerBackend` for OpenAI-compatible servers. Errors use
gRPC status codes as their one vocabulary.
"""

import logging
import math
import re
import time
from collections.abc import AsyncIterator
from urllib.parse import urlparse

import grpc

from gateway import metrics, privacy
from gateway.backends.circuit_breaker import CLOSED, HALF_OPEN, CircuitBreaker
from gateway.routing.candidate import RECENT_WINDOW_S, Candidate
from proto.gen import worker_pb2
from proto.prefix_hints import worker_id_for
from serving.sliding_count import SlidingCount

log = logging.getLogger(__name__)
_new_candidate = Candidate._make
_OWN_FIELDS = Candidate._fields.index("prompt_blocks")  # the backend's own; the rest are the request's prompt
STATS_TIMEOUT_S = 1.0
MAX_BLOCK_SIZE_TOKENS = 1 << 16  # a KV block size past this (or under 0) is no worker's: not hashed by
LATE_POLLS_UNHEALTHY = 2  # Stats polls in a row past their deadline that make a backend unhealthy
# Statuses that say the request never ran or the worker is gone: try another backend.
RETRYABLE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.FAILED_PRECONDITION,  # the worker runs another model than the request's (serving/worker_service.py)
}


class BackendError(Exception):
    def __init__(self, endpoint: str, code: grpc.StatusCode, details: str, said: str | None = None) -> None:
        """`details`: the whole, for the log; `said`: what a caller may read of it (None: the status alone). A
        backend's own words (gRPC's `ipv4:10.0.0.5:50051: Connection refused`, an HTTP server's error page naming
        its hosts) never reach a caller; the gateway's own (`ours`) do."""
        super().__init__(f"{endpoint}: {code.name}: {details}")
        self.endpoint, self.code, self.details, self.said = endpoint, code, details, said

    @classmethod
    def ours(cls, endpoint: str, code: grpc.StatusCode, details: str) -> "BackendError":
        """A failure in the gateway's own words (a breaker open, a silent stream), which a caller may read whole."""
        return cls(endpoint, code, details, said=details)

    def told(self, label: str) -> str:
        """What a caller reads of a backend's failure: the backend by its label (`registry.backend_label`), its
        status, and the gateway's own words where there are any; the log has the rest."""
        return f"{label}: {self.code.name}" + (f": {self.said}" if self.said else "")

    @property
    def is_retryable(self) -> bool:
        """A failure of the backend, worth another backend; the request's own fault (a bad value, a message
        over the size limit) is not: it would fail everywhere, and it says nothing about the backend."""
        return self.code in RETRYABLE and not self.is_request_fault

    @property
    def is_request_fault(self) -> bool:
        too_large = self.code == grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in self.details
        return too_large or self.code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.OUT_OF_RANGE)


# An address as gRPC's and HTTP clients' messages write one: `ipv4:10.0.0.5:50051`, `ipv6:%5B::1%5D:50051`,
# `http://10.0.0.5:8001/v1/models`, `[fd00::5]:50051`, `[fe80::1%25eth0]`, `::ffff:10.0.0.5`, any URL, a dotted name
# with a port (`vllm-3.vllm.svc:8000`). IPv6: hex groups with `::` or six colons and more, a digit in it (so `12:30:45`
# and `hyper::Error` stay). Every repeat is bounded and a scheme starts only where a word does: a long run of
# `a-a-a-…` made the unbounded scheme's scan quadratic (seconds of the event loop at 32 KB, a review).
_SCHEME = r"(?:(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{0,15}:/{0,3})?"  # `ipv4:`, `http://`, `dns:///`
_IPV4 = r"\d{1,3}(?:\.\d{1,3}){3}"
_V6 = rf"(?=[0-9a-f:]{{0,40}}\d)(?:[0-9a-f]{{0,4}}:){{2,7}}(?:{_IPV4}|[0-9a-f]{{0,4}})(?:%(?:25)?[a-z0-9_.-]{{1,32}})?"
_PATH = r"(?:/[^\s,;:'\"()<>]{0,512})?"
_ADDRESS = re.compile(
    r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]{0,15}://[^\s'\"<>()]{1,512}"  # any URL
    + "|"
    + _SCHEME
    + rf"(?:(?<![\d.]){_IPV4}(?![\d.])"
    + rf"|(?:\[|%5B){_V6}(?:\]|%5D)"
    + rf"|(?<![\w:])(?=[0-9a-f:]{{0,40}}::|(?:[0-9a-f]{{0,4}}:){{5}}){_V6}(?![\w:])"
    + r"|(?<![\w.-])[a-z0-9-]{1,63}(?:\.[a-z0-9-]{1,63}){1,8}(?=:\d))"  # a dotted name, where a port follows
    + r"(?::\d{1,5})?"
    + _PATH,
    re.IGNORECASE,
)
MAX_SAID_CHARS = 500


def hide_addresses(text: str, endpoint: str, most: int = MAX_SAID_CHARS) -> str:
    """`text` (a request's fault, in a backend's words: an HTTP server's 400, a worker's refusal) as a caller may read
    it: cut to `most` characters at a blank (a cut through an address left `… 10.1.`, a review), then the backend's
    address and any other written `<address>`. The gateway's log keeps the whole."""
    if len(text) > most:
        text = text[:most].rsplit(None, 1)[0] + " …"
    if host := urlparse(endpoint).hostname:  # a name (worker-0.workers.ns.svc); a one-word one (cloud) with its port
        port = r"(?::\d+)?(?![\w-])" if "." in host or ":" in host else r":\d+"
        text = re.sub(rf"{_SCHEME}(?<![\w.-]){re.escape(host)}{port}{_PATH}", "<address>", text, flags=re.IGNORECASE)
    return _ADDRESS.sub("<address>", text)


class WorkerBackend:
    tenants_share_its_cache = False  # a Tandem worker salts each tenant's prefixes (GenerateRequest.cache_salt)
    reports_load = True  # its Stats carry its queue and KV blocks (an OpenAI-compatible server's say nothing of them)

    def __init__(self, endpoint: str, model_id: str, pool_kind: str, breaker: CircuitBreaker | None = None) -> None:
        self.endpoint, self.model_id, self.pool_kind = endpoint, model_id, pool_kind
        self.worker_id = worker_id_for(endpoint)  # what its prefix hints are published under (host:port)
        self.labels: tuple[str, ...] = ()  # what callers are told of it (registry.backend_label), for the log
        self.breaker = breaker or CircuitBreaker()
        # Routing's view of it, kept between requests until something in it changes (see `candidate`).
        self._snapshot: Candidate | None = None
        self._snapshot_until = float("-inf")  # when it stops being current: -inf once something in it changed
        self.problem: str | None = None  # why it is unhealthy; None (optimistic) until a poll or call says otherwise
        self._told_block_size = 0  # a block size out of range it reported, once said
        self.stats = None
        self.inflight = 0
        # The gauge reads the count when scraped: no second counter to keep in step on every request.
        metrics.BACKEND_INFLIGHT.labels(endpoint).set_function(lambda: self.inflight)
        self._sent = SlidingCount(RECENT_WINDOW_S)  # requests this gateway sent it lately
        self._late_polls = 0  # Stats polls in a row that ran past their deadline
        self._told_hint_id = ""  # a hint id this backend publishes that is not the one dialled, once said

    @property
    def named(self) -> str:
        """Its address and labels, as the log names it (`grpc://10.0.0.5:50051 (cloud/0)`): a caller reports the label,
        an operator finds it here (a new user's trial: the health lines named the address alone)."""
        return f"{self.endpoint} ({', '.join(self.labels)})" if self.labels else self.endpoint

    @property
    def problem(self) -> str | None:
        """Why it is unhealthy; None while healthy."""
        return self._problem

    @problem.setter
    def problem(self, problem: str | None) -> None:
        self._problem = problem
        self._snapshot_until = float("-inf")

    @property
    def inflight(self) -> int:
        """Requests this gateway has open on it."""
        return self._inflight

    @inflight.setter
    def inflight(self, count: int) -> None:
        self._inflight = count
        self._snapshot_until = float("-inf")

    @property
    def stats(self) -> worker_pb2.StatsReply | None:
        """What the worker last reported (Stats); None until heard from."""
        return self._stats

    @stats.setter
    def stats(self, reply: worker_pb2.StatsReply | None) -> None:
        if reply is not None and (self._stats is None or self._stats.kind != reply.kind):
            if refusal := self._privacy_refusal(reply.kind):
                log.warning("backend %s: %s", self.named, refusal)
        self._stats = reply
        # Candidate's Stats fields, read off the message once per poll rather than once per request: a protobuf
        # field read is ~0.1 µs, six of them per candidate were a sixth of a 256-worker snapshot.
        self._reported = (
            (reply.kind, reply.queue_depth, reply.running, reply.kv_blocks_used, reply.kv_blocks_total,
             self._block_size(reply.block_size_tokens))
            if reply is not None else (None, 0, 0, 0, 0, 0)
        )  # fmt: skip
        self._snapshot_until = float("-inf")

    def _block_size(self, reported: int) -> int:
        """The KV block size prompts are hashed by for this backend's hints; 0 (the default's) for one out of range
        (a worker of another implementation reported -16, and hashing by it failed every request: a review)."""
        if 0 <= reported <= MAX_BLOCK_SIZE_TOKENS:
            return reported
        if self._told_block_size != reported:  # said once, not at every poll
            self._told_block_size = reported
            log.warning("backend %s reports a KV block size of %d tokens: not used (1 to %d)", self.named, reported,
                        MAX_BLOCK_SIZE_TOKENS)  # fmt: skip
        return 0

    @property
    def privacy_refusal(self) -> str | None:
        """Why private requests never go to this backend although its pool is an edge pool (it says it is not an
        edge backend), or None: said in the log and /readyz, where it was only a 503 to private callers."""
        return self._privacy_refusal(self._stats.kind) if self._stats is not None else None

    def _privacy_refusal(self, kind: str) -> str | None:
        if self.pool_kind == "edge" and kind != "edge":
            return f"reports kind={kind or '(none)'} in an edge pool: private requests never go to it"
        return None

    @property
    def is_healthy(self) -> bool:
        return self.problem is None

    @property
    def is_reporting(self) -> bool:
        """Healthy and heard from: what /readyz and /metrics call healthy, and what the autoscaling signals read."""
        return self.problem is None and self._stats is not None

    @property
    def block_size_tokens(self) -> int:
        """Its KV block size as it reports it (Stats); 0 until heard from."""
        return self._reported[5]

    def candidate(self, now: float) -> Candidate:
        """This backend as routing sees it at `now` (time.monotonic(), read once for a pool), holding none of the
        request's prompt: `gather` adds the match to the few that hold some (`with_prefix`).

        Kept between requests and built again only when something in it changed (health, Stats, requests open,
        a request sent or leaving the 5 s window) or while the circuit breaker is not closed (its state moves
        with time): building 256 per request was ~200 µs of a routing decision (bench/scaling.py)."""
        if now < self._snapshot_until and self.breaker.state == CLOSED:
            return self._snapshot
        breaker = self.breaker
        closed = breaker.state == CLOSED
        healthy = self._problem is None and (closed or breaker.can_send())
        sent = self._sent
        # Positionally, in Candidate's field order (gateway/routing/candidate.py): keywords cost ~0.5 µs a call.
        snapshot = _new_candidate((self.endpoint, healthy, *self._reported, self._inflight, sent.count(now), 0, 0, 0))
        if closed:
            self._snapshot, self._snapshot_until = snapshot, sent.next_change()
        return snapshot

    @staticmethod
    def with_prefix(snapshot: Candidate, prompt_blocks: int, prefix_match_blocks: int, prefix_recent: int) -> Candidate:
        """A backend's snapshot with how much of this request's prompt it holds."""
        return _new_candidate((*snapshot[:_OWN_FIELDS], prompt_blocks, prefix_match_blocks, prefix_recent))

    async def refresh(self) -> None:
        try:
            self.stats = await self._fetch_stats()
        except BackendError as exc:
            late = exc.code == grpc.StatusCode.DEADLINE_EXCEEDED
            self._late_polls = self._late_polls + 1 if late else 0
            if late and self._late_polls < LATE_POLLS_UNHEALTHY and self.problem is None:
                # One late answer is no verdict: a gateway whose event loop was held a second (a large body, a
                # compile) misses every backend's deadline at once, and marking them all unhealthy made 503s for
                # everyone. A hung worker misses the next one too.
                return
            self._set_problem(f"{exc.code.name}: {exc.details}")
            return
        self._late_polls = 0
        published = self.stats.hint_worker_id
        if published and published != worker_id_for(self.endpoint) and published != self._told_hint_id:
            # Hints are keyed by the address the gateway dials: under another name they never match (a review:
            # a policy naming grpc://localhost:50401, workers publishing 127.0.0.1:50401, said nothing)
            self._told_hint_id = published
            log.warning("backend %s publishes its prefix hints as %r, not as %r that this gateway dials: they never "
                        "match here; start it with --worker-id %s", self.named, published,
                        worker_id_for(self.endpoint), worker_id_for(self.endpoint))  # fmt: skip
        if self.stats.model_id != self.model_id:
            # Its tokenizer may differ from ours: the token ids we send would mean other text.
            self._set_problem(f"serves model {self.stats.model_id!r}, this gateway serves {self.model_id!r}")
        else:
            self._set_problem(None)

    def _set_problem(self, problem: str | None) -> None:
        if problem != self.problem:
            if problem is None:
                log.info("backend %s is healthy", self.named)
            else:
                log.warning("backend %s unhealthy: %s", self.named, problem)
        self.problem = problem

    async def generate(
        self, request: worker_pb2.GenerateRequest, timeout_s: float
    ) -> AsyncIterator[worker_pb2.GenerateChunk]:
        """Stream the worker's chunks; closing this iterator cancels the RPC."""
        # The last check before the wire. Routing never gets here; if it ever does, fail closed.
        privacy.check_before_wire(
            request.private, self.pool_kind, self.stats.kind if self.stats else None, self.endpoint
        )
        if not self.breaker.try_acquire():
            raise BackendError.ours(
                self.endpoint, grpc.StatusCode.UNAVAILABLE, "circuit breaker open after repeated failures"
            )
        probe = self.breaker.state == HALF_OPEN  # this request holds the breaker's one probe slot
        self.inflight += 1
        self._sent.add()  # (the line above has already marked the snapshot stale)
        answered = failed = False
        chunks = aiter(self._stream(request, timeout_s))
        # The backend's own time, counted, not timed: waiting on the client (a slow reader) is not the backend's, and
        # a wait that never ends is already timed by dispatch (the first token's attempt timeout, then
        # `RoutedStream`'s idle timeout): a second timer a token would be work done twice on the hot path.
        left = timeout_s
        try:
            while True:
                waiting = time.perf_counter()
                try:
                    chunk = await anext(chunks)
                except StopAsyncIteration:
                    break
                if (left := left - (time.perf_counter() - waiting)) < 0:
                    raise BackendError.ours(
                        self.endpoint,
                        grpc.StatusCode.DEADLINE_EXCEEDED,
                        f"no answer within {timeout_s:g} s of its own time (TANDEM_BACKEND_TIMEOUT_S)",
                    )
                if problem := malformed(chunk):
                    raise BackendError.ours(
                        self.endpoint, grpc.StatusCode.INTERNAL, f"a malformed answer: {problem}"
                    )  # the backend's fault, counted and tried elsewhere: it was a 500, never blamed (a review)
                if not answered:
                    answered = True
                    self.breaker.record_success()
                yield chunk
                if chunk.finish_reason:  # the answer's end: a chunk after it made a second finish (a review)
                    break
        except BackendError as exc:
            if exc.is_retryable and exc.code != grpc.StatusCode.CANCELLED:
                failed = True
                self.breaker.record_failure()
            raise
        finally:
            await chunks.aclose()
            self.inflight -= 1
            if not answered and not failed and probe:  # (another's probe keeps its slot: a review)
                self.breaker.release()  # left before any answer (client gone, or our deadline): no verdict

    async def _fetch_stats(self) -> worker_pb2.StatsReply:
        raise NotImplementedError

    def _stream(self, request: worker_pb2.GenerateRequest, timeout_s: float) -> AsyncIterator[worker_pb2.GenerateChunk]:
        raise NotImplementedError

    async def close(self) -> None:
        """Release connections."""


def malformed(chunk: worker_pb2.GenerateChunk) -> str | None:
    """What is wrong with a backend's chunk that no answer can carry, or None: a usage count below 0 (a Prometheus
    counter refused it: a 500 on every request the backend served), log-probabilities that are not one a token or
    not finite (JSON has no NaN), a token id below 0."""
    if chunk.HasField("usage"):
        u = chunk.usage
        if min(u.prompt_tokens, u.completion_tokens, u.cached_prompt_tokens) < 0:
            return "a usage count below 0"
    count = len(chunk.token_ids)
    if count and min(chunk.token_ids) < 0:
        return "a token id below 0"
    if not (chunk.logprobs or chunk.top_logprobs or chunk.prompt_logprobs):  # a chunk without them: done (per token)
        return None
    if chunk.logprobs and len(chunk.logprobs) != count:
        return f"{len(chunk.logprobs)} log-probabilities for {count} tokens"
    if chunk.top_logprobs and len(chunk.top_logprobs) != count:
        return f"{len(chunk.top_logprobs)} lists of alternatives for {count} tokens"
    for values in (chunk.logprobs, chunk.prompt_logprobs, *(t.logprobs for t in chunk.top_logprobs)):
        if values and not all(math.isfinite(v) for v in values):
            return "a log-probability that is no finite number"
    if any(len(t.token_ids) != len(t.logprobs) for t in chunk.top_logprobs):
        return "alternatives whose ids and log-probabilities differ in number"
    return None
