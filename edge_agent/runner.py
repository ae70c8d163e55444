"""The ONNX decoder as a StepModel: explicit past/present KV through onnxruntime."""

from pathlib import Path

import numpy as np
import torch

from edge_agent.export import MODEL_NAME, verify_export
from edge_agent.providers import DEFAULT_PRIORITY, create_session

State = list[np.ndarray]  # past key/value per layer, flattened (key0, value0, key1, …)


class OnnxStepModel:
    def __init__(self, export_dir: Path, priority=DEFAULT_PRIORITY, require_npu: bool = False) -> None:
        manifest = verify_export(export_dir)
        self.quantization: str = _variant(manifest)
        self.max_context_tokens: int = manifest["max_context_tokens"]
        self.eos_token_ids: tuple[int, ...] = tuple(manifest["eos_token_ids"])
        self.session, self.execution_provider = create_session(
            str(Path(export_dir) / MODEL_NAME), priority, require_npu
        )
        self._past_names = [i.name for i in self.session.get_inputs() if i.name.startswith("past_key_values.")]
        past_input = self.session.get_inputs()[2]
        self._kv_heads, self._head_dim = past_input.shape[1], past_input.shape[3]

    def prefill(self, prompt_token_ids: list[int]) -> tuple[torch.Tensor, State]:
        empty = np.zeros((1, self._kv_heads, 0, self._head_dim), dtype=np.float32)
        return self._run(prompt_token_ids, 0, [empty] * len(self._past_names))

    def decode(self, state: State, token_id: int, position: int) -> tuple[torch.Tensor, State]:
        return self._run([token_id], position, state)

    def _run(self, token_ids: list[int], start: int, past: State) -> tuple[torch.Tensor, State]:
        feeds = {
            "input_ids": np.array([token_ids], dtype=np.int64),
            "position_ids": np.arange(start, start + len(token_ids), dtype=np.int64)[None],
        }
        feeds |= dict(zip(self._past_names, past, strict=True))
        logits, *present = self.session.run(None, feeds)
        return torch.from_numpy(logits[0, -1]), present


def _variant(manifest: dict) -> str:
    bits = manifest["quantization"]["bits"]
    return {32: "fp32", 16: "fp16"}.get(bits, f"int{bits}")
