"""Llama-family decoder (Llama, Qwen2, Mistral) with an explicit KV cache.

The module names mirror Hugging Face's so checkpoint tensors load by name.
`forward` takes the past K/V per layer and returns the present K/V, which is
what both the cloud engine and the ONNX export (explicit past/present) need.
"""

import torch
from torch import nn

from cloud_worker.layers.norm import RMSNorm
from cloud_worker.layers.rotary import RotaryEmbedding, apply_rotary
from cloud_worker.model_config import ModelConfig
from kernels.attention import causal_attention

KVCache = list[tuple[torch.Tensor, torch.Tensor]]  # per layer: [batch, kv_heads, keys, head_dim]


class LlamaAttention(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        h, d = config.hidden_size, config.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = config.num_attention_heads, config.num_key_value_heads, d
        self.q_proj = nn.Linear(h, self.num_heads * d, bias=config.qkv_bias)
        self.k_proj = nn.Linear(h, self.num_kv_heads * d, bias=config.qkv_bias)
        self.v_proj = nn.Linear(h, self.num_kv_heads * d, bias=config.qkv_bias)
        self.o_proj = nn.Linear(self.num_heads * d, h, bias=False)

    def forward(self, x, cos, sin, positions, past_k, past_v):
        batch, tokens, _ = x.shape
        q = self.q_proj(x).view(batch, tokens, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, tokens, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        k_all, v_all = torch.cat((past_k, k), dim=2), torch.cat((past_v, v), dim=2)
        out = causal_attention(q, k_all, v_all, positions)
        return self.o_proj(out.transpose(1, 2).reshape(batch, tokens, -1)), k_all, v_all


class LlamaMLP(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        h, i = config.hidden_size, config.intermediate_size
        self.gate_proj = nn.Linear(h, i, bias=False)
        self.up_proj = nn.Linear(h, i, bias=False)
        self.down_proj = nn.Linear(i, h, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaDecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = LlamaAttention(config)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = LlamaMLP(config)

    def forward(self, x, cos, sin, positions, past_k, past_v):
        attn, k, v = self.self_attn(self.input_layernorm(x), cos, sin, positions, past_k, past_v)
        x = x + attn
        return x + self.mlp(self.post_attention_layernorm(x)), k, v


class LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config.head_dim, config.rope_theta, config.rope_scaling)


class LlamaForCausalLM(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)

    def empty_cache(self, batch: int = 1) -> KVCache:
        c = self.config
        p = self.lm_head.weight
        shape = (batch, c.num_key_value_heads, 0, c.head_dim)
        return [(p.new_zeros(shape), p.new_zeros(shape)) for _ in range(c.num_hidden_layers)]

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, past: KVCache) -> tuple[torch.Tensor, KVCache]:
        """input_ids, positions: [batch, tokens]. Returns logits [batch, tokens, vocab] and the new cache."""
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.model.rotary_emb(positions)
        present: KVCache = []
        for layer, (past_k, past_v) in zip(self.model.layers, past, strict=True):
            x, k, v = layer(x, cos, sin, positions, past_k, past_v)
            present.append((k, v))
        return self.lm_head(self.model.norm(x)).float(), present
