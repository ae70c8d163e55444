"""The ONNX decoder as a StepModel: onnxruntime with IO binding and preallocated KV buffers.

Each layer's K/V live in one buffer of `capacity` positions, allocated once
per model (edge_agent/export.py): every step binds the same buffers as its
past inputs and present outputs, and GroupQueryAttention writes the step's
K/V in place. A step copies in only the new token ids and gets back only the
last position's logits (the LM head runs on it alone, `logits_to_keep`);
nothing grows, concatenates or reallocates with the context.

The agent serves one sequence at a time (the SerialEngine queues the rest),
so one set of buffers is enough: a prefill starts a new sequence in them, and
the state of the previous one is then stale, which decode refuses.
"""

from dataclasses import dataclass
from itertools import count
from pathlib import Path

import numpy as np
import onnxruntime as ort
import torch

from edge_agent.export import MODEL_NAME, verify_export
from edge_agent.providers import DEFAULT_PRIORITY, create_session, ran_on

DEFAULT_CAPACITY = 4096  # KV positions preallocated per layer, unless the model's context is shorter
_sequences = count(1)


@dataclass(frozen=True)
class State:
    sequence: int  # which prefill filled the buffers
    length: int  # tokens in the cache


class StaleState(RuntimeError):
    """decode() on a sequence whose buffers a later prefill has taken."""


class OnnxStepModel:
    def __init__(
        self,
        export_dir: Path,
        priority=DEFAULT_PRIORITY,
        require_npu: bool = False,
        capacity: int = DEFAULT_CAPACITY,
        options: ort.SessionOptions | None = None,
    ) -> None:
        manifest = verify_export(export_dir)
        self.max_context_tokens: int = min(manifest["max_context_tokens"], capacity)
        self.eos_token_ids: tuple[int, ...] = tuple(manifest["eos_token_ids"])
        self.quantization: str = _variant(manifest)
        self.session, self.execution_provider = create_session(
            str(Path(export_dir) / MODEL_NAME), priority, require_npu, options, placement=True
        )
        self.vocab_size: int = next(o.shape[-1] for o in self.session.get_outputs() if o.name == "logits")
        inputs = {i.name: i for i in self.session.get_inputs()}
        self._past_names = [name for name in inputs if name.startswith("past_key_values.")]
        self._present_names = [o.name for o in self.session.get_outputs() if o.name.startswith("present.")]
        _, kv_heads, _, head_dim = inputs[self._past_names[0]].shape
        shape = (1, kv_heads, self.max_context_tokens, head_dim)
        self._buffers = [ort.OrtValue.ortvalue_from_numpy(np.zeros(shape, np.float32)) for _ in self._past_names]
        self._sequence = 0
        # One binding for the model's life: the KV buffers are bound once, as both past and present (the op writes
        # in place); a step rebinds only its four small inputs and the logits. Building it anew each step cost
        # about 0.4 ms of a 3.5 ms INT4 decode step (docs/benchmarks.md).
        self._binding = self.session.io_binding()
        self._binding.bind_output("logits")  # first: get_outputs() follows the binding order
        for past, present, buffer in zip(self._past_names, self._present_names, self._buffers, strict=True):
            self._binding.bind_ortvalue_input(past, buffer)
            self._binding.bind_ortvalue_output(present, buffer)
        self._run([0], 0, keep=1)  # where each node runs is known once one has run
        self.execution_provider = ran_on(self.session, self.execution_provider, require_npu)

    def prefill(self, prompt_token_ids: list[int]) -> tuple[torch.Tensor, State]:
        self._sequence = next(_sequences)
        logits = self._run(prompt_token_ids, 0, keep=1)
        return torch.from_numpy(logits[-1].copy()), State(self._sequence, len(prompt_token_ids))

    def prefill_all(self, prompt_token_ids: list[int]) -> tuple[torch.Tensor, State]:
        """As prefill, with the logits at every prompt position [tokens, vocab] (for prompt_logprobs)."""
        self._sequence = next(_sequences)
        logits = self._run(prompt_token_ids, 0, keep=len(prompt_token_ids))
        return torch.from_numpy(logits.copy()), State(self._sequence, len(prompt_token_ids))

    def decode(self, state: State, token_id: int, position: int) -> tuple[torch.Tensor, State]:
        if state.sequence != self._sequence:
            raise StaleState("this sequence's KV buffers were taken by a later prefill")
        assert position == state.length, (position, state.length)
        logits = self._run([token_id], position, keep=1)
        return torch.from_numpy(logits[-1].copy()), State(state.sequence, state.length + 1)

    def logits(self, token_ids: list[int]) -> np.ndarray:
        """Logits at every position of one prompt [tokens, vocab] (for scoring; starts a new sequence)."""
        self._sequence = next(_sequences)
        return self._run(token_ids, 0, keep=len(token_ids)).copy()

    def _run(self, token_ids: list[int], start: int, keep: int) -> np.ndarray:
        """Logits at the last `keep` positions [keep, vocab]."""
        total = start + len(token_ids)
        if total > self.max_context_tokens:
            raise ValueError(f"{total} tokens exceed this agent's context of {self.max_context_tokens}")
        binding = self._binding
        binding.bind_cpu_input("input_ids", np.array([token_ids], dtype=np.int64))
        binding.bind_cpu_input("seqlens_k", np.array([total - 1], dtype=np.int32))
        binding.bind_cpu_input("total_sequence_length", np.array(total, dtype=np.int32))
        binding.bind_cpu_input("logits_to_keep", np.array(keep, dtype=np.int64))
        binding.bind_output("logits")  # its shape follows `keep`: allocated by the run
        self.session.run_with_iobinding(binding)
        return binding.get_outputs()[0].numpy()[0]


def _variant(manifest: dict) -> str:
    bits = manifest["quantization"]["bits"]
    return {32: "fp32", 16: "fp16"}.get(bits, f"int{bits}")
