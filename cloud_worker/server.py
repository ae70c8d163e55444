"""`tandem cloud-worker`: load a checkpoint, build the paged engine, serve it over the Worker gRPC service."""

import asyncio
import logging
from pathlib import Path

import torch

from cloud_worker.engine.block_manager import BlockManager
from cloud_worker.engine.config import EngineConfig
from cloud_worker.engine.host_memory import keep_freed_memory
from cloud_worker.engine.llm_engine import PagedEngine
from cloud_worker.engine.model_runner import ModelRunner
from cloud_worker.engine.scheduler import SchedulerConfig
from cloud_worker.hint_publisher import HintPublisher
from cloud_worker.layers.packed_linear import pack_linears
from cloud_worker.loader import load_model, read_config
from cloud_worker.models.llama import LlamaForCausalLM
from cloud_worker.parallel.ranks import TensorParallelPeers, rank_device
from cloud_worker.parallel.tensor_parallel import apply_tp, check_divisible_config
from cloud_worker.quantization import quantize_int8
from kernels import cpu_extension
from proto.prefix_hints import DEFAULT_HINT_TTL_S
from tandem.checkpoint import load_tokenizer, model_id_for
from tandem.embedded_http import serve_http
from tandem.telemetry import setup_tracing, shutdown_tracing
from tandem.worker_metrics import metrics_app
from tandem.worker_service import serve

log = logging.getLogger(__name__)


def default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


def model_dtype(device: str) -> torch.dtype:
    """fp32 on CPU; bf16 on CUDA where the card has it, else fp16."""
    if device.startswith("cuda"):
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    return torch.float32


def prepare_model(model_dir: Path, config: EngineConfig, rank: int = 0) -> LlamaForCausalLM:
    """Load, then the transforms: this rank's tensor-parallel shard, quantization, then CPU weight packing."""
    model = load_model(model_dir, dtype=model_dtype(config.device), device=rank_device(config, rank))
    apply_tp(model, rank, config.tensor_parallel_size)
    if config.quantize == "int8":
        quantize_int8(model)
    if config.device == "cpu" and config.cpu_linear == "auto":
        pack_linears(model)
    return model


def build_engine(
    model_dir: Path, model_id: str | None = None, config: EngineConfig | None = None, on_block_events=None
) -> PagedEngine:
    config = config or EngineConfig(device=default_device())
    if config.device == "cpu":
        keep_freed_memory()
        cpu_extension.extension()  # load (or report the lack of) the C++ kernels before serving
    model_config = read_config(model_dir)
    if config.tensor_parallel_size > 1:
        check_divisible_config(model_config, config.tensor_parallel_size)
    num_blocks = config.num_blocks_for(model_config, model_dtype(config.device).itemsize)
    peers = TensorParallelPeers(model_dir, config, num_blocks) if config.tensor_parallel_size > 1 else None
    model = prepare_model(model_dir, config)
    runner = ModelRunner(
        model,
        num_blocks,
        config.block_size_tokens,
        peers,
        config.decode_graph_mode(),
        model.config.max_position_embeddings,
        config.max_num_seqs,
    )
    return PagedEngine(
        runner,
        BlockManager(num_blocks, config.block_size_tokens),
        SchedulerConfig(config.max_num_batched_tokens, config.max_num_seqs),
        load_tokenizer(model_dir),
        eos_token_ids=model.config.eos_token_ids,
        model_id=model_id_for(model_dir, model_id),
        max_context_tokens=model.config.max_position_embeddings,
        execution_provider=f"torch-{config.device}" + (f" tp={config.tensor_parallel_size}" if peers else ""),
        on_block_events=on_block_events,
    )


def run(
    model_dir: Path,
    host: str,
    port: int,
    model_id: str | None = None,
    config: EngineConfig | None = None,
    redis_url: str | None = None,
    worker_id: str | None = None,
    hint_ttl_s: float = DEFAULT_HINT_TTL_S,
    metrics_port: int | None = None,
    serve_openai: bool = False,
) -> None:
    setup_tracing("tandem-cloud-worker")
    model_id = model_id_for(model_dir, model_id)
    publisher = None
    if redis_url:
        worker_id = worker_id or f"{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
        publisher = HintPublisher(redis_url, model_id, worker_id, hint_ttl_s)
        log.info("publishing prefix hints to Redis as worker %s (ttl %.0f s)", worker_id, hint_ttl_s)
    else:
        log.info("REDIS_URL not set: prefix hints are not published (gateways route by their own history)")
    try:
        engine = build_engine(model_dir, model_id, config, publisher.publish if publisher else None)
        background = None
        if metrics_port:
            app = metrics_app(engine)
            if serve_openai:  # opened in so many words: no key is checked here, an inference gateway is in front
                from gateway.api.engine_app import add_openai_routes
                from gateway.chat_tokenizer import ChatTokenizer

                add_openai_routes(app, engine, ChatTokenizer(model_dir), model_id, private=False, require_model=True)
                log.info("serving OpenAI chat completions on :%d (--serve-openai, no API key)", metrics_port)
            background = lambda: serve_http(app, host, metrics_port)  # noqa: E731
        asyncio.run(serve(engine, host, port, background))
    finally:
        if publisher:
            publisher.close()
        shutdown_tracing()
