"""Checkpoint → ONNX decoder with explicit past/present KV → optional INT4/INT8/fp16.

The graph is exported from the same torch model the cloud worker runs, so
both sides compute the same function. Inputs: input_ids and position_ids
[batch, tokens] (int64), past_key_values.{i}.key/value [batch, kv_heads,
past, head_dim]; outputs: logits [batch, tokens, vocab] and
present.{i}.key/value [batch, kv_heads, past + tokens, head_dim] (the names
onnxruntime-genai uses). An export is cached by the checkpoint's content hash and
its quantization; its manifest records both and every file's checksum, and the
agent refuses a folder that does not match it.
"""

import hashlib
import json
import logging
import shutil
import warnings
from pathlib import Path

import torch
from rich.progress import Progress
from torch import nn

from cloud_worker.loader import load_model, weight_files
from cloud_worker.models.llama import LlamaForCausalLM
from edge_agent.quantize import FP32, Quantization, linear_weight_bytes, quantize

log = logging.getLogger(__name__)
MANIFEST_NAME = "manifest.json"
MODEL_NAME = "model.onnx"
FORMAT_VERSION = 1
GRAPH_VERSION = 2  # bump when the exported graph changes, so cached exports are remade
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json")
OPSET = 17


class _ExplicitKVDecoder(nn.Module):
    """Flattens the per-layer (key, value) cache into positional ONNX inputs and outputs."""

    def __init__(self, model: LlamaForCausalLM) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, position_ids, *past_flat):
        past = list(zip(past_flat[0::2], past_flat[1::2], strict=True))
        logits, present = self.model(input_ids, position_ids, past)
        return (logits, *[t for kv in present for t in kv])


def _export(module: nn.Module, args: tuple, path: Path, names_in: list[str], names_out: list[str], axes: dict) -> None:
    torch.onnx.export(
        module,
        args,
        str(path),
        input_names=names_in,
        output_names=names_out,
        dynamic_axes=axes,
        opset_version=OPSET,
        dynamo=False,
    )


def checkpoint_hash(checkpoint_dir: Path) -> str:
    digest = hashlib.sha256()
    for path in [Path(checkpoint_dir) / "config.json", *weight_files(checkpoint_dir)]:
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class ExportError(ValueError):
    """An export folder that must not be run; the message says what is wrong with it."""


def export_onnx(
    checkpoint_dir: Path, out_dir: Path, quantization: Quantization = FP32, show_progress: bool = True
) -> Path:
    """Export with explicit KV, quantize as asked, write the manifest; returns out_dir."""
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    with Progress(disable=not show_progress, transient=True) as progress:
        task = progress.add_task(f"exporting {checkpoint_dir.name} to ONNX ({quantization.name})", total=5)
        source_hash = checkpoint_hash(checkpoint_dir)
        model = load_model(checkpoint_dir)
        progress.advance(task)
        c = model.config
        names_in = ["input_ids", "position_ids"]
        names_out = ["logits"]
        axes = {
            "input_ids": {0: "batch", 1: "tokens"},
            "position_ids": {0: "batch", 1: "tokens"},
            "logits": {0: "batch", 1: "tokens"},
        }
        for i in range(c.num_hidden_layers):
            for kind in ("key", "value"):
                names_in.append(f"past_key_values.{i}.{kind}")
                names_out.append(f"present.{i}.{kind}")
                axes[names_in[-1]] = {0: "batch", 2: "past_tokens"}
                axes[names_out[-1]] = {0: "batch", 2: "total_tokens"}
        # Trace with a non-empty past so no shape is specialised to zero.
        past = [torch.zeros(1, c.num_key_value_heads, 2, c.head_dim) for _ in range(2 * c.num_hidden_layers)]
        args = (torch.tensor([[1, 2, 3]]), torch.tensor([[2, 3, 4]]), *past)
        tmp_dir = out_dir.with_name(out_dir.name + ".partial")
        shutil.rmtree(tmp_dir, ignore_errors=True)
        tmp_dir.mkdir(parents=True)
        fp32_path = tmp_dir / "fp32.onnx"
        with warnings.catch_warnings():
            # The tracer warns about Python-level shape checks; they are constant for a given config.
            warnings.simplefilter("ignore", torch.jit.TracerWarning)
            _export(_ExplicitKVDecoder(model).eval(), args, fp32_path, names_in, names_out, axes)
        progress.advance(task)
        quantize(fp32_path, tmp_dir / MODEL_NAME, quantization)
        sizes = {
            "model_bytes": (tmp_dir / MODEL_NAME).stat().st_size,
            "linear_weight_bytes": linear_weight_bytes(tmp_dir / MODEL_NAME),
            "fp32_linear_weight_bytes": linear_weight_bytes(fp32_path),
        }
        fp32_path.unlink()
        progress.advance(task)
        for name in TOKENIZER_FILES:
            if (checkpoint_dir / name).is_file():
                shutil.copy(checkpoint_dir / name, tmp_dir / name)
        progress.advance(task)
        manifest = {
            "format_version": FORMAT_VERSION,
            "source_checkpoint_sha256": source_hash,
            "quantization": quantization.as_dict(),
            "num_layers": c.num_hidden_layers,
            "max_context_tokens": c.max_position_embeddings,
            "eos_token_ids": list(c.eos_token_ids),
            "sizes": sizes,
            "files": {p.name: _file_sha256(p) for p in sorted(tmp_dir.iterdir())},
        }
        (tmp_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        shutil.rmtree(out_dir, ignore_errors=True)
        tmp_dir.rename(out_dir)  # a crash mid-export never leaves a folder that looks finished
        progress.advance(task)
    log.info("exported %s to %s (%s)", checkpoint_dir, out_dir, quantization.name)
    return out_dir


def verify_export(export_dir: Path) -> dict:
    """The manifest of an export whose files are all there and unchanged; ExportError otherwise."""
    export_dir = Path(export_dir)
    manifest_path = export_dir / MANIFEST_NAME
    if not manifest_path.is_file():
        raise ExportError(
            f"{export_dir}: no {MANIFEST_NAME}; export it with `tandem edge export CHECKPOINT {export_dir}`"
        )
    try:
        manifest = json.loads(manifest_path.read_text())
        version, files = manifest["format_version"], manifest["files"]
    except (ValueError, KeyError) as exc:
        raise ExportError(f"{manifest_path}: not a Tandem export manifest ({exc})") from exc
    if version != FORMAT_VERSION:
        raise ExportError(f"{manifest_path}: format version {version}; this agent reads version {FORMAT_VERSION}")
    for name, expected in files.items():
        path = export_dir / name
        if not path.is_file():
            raise ExportError(f"{export_dir}: {name} is missing; the export is incomplete, export it again")
        if _file_sha256(path) != expected:
            raise ExportError(f"{export_dir}: {name} does not match its checksum in {MANIFEST_NAME}; export it again")
    return manifest


def cached_export(checkpoint_dir: Path, cache_dir: Path, quantization: Quantization = FP32) -> Path:
    """The export for this checkpoint's content and quantization, made on first use (and remade if damaged)."""
    out_dir = Path(cache_dir) / checkpoint_hash(checkpoint_dir)[:16] / f"{quantization.name}-g{GRAPH_VERSION}"
    if (out_dir / MANIFEST_NAME).is_file():
        try:
            verify_export(out_dir)
            return out_dir
        except ExportError as exc:
            log.warning("cached export unusable, exporting again: %s", exc)
    return export_onnx(checkpoint_dir, out_dir, quantization)
