"""The engine's knobs, checked once. docs/engine.md explains how to choose them."""

import re
from dataclasses import dataclass
from typing import Literal

from modeling.model_config import ModelConfig

QUANTIZATIONS = ("none", "int8")
DECODE_GRAPHS = ("auto", "off", "eager")
CPU_LINEARS = ("auto", "aten")


@dataclass(frozen=True)
class EngineConfig:
    block_size_tokens: int = 16
    kv_cache_mb: int = 512  # KV pool size when num_kv_blocks is not given
    num_kv_blocks: int | None = None
    max_num_batched_tokens: int = 512  # token budget of one step (prefill chunks + decodes)
    max_num_seqs: int = 256  # running sequences at most
    tensor_parallel_size: int = 1
    quantize: Literal["none", "int8"] = "none"
    device: str = "cpu"
    # CUDA graphs for decode steps: auto = captured on CUDA (without TP), off elsewhere; eager = the bucketed
    # static-input path without capture (how the tests exercise it on CPU).
    decode_graphs: Literal["auto", "off", "eager"] = "auto"
    # CPU linears: auto = oneDNN with weights packed once (cloud_worker/layers/packed_linear.py) where torch
    # has it; aten = nn.Linear as built (torch's BLAS).
    cpu_linear: Literal["auto", "aten"] = "auto"

    def __post_init__(self) -> None:
        if self.block_size_tokens < 1:
            raise ValueError(f"block size must be >= 1 token, got {self.block_size_tokens}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 1:
            raise ValueError(f"num_kv_blocks must be >= 1, got {self.num_kv_blocks}")
        if self.kv_cache_mb < 1:
            raise ValueError(f"kv cache must be >= 1 MB, got {self.kv_cache_mb}")
        if self.max_num_batched_tokens < 1 or self.max_num_seqs < 1:
            raise ValueError("max_num_batched_tokens and max_num_seqs must be >= 1")
        if self.tensor_parallel_size < 1:
            raise ValueError(f"tensor parallel size must be >= 1, got {self.tensor_parallel_size}")
        if self.decode_graphs not in DECODE_GRAPHS:
            raise ValueError(f"decode_graphs must be one of {DECODE_GRAPHS}, got {self.decode_graphs!r}")
        if self.cpu_linear not in CPU_LINEARS:
            raise ValueError(f"cpu_linear must be one of {CPU_LINEARS}, got {self.cpu_linear!r}")
        if self.quantize not in QUANTIZATIONS:
            raise ValueError(f"quantize must be one of {QUANTIZATIONS}, got {self.quantize!r}")
        if not re.fullmatch(r"cpu|cuda(:[0-9]+)?", self.device):
            raise ValueError(f"device must be cpu, cuda or cuda:N, got {self.device!r}")

    def rank_device(self, rank: int) -> str:
        """The device a tensor-parallel rank runs on: its own GPU, or the CPU."""
        if not self.device.startswith("cuda"):
            return self.device
        return f"cuda:{self.first_gpu() + rank}"  # from the GPU given: cuda:1 was cuda:0 for rank 0 (a review)

    def first_gpu(self) -> int:
        return int(self.device.partition(":")[2] or 0)

    def decode_graph_mode(self) -> Literal["capture", "eager"] | None:
        if self.decode_graphs == "eager":
            return "eager"
        if self.decode_graphs == "auto" and self.device.startswith("cuda") and self.tensor_parallel_size == 1:
            return "capture"
        return None

    def kv_block_bytes(self, model: ModelConfig, dtype_bytes: int) -> int:
        """K and V of one block, all layers, this rank's share of the KV heads."""
        kv_heads = model.num_key_value_heads // self.tensor_parallel_size
        return 2 * model.num_hidden_layers * self.block_size_tokens * kv_heads * model.head_dim * dtype_bytes

    def num_blocks_for(self, model: ModelConfig, dtype_bytes: int) -> int:
        if self.num_kv_blocks is not None:
            return self.num_kv_blocks
        return max(1, self.kv_cache_mb * 2**20 // self.kv_block_bytes(model, dtype_bytes))
