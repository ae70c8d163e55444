"""The ONNX decoder as a StepModel: explicit past/present KV through onnxruntime, with IO binding.

The growing KV cache never leaves onnxruntime between steps: each step's
`present.*` outputs (OrtValues, allocated by the session) are bound as the
next step's `past_key_values.*` inputs, so only the last position's logits
are copied out. The graph concatenates past and new K/V, so the cache is
not preallocated at full length; that needs a shared past/present buffer
(GroupQueryAttention), which is left for later.
"""

from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from edge_agent.export import MODEL_NAME, verify_export
from edge_agent.providers import DEFAULT_PRIORITY, create_session

State = list[ort.OrtValue]  # past key/value per layer, flattened (key0, value0, key1, …)


class OnnxStepModel:
    def __init__(self, export_dir: Path, priority=DEFAULT_PRIORITY, require_npu: bool = False) -> None:
        manifest = verify_export(export_dir)
        self.max_context_tokens: int = manifest["max_context_tokens"]
        self.eos_token_ids: tuple[int, ...] = tuple(manifest["eos_token_ids"])
        self.quantization: str = _variant(manifest)
        self.session, self.execution_provider = create_session(
            str(Path(export_dir) / MODEL_NAME), priority, require_npu
        )
        self._past_names = [i.name for i in self.session.get_inputs() if i.name.startswith("past_key_values.")]
        self._present_names = [o.name for o in self.session.get_outputs() if o.name.startswith("present.")]
        past_input = self.session.get_inputs()[2]
        self._kv_heads, self._head_dim = past_input.shape[1], past_input.shape[3]

    def prefill(self, prompt_token_ids: list[int]) -> tuple[torch.Tensor, State]:
        empty = ort.OrtValue.ortvalue_from_numpy(np.zeros((1, self._kv_heads, 0, self._head_dim), dtype=np.float32))
        return self._run(prompt_token_ids, 0, [empty] * len(self._past_names))

    def decode(self, state: State, token_id: int, position: int) -> tuple[torch.Tensor, State]:
        return self._run([token_id], position, state)

    def _run(self, token_ids: list[int], start: int, past: State) -> tuple[torch.Tensor, State]:
        binding = self.session.io_binding()
        binding.bind_cpu_input("input_ids", np.array([token_ids], dtype=np.int64))
        binding.bind_cpu_input("position_ids", np.arange(start, start + len(token_ids), dtype=np.int64)[None])
        for name, value in zip(self._past_names, past, strict=True):
            binding.bind_ortvalue_input(name, value)
        binding.bind_output("logits")
        for name in self._present_names:
            binding.bind_output(name)
        self.session.run_with_iobinding(binding)
        logits, *present = binding.get_outputs()
        return torch.from_numpy(logits.numpy()[0, -1].copy()), present


def _variant(manifest: dict) -> str:
    bits = manifest["quantization"]["bits"]
    return {32: "fp32", 16: "fp16"}.get(bits, f"int{bits}")
