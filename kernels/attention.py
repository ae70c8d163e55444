"""Causal attention over a contiguous KV cache (GQA).

Semantics: token t of sequence b, at absolute position positions[b, t],
attends to cached keys 0 .. positions[b, t]. Keys are stored at their
absolute positions, so key index s is key position s.
"""

import torch


def causal_attention_ref(
    q: torch.Tensor,  # [batch, heads, tokens, head_dim]
    k: torch.Tensor,  # [batch, kv_heads, keys, head_dim]
    v: torch.Tensor,  # [batch, kv_heads, keys, head_dim]
    positions: torch.Tensor,  # [batch, tokens], int64
) -> torch.Tensor:
    heads, kv_heads = q.shape[1], k.shape[1]
    assert heads % kv_heads == 0 and k.shape == v.shape
    group = heads // kv_heads
    if group > 1:
        k = k.repeat_interleave(group, dim=1)
        v = v.repeat_interleave(group, dim=1)
    scale = q.shape[-1] ** -0.5
    scores = torch.matmul(q.float(), k.float().transpose(-1, -2)) * scale
    key_positions = torch.arange(k.shape[2], device=q.device)
    allowed = key_positions.view(1, 1, 1, -1) <= positions.unsqueeze(1).unsqueeze(-1)
    scores = scores.masked_fill(~allowed, float("-inf"))
    probs = torch.softmax(scores, dim=-1)
    return torch.matmul(probs, v.float()).to(q.dtype)


def causal_attention(q, k, v, positions):
    return causal_attention_ref(q, k, v, positions)
