"""Tensor parallelism as a transform applied after the model is built (as gpt-fast does).

Attention is split by heads (q by query heads, k/v by KV heads), the MLP by
intermediate columns; o_proj and down_proj become row-parallel (each rank
multiplies its slice, then an all-reduce sums). The embedding and the LM head
are split over the vocabulary: a rank looks up only the ids it owns (zeros
elsewhere, summed by an all-reduce) and computes only its slice of the
logits (gathered). The model file itself knows nothing of this.
"""

import torch
import torch.distributed as dist
from torch import nn

from modeling.llama import LlamaForCausalLM
from modeling.model_config import ModelConfig


class TensorParallelError(ValueError):
    """The model's shape cannot be split over this many ranks (the message says which dimension), or its ranks did
    not meet."""


_step_group = None  # the group the layers' collectives run on (None: the default group)


def run_collectives_on(group) -> None:
    """The process group the parallel layers' collectives use: one under the step timeout, where the group the
    ranks met in waits longer for them to start (cloud_worker/parallel/ranks.py)."""
    global _step_group
    _step_group = group


class RowParallelLinear(nn.Module):
    """y = all_reduce(x_shard @ W_shard^T) + b: the input is already split by the previous column-parallel layer;
    the bias (o_proj's, where attention_bias is set) is added once, after the sum."""

    def __init__(self, linear: nn.Linear, bias: torch.Tensor | None = None) -> None:
        super().__init__()
        assert linear.bias is None, "the bias is added after the all-reduce, not by each rank"
        self.linear, self.bias = linear, bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.linear(x)
        dist.all_reduce(out, group=_step_group)
        return out if self.bias is None else out + self.bias


class VocabParallelEmbedding(nn.Module):
    def __init__(self, weight_shard: torch.Tensor, vocab_start: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight_shard, requires_grad=False)
        self.vocab_start = vocab_start

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.vocab_start
        owned = (local >= 0) & (local < self.weight.shape[0])
        out = nn.functional.embedding(local.masked_fill(~owned, 0), self.weight)
        out = out.masked_fill(~owned.unsqueeze(-1), 0.0)
        dist.all_reduce(out, group=_step_group)
        return out


class VocabParallelLMHead(nn.Module):
    def __init__(self, weight_shard: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight_shard, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        local = nn.functional.linear(x, self.weight).contiguous()
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size(_step_group))]
        dist.all_gather(parts, local, group=_step_group)
        return torch.cat(parts, dim=-1)


def check_divisible_config(c: ModelConfig, world: int) -> None:
    for name, size in [
        ("num_attention_heads", c.num_attention_heads),
        ("num_key_value_heads", c.num_key_value_heads),
        ("intermediate_size", c.intermediate_size),
        ("vocab_size", c.vocab_size),
    ]:
        if size % world:
            raise TensorParallelError(f"{name}={size} is not divisible by tensor parallel size {world}")


def _rows(linear: nn.Linear, rank: int, world: int) -> nn.Linear:
    """Column-parallel: this rank's slice of the output features."""
    out = linear.out_features // world
    shard = nn.Linear(linear.in_features, out, bias=linear.bias is not None)
    shard.weight.data = linear.weight.data[rank * out : (rank + 1) * out].clone()
    if linear.bias is not None:
        shard.bias.data = linear.bias.data[rank * out : (rank + 1) * out].clone()
    return shard.to(linear.weight.device)


def _cols(linear: nn.Linear, rank: int, world: int) -> RowParallelLinear:
    """Row-parallel: this rank's slice of the input features."""
    size = linear.in_features // world
    shard = nn.Linear(size, linear.out_features, bias=False)
    shard.weight.data = linear.weight.data[:, rank * size : (rank + 1) * size].clone()
    bias = None if linear.bias is None else linear.bias.data.clone()
    return RowParallelLinear(shard.to(linear.weight.device), bias)


@torch.no_grad()
def apply_tp(model: LlamaForCausalLM, rank: int, world: int) -> LlamaForCausalLM:
    if world == 1:
        return model
    check_divisible_config(model.config, world)
    for layer in model.model.layers:
        attn, mlp = layer.self_attn, layer.mlp
        attn.q_proj, attn.k_proj, attn.v_proj = (_rows(p, rank, world) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
        attn.o_proj = _cols(attn.o_proj, rank, world)
        attn.num_heads //= world
        attn.num_kv_heads //= world
        mlp.gate_proj, mlp.up_proj = _rows(mlp.gate_proj, rank, world), _rows(mlp.up_proj, rank, world)
        mlp.down_proj = _cols(mlp.down_proj, rank, world)
    vocab = model.config.vocab_size // world
    embed = model.model.embed_tokens.weight.data
    model.model.embed_tokens = VocabParallelEmbedding(embed[rank * vocab : (rank + 1) * vocab].clone(), rank * vocab)
    head = model.lm_head.weight.data
    model.lm_head = VocabParallelLMHead(head[rank * vocab : (rank + 1) * vocab].clone())
    return model
