"""The torch model as a StepModel: a contiguous KV cache per sequence.

This is the simple KV handling the serial engine needs; the paged block
manager replaces it in the engine issue.
"""

import torch

from cloud_worker.models.llama import KVCache, LlamaForCausalLM


class TorchStepModel:
    def __init__(self, model: LlamaForCausalLM) -> None:
        self._model = model
        self.max_context_tokens = model.config.max_position_embeddings

    def prefill(self, prompt_token_ids: list[int]) -> tuple[torch.Tensor, KVCache]:
        device = self._model.lm_head.weight.device
        ids = torch.tensor([prompt_token_ids], device=device)
        positions = torch.arange(len(prompt_token_ids), device=device).unsqueeze(0)
        logits, cache = self._model(ids, positions, self._model.empty_cache())
        return logits[0, -1], cache

    def decode(self, state: KVCache, token_id: int, position: int) -> tuple[torch.Tensor, KVCache]:
        device = self._model.lm_head.weight.device
        logits, cache = self._model(
            torch.tensor([[token_id]], device=device), torch.tensor([[position]], device=device), state
        )
        return logits[0, -1], cache
