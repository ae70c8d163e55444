"""A deterministic tiny Llama-architecture checkpoint in Hugging Face layout.

Tests and `make up` need a real model without a download. This writes the
same files a Hugging Face Llama checkpoint has (config.json,
generation_config.json, model.safetensors, tokenizer.json,
tokenizer_config.json with a chat template), so the code that loads it is
the code that loads a real one.

The weights start seeded-random and are then fitted for `fit_steps` Adam
steps (single-threaded, about three seconds) to recite the bundled text
`demo_corpus.txt`. So the demo answers in words, and its logits are peaked
like a trained model's, which the INT4-against-fp32 and greedy-equality
oracles need: on random weights near-ties make them measure noise. The same
arguments give byte-identical files on the same platform.
"""

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from serving.atomic_dir import ForeignFolder, building, sweep
from tandem.parent import STOP_WITH_PARENT, stop_with_parent

if TYPE_CHECKING:  # torch is imported where a checkpoint is built: `tandem up`, which only checks for one and has
    import torch  # it built in a process of its own, started 1.5 s sooner and held 190 MB less without it

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
PAD_TOKEN, EOS_TOKEN = "<|endoftext|>", "<|im_end|>"
# ChatML, the template Qwen2 uses; rendered by the gateway with jinja2.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
CORPUS_PATH = Path(__file__).with_name("demo_corpus.txt")


@dataclass(frozen=True)
class DemoShape:
    vocab_size: int = 512
    hidden_size: int = 64
    intermediate_size: int = 176
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 2048
    seed: int = 0
    fit_steps: int = 60  # 0 keeps the random weights
    model_vocab_size: int | None = None  # pad the embedding past the tokenizer's vocabulary (for benchmark shapes)


def build_tokenizer(vocab_size: int) -> Tokenizer:
    """Byte-level BPE trained on the bundled corpus (single-threaded training is deterministic)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train([str(CORPUS_PATH)], trainer)
    return tokenizer


def _weights(shape: DemoShape, vocab_size: int) -> "dict[str, torch.Tensor]":
    import torch

    gen = torch.Generator().manual_seed(shape.seed)
    head_dim = shape.hidden_size // shape.num_attention_heads
    kv_dim = shape.num_key_value_heads * head_dim

    def randn(*dims: int, std: float) -> torch.Tensor:
        return torch.randn(*dims, generator=gen) * std

    def linear(out_dim: int, in_dim: int) -> torch.Tensor:
        return randn(out_dim, in_dim, std=in_dim**-0.5)

    def norm() -> torch.Tensor:
        return 1.0 + randn(shape.hidden_size, std=0.1)

    h, i = shape.hidden_size, shape.intermediate_size
    tensors = {"model.embed_tokens.weight": randn(vocab_size, h, std=1.0)}
    for layer in range(shape.num_hidden_layers):
        p = f"model.layers.{layer}."
        tensors |= {
            p + "input_layernorm.weight": norm(),
            p + "self_attn.q_proj.weight": linear(h, h),
            p + "self_attn.k_proj.weight": linear(kv_dim, h),
            p + "self_attn.v_proj.weight": linear(kv_dim, h),
            p + "self_attn.o_proj.weight": linear(h, h),
            p + "post_attention_layernorm.weight": norm(),
            p + "mlp.gate_proj.weight": linear(i, h),
            p + "mlp.up_proj.weight": linear(i, h),
            p + "mlp.down_proj.weight": linear(h, i),
        }
    # A wide logit spread keeps greedy decoding far from near-ties, so the
    # HF-equality oracle is not at the mercy of float rounding.
    tensors["model.norm.weight"] = norm()
    tensors["lm_head.weight"] = randn(vocab_size, h, std=0.5)
    return {name: t.contiguous() for name, t in tensors.items()}


def _config(shape: DemoShape, vocab_size: int, eos_id: int, pad_id: int) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab_size,
        "hidden_size": shape.hidden_size,
        "intermediate_size": shape.intermediate_size,
        "num_hidden_layers": shape.num_hidden_layers,
        "num_attention_heads": shape.num_attention_heads,
        "num_key_value_heads": shape.num_key_value_heads,
        "max_position_embeddings": shape.max_position_embeddings,
        "hidden_act": "silu",
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "attention_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": None,
        "eos_token_id": eos_id,
        "pad_token_id": pad_id,
        "torch_dtype": "float32",
    }


def demo_is_whole(folder: Path) -> bool:
    """Whether `folder` holds a whole demo checkpoint: every file, each JSON an object, the tokenizer readable and the
    weights file as long as its header says (a demo whose weights were cut short or whose config was damaged read as
    whole, and `tandem model demo` said it had rebuilt it; a review)."""
    folder = Path(folder)
    try:
        for name in DEMO_FILES - {"tokenizer.json", "model.safetensors"}:
            if not isinstance(json.loads((folder / name).read_bytes()), dict):
                return False
        Tokenizer.from_file(str(folder / "tokenizer.json"))
        return _safetensors_whole(folder / "model.safetensors")
    except Exception:  # noqa: BLE001 - whatever is wrong with it, it is no whole demo
        return False


def _safetensors_whole(path: Path) -> bool:
    """The file is its 8-byte header length, its JSON header, and the tensors' bytes the header's offsets reach."""
    with path.open("rb") as file:
        size = int.from_bytes(file.read(8), "little")
        header = json.loads(file.read(size))
        ends = [entry["data_offsets"][1] for name, entry in header.items() if name != "__metadata__"]
        return path.stat().st_size == 8 + size + max(ends, default=0)


def cached_demo_checkpoint(out_dir: Path, shape: DemoShape = DemoShape()) -> Path:
    """The checkpoint in out_dir, written first when it is not there (benchmarks build theirs once)."""
    out_dir = Path(out_dir)
    if not demo_is_whole(out_dir):
        print(f"building the checkpoint in {out_dir} (once)", file=sys.stderr)
        write_demo_checkpoint(out_dir, shape)
    return out_dir


DEMO_FILES = frozenset(
    {"tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json", "model.safetensors"}
)


def write_demo_checkpoint(out_dir: Path, shape: DemoShape = DemoShape()) -> Path:
    """Built in a sibling folder of this process's own and renamed into place when whole
    (serving/atomic_dir.py): a build killed midway (Ctrl-C during the first `make up`) leaves no folder that looks
    like a checkpoint, and two builds at once (two `tandem up`s) keep whichever finished first."""
    final_dir = Path(out_dir)
    with building(final_dir, demo_is_whole, DEMO_FILES.__contains__) as out_dir:
        _write_checkpoint(out_dir, shape)
    return final_dir


class DemoBuildFailed(Exception):
    """The build in a process of its own stopped with an error (its last words are the message)."""


FOREIGN_EXIT = 3  # `python -m tandem.demo_model`'s exit code where the folder holds what it does not write


def write_demo_checkpoint_apart(out_dir: Path) -> Path:
    """write_demo_checkpoint in a process of its own, which the terminal's Ctrl-C does not reach (a session of its
    own). An interrupt here (KeyboardInterrupt) stops it and removes its half-built folder, then goes on: in this
    process it lands in a wait, never in torch's native code, where it aborted the whole process (CI saw
    `terminate called after throwing an instance of 'nanobind::python_error'` from a Ctrl-C while the optimizer
    imported triton). ForeignFolder as write_demo_checkpoint; DemoBuildFailed for any other failure."""
    final_dir = Path(out_dir)
    process = subprocess.Popen(
        [sys.executable, "-m", "tandem.demo_model", str(final_dir)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        errors="replace",
        start_new_session=True,
        env=os.environ | {STOP_WITH_PARENT: str(os.getpid())},
    )
    try:
        _, said = process.communicate()
    except BaseException:  # KeyboardInterrupt (Ctrl-C, SIGTERM in `tandem up`), SystemExit
        process.kill()
        process.wait()
        sweep(final_dir)  # its builder is gone now: its partial folder is removed
        raise
    if process.returncode == FOREIGN_EXIT:
        raise ForeignFolder(said.strip())
    if process.returncode != 0:
        last = said.strip().splitlines()[-3:] or [f"exit status {process.returncode}"]
        raise DemoBuildFailed(f"building the demo model in {final_dir} failed: " + " / ".join(last))
    return final_dir


def _write_checkpoint(out_dir: Path, shape: DemoShape) -> None:
    from safetensors.torch import save_file

    tokenizer = build_tokenizer(shape.vocab_size)
    vocab_size = max(tokenizer.get_vocab_size(), shape.model_vocab_size or 0)
    eos_id, pad_id = tokenizer.token_to_id(EOS_TOKEN), tokenizer.token_to_id(PAD_TOKEN)
    tokenizer.save(str(out_dir / "tokenizer.json"))
    tokenizer_config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": EOS_TOKEN,
        "pad_token": PAD_TOKEN,
        "model_max_length": shape.max_position_embeddings,
        "chat_template": CHAT_TEMPLATE,
    }
    config = _config(shape, vocab_size, eos_id, pad_id)
    generation_config = {"eos_token_id": eos_id, "pad_token_id": pad_id}
    for name, payload in [
        ("tokenizer_config.json", tokenizer_config),
        ("config.json", config),
        ("generation_config.json", generation_config),
    ]:
        (out_dir / name).write_text(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    weights = _fit(_weights(shape, vocab_size), config, tokenizer, shape)
    save_file(weights, str(out_dir / "model.safetensors"), metadata={"format": "pt"})


def _fit(
    weights: "dict[str, torch.Tensor]", config: dict, tokenizer: Tokenizer, shape: DemoShape
) -> "dict[str, torch.Tensor]":
    """Teach the model the bundled corpus: next-token cross-entropy on the whole text, deterministically."""
    if shape.fit_steps == 0:
        return weights
    import torch

    from modeling.llama import LlamaForCausalLM
    from modeling.model_config import ModelConfig

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # one thread: the same reduction order, so the same bytes, every run
    try:
        torch.manual_seed(shape.seed)
        model = LlamaForCausalLM(ModelConfig.from_hf(config))
        model.load_state_dict(weights, strict=True)
        ids = torch.tensor([tokenizer.encode(CORPUS_PATH.read_text()).ids])
        positions = torch.arange(ids.shape[1] - 1).unsqueeze(0)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
        for _ in range(shape.fit_steps):
            logits, _ = model(ids[:, :-1], positions, model.empty_cache())
            loss = torch.nn.functional.cross_entropy(logits[0], ids[0, 1:])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    return {name: t.detach().contiguous() for name, t in model.state_dict().items()}


if __name__ == "__main__":  # write_demo_checkpoint_apart's child: `python -m tandem.demo_model OUT_DIR`
    stop_with_parent()
    try:
        write_demo_checkpoint(Path(sys.argv[1]))
    except ForeignFolder as exc:
        print(exc, file=sys.stderr)
        sys.exit(FOREIGN_EXIT)
