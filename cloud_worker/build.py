"""The cloud worker's composition root: a model and an engine built from a checkpoint and an EngineConfig.

The gRPC server (`server.py`), the tensor-parallel ranks (which are handed `prepare_model`, so `parallel/`
imports nothing above it), the benches and the tests all build here.
"""

import dataclasses
import logging
from pathlib import Path

import torch

from cloud_worker.engine.block_manager import BlockManager
from cloud_worker.engine.config import EngineConfig
from cloud_worker.engine.host_memory import keep_freed_memory
from cloud_worker.engine.llm_engine import PagedEngine
from cloud_worker.engine.model_runner import ModelRunner
from cloud_worker.layers.packed_linear import pack_linears
from cloud_worker.parallel.ranks import TensorParallelPeers
from cloud_worker.parallel.tensor_parallel import apply_tp, check_divisible_config
from cloud_worker.quantization import quantize_int8
from modeling.llama import LlamaForCausalLM
from modeling.loader import load_model, read_config
from serving.checkpoint import load_tokenizer, model_id_for
from tandem_kernels import cpu_extension
from tandem_kernels.dispatch import triton_refuses

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
    model = load_model(model_dir, dtype=model_dtype(config.device), device=config.rank_device(rank))
    apply_tp(model, rank, config.tensor_parallel_size)
    if config.quantize == "int8":
        quantize_int8(model)
    if config.device == "cpu" and config.cpu_linear == "auto":
        pack_linears(model)
    return model


def _check_gpus(config: EngineConfig) -> None:
    """ValueError where the GPUs asked for are not there: a traceback of 74-136 lines, or rank 0 waiting 120 s for
    a rank that could not start (a review)."""
    if not torch.cuda.is_available():
        raise ValueError(f"--device {config.device}: torch sees no CUDA device here (use --device cpu)")
    first, count, wanted = config.first_gpu(), torch.cuda.device_count(), config.tensor_parallel_size
    if first + wanted > count:
        gpus = f"GPU {first}" if wanted == 1 else f"GPUs {first}-{first + wanted - 1}"
        raise ValueError(f"--device {config.device} --tp {wanted} needs {gpus}; torch sees {count} GPU(s)")


def build_engine(
    model_dir: Path, model_id: str | None = None, config: EngineConfig | None = None, on_block_events=None
) -> PagedEngine:
    config = config or EngineConfig(device=default_device())
    if config.device == "cpu":
        keep_freed_memory()
        cpu_extension.extension()  # load (or report the lack of) the C++ kernels before serving
    model_config = read_config(model_dir)
    if config.device.startswith("cuda"):
        _check_gpus(config)
        if why := triton_refuses(model_config.head_dim, config.block_size_tokens):
            # Served all the same, by the torch references, without CUDA graphs (whose capture assumes the kernels)
            log.warning("%s: rotary, KV writes and paged attention run torch's reference kernels (slower)", why)
            config = dataclasses.replace(config, decode_graphs="off")
    if config.tensor_parallel_size > 1:
        check_divisible_config(model_config, config.tensor_parallel_size)
    num_blocks = config.num_blocks_for(model_config, model_dtype(config.device).itemsize)
    if (held := num_blocks * config.block_size_tokens) < model_config.max_position_embeddings:
        log.warning(
            "the KV pool holds %d tokens, under the model's context of %d: this worker serves prompt + max_tokens up "
            "to %d (its Stats say so, and gateways size requests by it); --kv-cache-mb or --num-kv-blocks raise it",
            held, model_config.max_position_embeddings, held,
        )  # fmt: skip
    peers = (
        TensorParallelPeers(model_dir, config, num_blocks, prepare_model) if config.tensor_parallel_size > 1 else None
    )
    model = prepare_model(model_dir, config)
    if peers is not None:
        peers.loaded()
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
        config,
        load_tokenizer(model_dir),
        eos_token_ids=model.config.eos_token_ids,
        model_id=model_id_for(model_dir, model_id),
        max_context_tokens=model.config.max_position_embeddings,
        vocab_size=model.config.vocab_size,
        execution_provider=f"torch-{config.device}" + (f" tp={config.tensor_parallel_size}" if peers else ""),
        on_block_events=on_block_events,
    ).start()
