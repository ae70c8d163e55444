"""The `Worker` gRPC service over an `Engine`, shared by both worker kinds.

It only translates between protobuf and the engine's typed data; scheduling
and memory are the engine's. Errors map to gRPC status here and nowhere else.
"""

import asyncio
import contextlib
import logging
import math
import os
import signal
import time
from collections.abc import Awaitable, Callable

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from opentelemetry import trace
from opentelemetry.instrumentation.grpc import aio_server_interceptor, filters

from proto.gen import worker_pb2, worker_pb2_grpc
from serving import heap, spans
from serving.engine_api import Engine, GenerationChunk, GenerationRequest, RequestRejected, SamplingParams, Usage
from serving.tls_files import read_files, tls_files_problem

log = logging.getLogger(__name__)
tracer = spans.get_tracer(__name__)  # the SDK's spans at a fraction of their cost (serving/spans.py)
SHUTDOWN_GRACE_S = 5.0  # a worker's default; TANDEM_SHUTDOWN_GRACE_S (read as the gateway reads it) sets another


def shutdown_grace_s() -> float:
    """How long requests in flight get to finish when the worker stops: 5 s cut every stream a rolling update
    found running, where the pod gave the worker 60 (a review of the manifests; they set 50)."""
    raw = os.environ.get("TANDEM_SHUTDOWN_GRACE_S", "")
    try:
        value = float(raw) if raw else SHUTDOWN_GRACE_S
    except ValueError:
        raise SystemExit(f"TANDEM_SHUTDOWN_GRACE_S={raw!r}: seconds, a number from 0") from None
    if not 0 <= value < math.inf:
        raise SystemExit(f"TANDEM_SHUTDOWN_GRACE_S={raw!r}: seconds, a number from 0")
    return value


def request_from_proto(msg: worker_pb2.GenerateRequest) -> GenerationRequest:
    s = msg.sampling
    if not s.HasField("max_tokens"):  # proto3 reads an absent field as 0, which is an answer of the prompt alone
        raise RequestRejected("sampling.max_tokens is required (0 asks for the prompt alone)")
    sampling = SamplingParams(
        temperature=s.temperature,
        top_p=s.top_p if s.top_p != 0 else 1.0,  # proto3: 0 is unset; anything else (NaN too) is checked
        top_k=s.top_k,
        min_p=s.min_p,
        seed=s.seed if s.HasField("seed") else None,
        max_tokens=s.max_tokens,
        stop_token_ids=tuple(s.stop_token_ids),
        stop_strings=tuple(s.stop_strings),
        ignore_eos=s.ignore_eos,
        presence_penalty=s.presence_penalty,
        frequency_penalty=s.frequency_penalty,
        repetition_penalty=s.repetition_penalty or 1.0,  # proto3: 0 is unset
        logit_bias=tuple(sorted(s.logit_bias.items())),
        top_logprobs=s.top_logprobs if s.HasField("top_logprobs") else None,
        grammar=s.grammar,
        prompt_logprobs=s.prompt_logprobs if s.HasField("prompt_logprobs") else None,
    )
    return GenerationRequest(
        request_id=msg.request_id,
        prompt_token_ids=tuple(msg.prompt_token_ids),
        sampling=sampling,
        tenant=msg.tenant,
        priority=msg.priority,
        private=msg.private,
        cache_salt=msg.cache_salt,
    )


def chunk_to_proto(chunk: GenerationChunk) -> worker_pb2.GenerateChunk:
    out = worker_pb2.GenerateChunk(
        token_ids=chunk.token_ids,
        text=chunk.text,
        finish_reason=chunk.finish_reason or "",
        logprobs=chunk.logprobs,
        top_logprobs=[_top(top) for top in chunk.top_logprobs],
        prompt_logprobs=chunk.prompt_logprobs,
        prompt_top_logprobs=[_top(top) for top in chunk.prompt_top_logprobs],
    )
    if chunk.usage is not None:
        u = chunk.usage
        out.usage.CopyFrom(
            worker_pb2.Usage(
                prompt_tokens=u.prompt_tokens,
                completion_tokens=u.completion_tokens,
                cached_prompt_tokens=u.cached_prompt_tokens,
            )
        )
    return out


def _top(pairs) -> worker_pb2.TopLogprobs:
    return worker_pb2.TopLogprobs(token_ids=[t for t, _ in pairs], logprobs=[lp for _, lp in pairs])


def _phase_spans(usage: Usage, started_ns: int, first_ns: int, ended_ns: int) -> None:
    """The request's phases as child spans of the RPC, from the engine's own timings.

    Queue wait runs to the first scheduling; prefill to the first token (which prefill yields); decode to the end.
    """
    scheduled_ns = min(started_ns + int(usage.queue_wait_s * 1e9), first_ns)
    phases = (
        ("worker.queue", started_ns, scheduled_ns, {}),
        (
            "worker.prefill",
            scheduled_ns,
            first_ns,
            {"tandem.prompt_tokens": usage.prompt_tokens, "tandem.cached_prompt_tokens": usage.cached_prompt_tokens},
        ),
        ("worker.decode", first_ns, ended_ns, {"tandem.completion_tokens": usage.completion_tokens}),
    )
    for name, start, end, attributes in phases:
        tracer.start_span(name, start_time=start, attributes=attributes).end(end_time=max(start, end))


MAX_STATUS_BYTES = 2000  # gRPC's status message travels in a header: over 8 KiB it may, over 16 KiB it does fail


def status_details(message: str) -> str:
    """A status message that reaches the gateway as sent: cut to MAX_STATUS_BYTES of UTF-8 (percent-encoded on the
    wire, up to 6 KB). A 20 KB one (a grammar engine's parser state) arrived as RESOURCE_EXHAUSTED, a backend's
    failure: the request's own fault opened the breakers of every backend it was retried on (a review)."""
    data = message.encode(errors="replace")
    if len(data) <= MAX_STATUS_BYTES:
        return message
    return data[: MAX_STATUS_BYTES - 3].decode(errors="ignore") + "…"


class WorkerServicer(worker_pb2_grpc.WorkerServicer):
    def __init__(self, engine: Engine, hint_worker_id: str = "") -> None:
        """`hint_worker_id`: the id its prefix hints are published under ("" where none are), in Stats, so a gateway
        that dials it by another name says its hints never match."""
        self._engine = engine
        self._model = engine.stats().model_id  # fixed for the process's life
        self._hint_worker_id = hint_worker_id

    async def Generate(self, request, context: grpc.aio.ServicerContext):
        if request.private and self._engine.kind == "cloud":
            # Defence in depth: the gateway never sends these; if it ever does, refuse.
            await context.abort(grpc.StatusCode.PERMISSION_DENIED, "private requests never run on a cloud worker")
        if request.model and request.model != self._model:
            # The gateway picked by stats polled earlier; a worker swapped since for another model's says so.
            await context.abort(
                grpc.StatusCode.FAILED_PRECONDITION, f"this worker runs model {self._model!r}, not {request.model!r}"
            )
        try:
            gen_request = request_from_proto(request)
        except RequestRejected as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, status_details(str(exc)))
        span = trace.get_current_span()
        span.set_attribute("tandem.worker.kind", self._engine.kind)
        span.set_attribute("tandem.execution_provider", self._engine.execution_provider)
        span.set_attribute("tandem.prompt_tokens", len(gen_request.prompt_token_ids))
        started_ns = time.time_ns()
        first_ns = None
        stream = self._engine.generate(gen_request)
        try:
            async for chunk in stream:
                if first_ns is None:
                    first_ns = time.time_ns()
                if chunk.usage is not None:
                    span.set_attribute("tandem.completion_tokens", chunk.usage.completion_tokens)
                    span.set_attribute("tandem.cached_prompt_tokens", chunk.usage.cached_prompt_tokens)
                    span.set_attribute("tandem.finish_reason", chunk.finish_reason or "")
                    _phase_spans(chunk.usage, started_ns, first_ns, time.time_ns())
                yield chunk_to_proto(chunk)
        except RequestRejected as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, status_details(str(exc)))
        except Exception as exc:  # noqa: BLE001 - the engine failed the request (its step; said in the log there)
            # grpc wrote a traceback for each request in flight and answered UNKNOWN with the error's own text (a
            # review): the request failed here, not for anything in it, and another worker may serve it
            said = f"the worker's engine failed this request ({type(exc).__name__}: {str(exc)[:200]})"
            log.warning("request %s: %s", request.request_id[:64], said)
            await context.abort(grpc.StatusCode.UNAVAILABLE, status_details(said))
        finally:
            await stream.aclose()  # a cancelled RPC frees the sequence at once

    async def Stats(self, request, context):
        s = self._engine.stats()
        return worker_pb2.StatsReply(
            model_id=s.model_id,
            kind=s.kind,
            execution_provider=s.execution_provider,
            queue_depth=s.queue_depth,
            running=s.running,
            kv_blocks_total=s.kv_blocks_total,
            kv_blocks_used=s.kv_blocks_used,
            block_size_tokens=s.block_size_tokens,
            prefix_hit_tokens=s.prefix_hit_tokens,
            prefix_query_tokens=s.prefix_query_tokens,
            tokens_per_s=s.tokens_per_s,
            memory_bytes=s.memory_bytes,
            memory_watermark_bytes=s.memory_watermark_bytes,
            max_context_tokens=s.max_context_tokens,
            requests_total=s.requests_total,
            hint_worker_id=self._hint_worker_id,
        )


class _CancelledStreamDetach(logging.Filter):
    """OpenTelemetry's gRPC server interceptor keeps its span current across a streamed answer; when the client
    leaves, the stream is closed from another asyncio context, the span still ends, and only resetting the dead
    context fails: logged as an ERROR with a traceback, twice per vanished client (a review counted 26). That one
    record is dropped; any other failure to detach is still logged."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not (
            record.getMessage() == "Failed to detach context"
            and isinstance(exc, ValueError)
            and "was created in a different Context" in str(exc)
        )


TLS_CERT_ENV, TLS_KEY_ENV, TLS_CLIENT_CA_ENV = (
    "TANDEM_TLS_CERT_FILE",
    "TANDEM_TLS_KEY_FILE",
    "TANDEM_TLS_CLIENT_CA_FILE",
)


def server_tls(env) -> grpc.ServerCredentials | None:
    """The worker's TLS from its environment: a certificate and key (PEM files) make it serve TLS only; a client CA
    as well makes it take only clients with a certificate that CA signed (mutual TLS). None: plaintext. A bad setting
    stops the worker with the variable named (gRPC's own error is a bind failure that names no file)."""
    cert, key, client_ca = env.get(TLS_CERT_ENV), env.get(TLS_KEY_ENV), env.get(TLS_CLIENT_CA_ENV)
    if not cert and not key:
        if client_ca:
            raise SystemExit(f"{TLS_CLIENT_CA_ENV} asks clients for certificates over TLS: set {TLS_CERT_ENV} and "
                             f"{TLS_KEY_ENV} too")  # fmt: skip
        return None
    if not (cert and key):
        raise SystemExit(f"{TLS_CERT_ENV} and {TLS_KEY_ENV} go together: set both, or neither for plaintext")
    client_ca = client_ca or None
    found = tls_files_problem((TLS_CLIENT_CA_ENV, client_ca), (TLS_CERT_ENV, cert), (TLS_KEY_ENV, key))
    if found is not None:
        raise SystemExit(f"{found[0]}: {found[1]}")
    roots, private_key, chain = read_files(client_ca, key, cert)
    return grpc.ssl_server_credentials(
        [(private_key, chain)], root_certificates=roots, require_client_auth=roots is not None
    )


async def serve(
    engine: Engine,
    host: str,
    port: int,
    background: Callable[[], Awaitable[None]] | None = None,
    hint_worker_id: str = "",
) -> None:
    """Serve until SIGTERM or SIGINT, then drain in-flight RPCs for a few seconds.

    `background` (e.g. an edge agent's registration loop) runs once serving has started; `hint_worker_id`: the id
    its prefix hints are published under, said in Stats.
    """
    logging.getLogger("opentelemetry.context").addFilter(_CancelledStreamDetach())
    # Health polls are not requests: tracing them would bury real traces.
    untraced = filters.any_of(filters.method_name("Stats"), filters.service_prefix("grpc.health"))
    # No SO_REUSEPORT (gRPC sets it by default on Linux): a second worker on a port in use would share it silently,
    # the kernel splitting connections between it and a leftover one, where it must fail and say so.
    server = grpc.aio.server(
        interceptors=[aio_server_interceptor(filter_=filters.negate(untraced))], options=[("grpc.so_reuseport", 0)]
    )
    worker_pb2_grpc.add_WorkerServicer_to_server(WorkerServicer(engine, hint_worker_id), server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    address = f"{host}:{port}"
    credentials = server_tls(os.environ)
    try:  # grpcio raises where it returned 0 before
        bound = server.add_secure_port(address, credentials) if credentials else server.add_insecure_port(address)
    except RuntimeError:
        bound = 0
    if bound == 0:
        raise SystemExit(f"cannot listen on {address}: port in use?")
    grace_s = shutdown_grace_s()
    await server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):  # before it says it is ready: a stop sent then is a drain, not a kill
        loop.add_signal_handler(sig, stop.set)
    for service in ("", "tandem.worker.v1.Worker"):
        await health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    heap.settle()  # the model's and start-up's objects out of every later collection (serving/heap.py)
    stats = engine.stats()
    transport = ("mutual TLS" if os.environ.get(TLS_CLIENT_CA_ENV) else "TLS") if credentials else "plaintext"
    log.info(
        "%s worker serving %s on %s (%s, %s)", stats.kind, stats.model_id, address, stats.execution_provider, transport
    )
    print(
        f"tandem {stats.kind} worker ready on {address} model={stats.model_id} ep={stats.execution_provider} "
        f"transport={transport}",
        flush=True,
    )

    task = asyncio.create_task(background()) if background else None
    await stop.wait()
    if task:
        task.cancel()
    await health_servicer.enter_graceful_shutdown()
    await server.stop(grace_s)
    if task:  # let it finish stopping (an embedded uvicorn's shutdown), or asyncio.run cancels it mid-way
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
    engine.close()
