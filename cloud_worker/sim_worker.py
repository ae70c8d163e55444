"""`tandem sim-worker`: the engine's scheduler and block manager with a simulated model.

Everything but the forward pass is the real engine: continuous batching,
chunked prefill, the block manager with prefix caching and LRU eviction, the
block events published to Redis as prefix hints, the Stats it reports. The
forward pass is replaced by a sleep: `prefill_us_per_token` for every prompt
token the cache did not serve, `decode_us_per_token` for every output token.
So one machine can run a 16-worker pool whose hit rates and queueing are
honest: they come from each worker's own block manager, not from what a
router believes.

It serves the `Worker` gRPC service (for Tandem gateways) and, on
`--http-port`, the subset of SGLang's HTTP API that sglang-router routes to
(`/generate`, `/health`, `/get_model_info`, `/get_server_info`, `/v1/models`).
"""

import asyncio
import json
import logging
import time
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from cloud_worker.engine.block_manager import BlockManager
from cloud_worker.engine.config import EngineConfig
from cloud_worker.engine.llm_engine import PagedEngine
from cloud_worker.engine.scheduler import ScheduledSeq
from cloud_worker.hint_publisher import HintPublisher
from proto.prefix_hints import DEFAULT_HINT_TTL_S, default_worker_id, worker_id_for
from serving.checkpoint import load_tokenizer
from serving.embedded_http import serve_http
from serving.engine_api import GenerationRequest, RequestRejected, SamplingParams
from serving.telemetry import setup_tracing, shutdown_tracing
from serving.worker_service import serve

log = logging.getLogger(__name__)
SIM_TOKEN_BASE = 300  # simulated outputs cycle through ordinary token ids, never a stop token


class SimulatedRunner:
    """Stands in for ModelRunner: sleeps what the step would cost, returns made-up tokens."""

    def __init__(self, prefill_us_per_token: float, decode_us_per_token: float) -> None:
        self.prefill_s = prefill_us_per_token / 1e6
        self.decode_s = decode_us_per_token / 1e6
        self.busy_s = 0.0  # simulated compute so far: the work this worker was given

    def run(self, scheduled: list[ScheduledSeq]) -> tuple[list[int], list[float], list[tuple]]:
        prefill = sum(s.num_new_tokens for s in scheduled if s.num_new_tokens > 1 or s.seq.num_output_tokens == 0)
        decode = sum(1 for s in scheduled if s.num_new_tokens == 1 and s.seq.num_output_tokens > 0)
        cost_s = prefill * self.prefill_s + decode * self.decode_s
        time.sleep(cost_s)
        self.busy_s += cost_s
        tokens = [SIM_TOKEN_BASE + s.seq.num_tokens % 100 for s in scheduled if s.is_sampling]
        return tokens, [0.0] * len(tokens), [()] * len(tokens)

    def close(self) -> None:
        pass


def build_sim_engine(
    model_dir: Path,
    model_id: str,
    num_kv_blocks: int,
    block_size_tokens: int,
    prefill_us_per_token: float,
    decode_us_per_token: float,
    max_batched_tokens: int = 2048,
    on_block_events=None,
) -> PagedEngine:
    tokenizer = load_tokenizer(model_dir)
    return PagedEngine(
        SimulatedRunner(prefill_us_per_token, decode_us_per_token),
        BlockManager(num_kv_blocks, block_size_tokens),
        EngineConfig(max_num_batched_tokens=max_batched_tokens),
        tokenizer,
        eos_token_ids=(),
        model_id=model_id,
        max_context_tokens=1 << 20,
        vocab_size=tokenizer.get_vocab_size(),
        execution_provider="simulated",
        on_block_events=on_block_events,
    ).start()


def sglang_app(engine: PagedEngine, tokenizer, model_id: str) -> FastAPI:
    """The part of SGLang's HTTP API that sglang-router needs."""
    app = FastAPI(title="tandem sim-worker (SGLang-compatible subset)")
    counter = iter(range(1 << 62))

    @app.get("/health")
    @app.get("/health_generate")
    async def health() -> dict:
        return {}

    @app.get("/get_model_info")
    async def model_info() -> dict:
        return {"model_path": model_id, "tokenizer_path": model_id, "is_generation": True}

    @app.get("/get_server_info")
    async def server_info() -> dict:
        stats = engine.stats()
        return {
            "model_path": model_id,
            "max_total_num_tokens": stats.kv_blocks_total * stats.block_size_tokens,
            "busy_s": engine.runner.busy_s,
        }

    @app.get("/v1/models")
    async def models() -> dict:
        return {"object": "list", "data": [{"id": model_id, "object": "model", "owned_by": "tandem"}]}

    @app.post("/generate")
    async def generate(request: Request):
        body = await request.json()
        ids = body.get("input_ids") or tokenizer.encode(body.get("text") or "", add_special_tokens=False).ids
        params = body.get("sampling_params") or {}
        try:
            gen = GenerationRequest(
                f"sgl-{next(counter)}",
                tuple(ids),
                SamplingParams(max_tokens=int(params.get("max_new_tokens", 16)), ignore_eos=True),
            )
            stream = engine.generate(gen)
        except RequestRejected as exc:
            return JSONResponse({"error": {"message": str(exc)}}, status_code=400)

        async def chunks():
            text, out = "", 0
            async for chunk in stream:
                text += chunk.text
                out += len(chunk.token_ids)
                meta = {"prompt_tokens": len(ids), "completion_tokens": out}
                if chunk.usage is not None:
                    meta["cached_tokens"] = chunk.usage.cached_prompt_tokens
                    meta["finish_reason"] = {"type": chunk.finish_reason}
                yield {"text": text, "meta_info": meta}

        if body.get("stream"):

            async def sse():
                async for payload in chunks():
                    yield f"data: {json.dumps(payload)}\n\n"
                yield "data: [DONE]\n\n"

            return StreamingResponse(sse(), media_type="text/event-stream")
        last = None
        async for payload in chunks():
            last = payload
        return last

    return app


def run(
    model_dir: Path,
    host: str,
    port: int,
    http_port: int | None,
    model_id: str,
    num_kv_blocks: int,
    block_size_tokens: int,
    prefill_us_per_token: float,
    decode_us_per_token: float,
    redis_url: str | None = None,
    worker_id: str | None = None,
    hint_ttl_s: float = DEFAULT_HINT_TTL_S,
) -> None:
    setup_tracing("tandem-sim-worker")
    publisher = None
    worker_id = worker_id_for(worker_id) if worker_id else default_worker_id(host, port)  # as gateways read it
    if redis_url:
        publisher = HintPublisher(redis_url, model_id, worker_id, hint_ttl_s)
    engine = build_sim_engine(
        model_dir,
        model_id,
        num_kv_blocks,
        block_size_tokens,
        prefill_us_per_token,
        decode_us_per_token,
        on_block_events=publisher.publish if publisher else None,
    )
    background = None
    if http_port:
        app = sglang_app(engine, load_tokenizer(model_dir), model_id)

        def background():
            return serve_http(app, host, http_port)

    try:
        asyncio.run(serve(engine, host, port, background, hint_worker_id=worker_id if publisher else ""))
    finally:
        if publisher:
            publisher.close()
        shutdown_tracing()
