"""Checkpoint → ONNX decoder with explicit past/present KV → optional INT4/INT8/fp16.

The graph is exported from the same torch model the cloud worker runs, so
both sides compute the same function. Attention is onnxruntime's fused
`com.microsoft.GroupQueryAttention`, whose past and present K/V are one
preallocated buffer per layer: each step writes its new K/V in place, and
nothing is concatenated or copied as the context grows (what onnxruntime-genai
does too).

Rotary is applied inside the same op (positions follow from the cache length,
with the config's rope scaling baked into its cos/sin tables).

Inputs: input_ids [1, tokens] (int64); seqlens_k [1] and
total_sequence_length [] (int32: tokens in the cache after this step, minus
one, and that count); logits_to_keep [] (int64: the LM head runs on the last
this many positions only, 1 for generation, all of them for prompt
log-probabilities: on a 512-token prompt it is most of the head's cost);
past_key_values.{i}.key/value [1, kv_heads, capacity, head_dim]. Outputs:
logits [1, logits_to_keep, vocab] and present.{i}.key/value, the same
buffers (bind each to its past input's memory). An export is cached by
the checkpoint's content hash and its quantization; its manifest records
both and every file's checksum, and the agent refuses a folder that does not
match it.
"""

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import time
import warnings
from pathlib import Path

import torch
from rich.progress import Progress
from torch import nn

from edge_agent.quantize import FP32, Quantization, external_data_file, linear_weight_bytes, quantize
from modeling.llama import LlamaForCausalLM
from modeling.loader import load_model, weight_files
from serving.atomic_dir import DESKTOP_LITTER, ForeignFolder, building, check_replaceable
from serving.manifest_paths import unsafe_name
from tandem_kernels.attention import causal_attention
from tandem_kernels.rotary import apply_rotary

log = logging.getLogger(__name__)
MANIFEST_NAME = "manifest.json"
MODEL_NAME = "model.onnx"
FORMAT_VERSION = 3  # 2: shared past/present KV buffers (GroupQueryAttention); 3: the logits_to_keep input
GRAPH_VERSION = 6  # bump when the exported graph changes, so cached exports are remade (6: opset 21)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json")
# What the agent reads of an export beside the graph: its key. Not tokenizer_config.json (the chat template, which
# the agent reads from the checkpoint): a template edited re-exported an identical model (a review).
EXPORT_READS = ("tokenizer.json", "config.json", "generation_config.json")
TRACE_TOKENS = 5  # positions of the step the export traces (two cached, three new)
OPSET = 21  # INT4 initializers (the quantized embedding's GatherBlockQuantized) need opset 21


class _GroupQueryAttention(torch.autograd.Function):
    """Exports as onnxruntime's GroupQueryAttention; runs (for tracing) as the same computation in torch.

    q [1, tokens, heads*head_dim], k and v [1, tokens, kv_heads*head_dim] straight from the projections;
    caches [1, kv_heads, capacity, head_dim]; cos/sin caches [positions, head_dim/2]. Rotary is applied at
    positions total-tokens .. total-1, the step's K/V are written there in the caches, and each query
    attends causally to the first `total` cached positions.
    """

    @staticmethod
    def forward(ctx, q, k, v, k_cache, v_cache, seqlens_k, total, cos_cache, sin_cache, heads: int, kv_heads: int):
        tokens, end = q.shape[1], int(total)
        split = lambda x, n: x.view(1, tokens, n, -1).transpose(1, 2)  # noqa: E731
        positions = torch.arange(end - tokens, end)
        cos, sin = (torch.cat((c[positions], c[positions]), dim=-1).unsqueeze(0) for c in (cos_cache, sin_cache))
        q, k = apply_rotary(split(q, heads), cos, sin), apply_rotary(split(k, kv_heads), cos, sin)
        k_cache, v_cache = k_cache.clone(), v_cache.clone()
        k_cache[:, :, end - tokens : end], v_cache[:, :, end - tokens : end] = k, split(v, kv_heads)
        out = causal_attention(q, k_cache[:, :, :end], v_cache[:, :, :end], positions.unsqueeze(0))
        return out.transpose(1, 2).reshape(1, tokens, -1), k_cache, v_cache

    @staticmethod
    def symbolic(g, q, k, v, k_cache, v_cache, seqlens_k, total, cos_cache, sin_cache, heads: int, kv_heads: int):
        outputs = g.op(
            "com.microsoft::GroupQueryAttention",
            *(q, k, v, k_cache, v_cache, seqlens_k, total, cos_cache, sin_cache),
            num_heads_i=heads,
            kv_num_heads_i=kv_heads,
            do_rotary_i=1,
            rotary_interleaved_i=0,  # HF Llama's rotate-half layout
            outputs=3,
        )
        # Their types, each dimension left open: torch's exporter knows no shape inference for the op, and said so
        # in six warnings on every export, which read like a broken one (a new user's trial)
        for output, like in zip(outputs, (q, k_cache, v_cache), strict=True):
            output.setType(like.type().with_sizes([None] * 4 if like is not q else [None] * 3))
        return outputs


class SharedBufferKV:
    """The model's KVStore for the export: rotary, the in-place cache write and attention are one fused op."""

    fuses_rotary = True

    def __init__(self, config, caches: list, seqlens_k, total, cos_cache, sin_cache) -> None:
        # Head counts from the config: plain ints, where shapes read while tracing would be traced values.
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.caches, self.seqlens_k, self.total, self.present = caches, seqlens_k, total, []
        self.cos_cache, self.sin_cache = cos_cache, sin_cache

    def attend_projections(self, layer: int, q, k, v):
        k_cache, v_cache = self.caches[layer]
        out, k_cache, v_cache = _GroupQueryAttention.apply(
            q,
            k,
            v,
            k_cache,
            v_cache,
            self.seqlens_k,
            self.total,
            self.cos_cache,
            self.sin_cache,
            self.heads,
            self.kv_heads,
        )
        self.present += [k_cache, v_cache]
        return out


class _SharedBufferDecoder(nn.Module):
    """Flattens the per-layer (key, value) buffers into positional ONNX inputs and outputs."""

    def __init__(self, model: LlamaForCausalLM) -> None:
        super().__init__()
        self.model = model
        c = model.config
        # cos/sin of every position the model may see, half a head wide (the op's layout), with rope scaling.
        cos, sin = model.model.rotary_emb(torch.arange(c.max_position_embeddings).unsqueeze(0))
        self.register_buffer("cos_cache", cos[0, :, : c.head_dim // 2].contiguous())
        self.register_buffer("sin_cache", sin[0, :, : c.head_dim // 2].contiguous())

    def forward(self, input_ids, seqlens_k, total_sequence_length, logits_to_keep, *caches):
        caches = list(zip(caches[0::2], caches[1::2], strict=True))
        kv = SharedBufferKV(self.model.config, caches, seqlens_k, total_sequence_length, self.cos_cache, self.sin_cache)
        hidden = self.model.hidden_states(input_ids, None, kv)
        tokens = hidden.shape[1]
        last = torch.arange(tokens - logits_to_keep, tokens)  # a Range in the graph: the kept positions
        logits = self.model.lm_head(hidden.index_select(1, last)).float()
        return (logits, *kv.present)


def _export(module: nn.Module, args: tuple, path: Path, names_in: list[str], names_out: list[str], axes: dict) -> None:
    torch.onnx.export(
        module,
        args,
        str(path),
        input_names=names_in,
        output_names=names_out,
        dynamic_axes=axes,
        opset_version=OPSET,
        custom_opsets={"com.microsoft": 1},
        dynamo=False,
    )


def checkpoint_hash(checkpoint_dir: Path) -> str:
    """The content an export is made of: the weights, and the files the agent reads of it (the tokenizer,
    generation_config.json's end-of-turn ids). Weights alone kept an export made before the checkpoint's
    generation_config.json gained an end-of-turn id, which then decoded past it (a review)."""
    digest = hashlib.sha256()
    read = [Path(checkpoint_dir) / name for name in EXPORT_READS if (Path(checkpoint_dir) / name).is_file()]
    for path in [*read, *weight_files(checkpoint_dir)]:
        digest.update(f"{path.name}\0{path.stat().st_size}\0".encode())  # a file moved between names is a change
        with open(path, "rb") as f:
            while block := f.read(1 << 20):
                digest.update(block)
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    """In 1 MB reads: a model's external weights may be gigabytes, which read whole sat in memory at every start."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


class ExportError(ValueError):
    """An export folder that must not be run; the message says what is wrong with it."""


def _file_in(export_dir: Path, name: object, manifest_path: Path) -> Path:
    """`export_dir / name` for a file the manifest lists, when the name is a normalized relative POSIX path (no
    absolute path, no `..`, no backslash or drive letter, no NUL, not empty) that stays inside the folder after
    following any symlink already there; ExportError naming the file otherwise."""
    problem = unsafe_name(name)
    if problem is None:
        path = export_dir / name
        try:
            if export_dir.resolve() in path.resolve().parents:
                return path
        except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
            pass
        problem = f"it leads outside {export_dir}"
    shown = repr(name) if len(repr(name)) <= 80 else repr(name)[:77] + "..."
    raise ExportError(f"{manifest_path}: file name {shown} is unsafe ({problem}); export it again")


def export_onnx(
    checkpoint_dir: Path,
    out_dir: Path,
    quantization: Quantization = FP32,
    show_progress: bool = True,
    cache: bool = False,
) -> Path:
    """Export with explicit KV, quantize as asked, write the manifest; returns out_dir. `cache`: out_dir is the
    agent's own cache folder (whatever it holds of an export is its own to replace, manifest or not)."""
    checkpoint_dir, out_dir = Path(checkpoint_dir), Path(out_dir)
    if out_dir.is_symlink():  # the folder it names: a folder renamed over the link failed after the whole export
        out_dir = out_dir.resolve()
    try:  # before any work: a folder of someone else's is refused, never emptied
        check_replaceable(out_dir, _export_writes)
    except ForeignFolder as exc:
        raise ExportError(str(exc)) from None
    if not cache:  # (a review: an agent's cached export that lost its manifest stopped the agent's start)
        _check_ours(out_dir)
    with Progress(disable=not show_progress, transient=True) as progress:
        task = progress.add_task(f"exporting {checkpoint_dir.name} to ONNX ({quantization.name})", total=5)
        source_hash = checkpoint_hash(checkpoint_dir)
        model = load_model(checkpoint_dir)
        progress.advance(task)
        c = model.config
        if c.max_position_embeddings < TRACE_TOKENS:  # the trace's step (below) needs that many positions
            raise ExportError(
                f"a context of {c.max_position_embeddings} tokens (max_position_embeddings, or sliding_window): the "
                f"export needs at least {TRACE_TOKENS}"
            )
        if c.head_dim % 16:
            raise ExportError(
                f"head_dim {c.head_dim}: onnxruntime's GroupQueryAttention with rotary needs a multiple of 16"
            )
        names_in = ["input_ids", "seqlens_k", "total_sequence_length", "logits_to_keep"]
        names_out = ["logits"]
        axes = {"input_ids": {1: "tokens"}, "logits": {1: "kept"}}
        for i in range(c.num_hidden_layers):
            for kind in ("key", "value"):
                names_in.append(f"past_key_values.{i}.{kind}")
                names_out.append(f"present.{i}.{kind}")
                axes[names_in[-1]] = {2: "capacity"}
                axes[names_out[-1]] = {2: "capacity"}
        # Trace a step with cached tokens before it, so no shape is specialised to an empty cache.
        caches = [torch.zeros(1, c.num_key_value_heads, 8, c.head_dim) for _ in range(2 * c.num_hidden_layers)]
        seqlens_k, total = torch.tensor([4], dtype=torch.int32), torch.tensor(TRACE_TOKENS, dtype=torch.int32)
        args = (torch.tensor([[1, 2, 3]]), seqlens_k, total, torch.tensor(2), *caches)
        # A folder of this process's own, renamed into place when whole (serving/atomic_dir.py): a crash mid-export
        # never leaves a folder that looks finished, and two agents sharing a cache keep whichever finished first.
        with building(out_dir, lambda done: _same_export(done, source_hash, quantization), _export_writes) as tmp_dir:
            fp32_path = tmp_dir / "fp32.onnx"
            with warnings.catch_warnings():
                # The tracer warns about Python-level shape checks; they are constant for a given config.
                warnings.simplefilter("ignore", torch.jit.TracerWarning)
                # Opset 21 (for INT4 initializers) is past what torch's exporter declares; the graph is held to HF's
                # logits by the tests, and the warning read like a broken export (a new user's trial)
                warnings.filterwarnings("ignore", message="Exporting to ONNX opset version")
                _export(_SharedBufferDecoder(model).eval(), args, fp32_path, names_in, names_out, axes)
            progress.advance(task)
            quantize(fp32_path, tmp_dir / MODEL_NAME, quantization)
            sizes = {
                "model_bytes": sum(
                    p.stat().st_size
                    for p in (tmp_dir / MODEL_NAME, tmp_dir / external_data_file(MODEL_NAME))
                    if p.exists()
                ),
                "linear_weight_bytes": linear_weight_bytes(tmp_dir / MODEL_NAME),
                "fp32_linear_weight_bytes": linear_weight_bytes(fp32_path),
            }
            for made in tmp_dir.iterdir():  # the fp32 graph, and the weights torch wrote one file each past 2 GB
                if made.name not in (MODEL_NAME, external_data_file(MODEL_NAME)):
                    made.unlink()
            progress.advance(task)
            for name in TOKENIZER_FILES:
                if (checkpoint_dir / name).is_file():
                    shutil.copy(checkpoint_dir / name, tmp_dir / name)
            progress.advance(task)
            manifest = {
                "format_version": FORMAT_VERSION,
                "graph_version": GRAPH_VERSION,
                "source_checkpoint_sha256": source_hash,
                "quantization": quantization.as_dict(),
                "num_layers": c.num_hidden_layers,
                "max_context_tokens": c.max_position_embeddings,
                "eos_token_ids": list(c.eos_token_ids),
                "sizes": sizes,
                "files": {p.name: _file_sha256(p) for p in sorted(tmp_dir.iterdir())},
            }
            (tmp_dir / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")
        progress.advance(task)
    log.info("exported %s to %s (%s)", checkpoint_dir, out_dir, quantization.name)
    return out_dir


def _export_writes(name: str) -> bool:
    """A name an export folder holds: the model (and its external data, past 2 GB), the tokenizer and config, the
    manifest; exactly those (a review: every name starting `model.onnx` was taken for ours, and a user's
    `model.onnx.bak` deleted with the folder it was in)."""
    return name in (MANIFEST_NAME, *TOKENIZER_FILES, MODEL_NAME, external_data_file(MODEL_NAME))


def _check_ours(out_dir: Path) -> None:
    """A folder an export may replace: missing, empty, or an export (it has the manifest every export writes
    before its folder is in place). A folder of ONNX files of the user's own (optimum's, say: `model.onnx`,
    `config.json`) was deleted and replaced, its names being an export's names too (a review)."""
    try:
        held = sorted(p.name for p in out_dir.iterdir() if p.name not in DESKTOP_LITTER) if out_dir.is_dir() else []
    except OSError:
        return  # what cannot be listed is said by the building, in its own words
    if held and MANIFEST_NAME not in held:
        raise ExportError(
            f"{out_dir} holds {', '.join(held[:3])}{' and more' if len(held) > 3 else ''} but no {MANIFEST_NAME}: "
            "it is no export of Tandem's, and is left as it is: choose a new or empty folder"
        )


def _same_export(export_dir: Path, source_hash: str, quantization: Quantization) -> bool:
    """An export another process finished meanwhile: whole, of this checkpoint, quantized this way."""
    try:
        manifest = verify_export(export_dir)
    except ExportError:
        return False
    return (
        manifest.get("source_checkpoint_sha256") == source_hash
        and manifest.get("quantization") == json.loads(json.dumps(quantization.as_dict()))  # as the manifest has it
        and manifest.get("graph_version") == GRAPH_VERSION  # an older release's graph, in a folder the user named
    )


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
    except (ValueError, KeyError, TypeError) as exc:
        raise ExportError(f"{manifest_path}: not a Tandem export manifest ({exc})") from exc
    if version != FORMAT_VERSION:
        raise ExportError(f"{manifest_path}: format version {version!r}; this agent reads version {FORMAT_VERSION!r}")
    if not isinstance(files, dict):
        raise ExportError(f"{manifest_path}: not a Tandem export manifest (files is not a name-to-checksum map)")
    paths = {name: _file_in(export_dir, name, manifest_path) for name in files}  # every name, before any is read
    for name, expected in files.items():
        path = paths[name]
        if not path.is_file():
            raise ExportError(f"{export_dir}: {name} is missing; the export is incomplete, export it again")
        try:
            same = _file_sha256(path) == expected
        except OSError as exc:  # gone since is_file() (a neighbour's collection), or unreadable
            raise ExportError(f"{export_dir}: {name} cannot be read ({exc.strerror}); export it again") from None
        if not same:
            raise ExportError(f"{export_dir}: {name} does not match its checksum in {MANIFEST_NAME}; export it again")
    return manifest


def cached_export(checkpoint_dir: Path, cache_dir: Path, quantization: Quantization = FP32) -> Path:
    """The export for this checkpoint's content and quantization, made on first use (and remade if damaged). The
    exports no start needs any more are removed (`collect_stale`)."""
    out_dir = Path(cache_dir) / checkpoint_hash(checkpoint_dir)[:16] / f"{quantization.name}-g{GRAPH_VERSION}"
    ready = None
    if (out_dir / MANIFEST_NAME).is_file():
        _note_use(out_dir, checkpoint_dir)  # before the checksums' seconds: a neighbour collecting sees it in use
        try:
            verify_export(out_dir)
            ready = out_dir
        except ExportError as exc:
            log.warning("cached export unusable, exporting again: %s", exc)
    ready = ready or export_onnx(checkpoint_dir, out_dir, quantization, cache=True)
    _note_use(ready, checkpoint_dir)
    collect_stale(Path(cache_dir), keep=ready.parent)
    return ready


# An export no agent started from for this long is removed at the next start from the same cache; one of a
# checkpoint folder whose content changed since, at once. Before, every edit of a checkpoint (a fine-tune saved over
# the last) left a whole export behind for good: gigabytes a model, on a laptop's disk (a review).
STALE_AFTER_S = 30 * 86400.0
SOURCE_NAME = "source.txt"  # beside a checkpoint's exports: the folder they were made from
_CHECKPOINT_KEY = re.compile(r"[0-9a-f]{16}")
_EXPORT_NAME = re.compile(r"[A-Za-z0-9_-]+-g\d+")  # int4-b32-a4-g6


IN_USE_MARK_S = 6 * 3600.0


async def keep_marked_in_use(export_dir: Path) -> None:
    """A running agent marks its export used every few hours: one up for 30 days lost it to a neighbour's start on
    the same cache (a review)."""
    while True:
        await asyncio.sleep(IN_USE_MARK_S)
        with contextlib.suppress(OSError):
            os.utime(export_dir)


def _note_use(export_dir: Path, checkpoint_dir: Path) -> None:
    """Marks `export_dir` used now, and which checkpoint folder its content came from (written whole)."""
    with contextlib.suppress(OSError):  # a read-only cache: nothing is collected, nothing fails
        os.utime(export_dir)
        source = export_dir.parent / SOURCE_NAME
        tmp = source.with_name(f"{SOURCE_NAME}.{os.getpid()}")
        tmp.write_text(str(Path(checkpoint_dir).resolve()) + "\n", encoding="utf-8")
        tmp.replace(source)


def collect_stale(cache_dir: Path, keep: Path, now: float | None = None) -> list[Path]:
    """Removes from `cache_dir` (returning them) the exports of a checkpoint folder whose content is now `keep`'s
    (made from the same folder before it changed) and those unused for STALE_AFTER_S. Only folders named as the
    cache names them (`<16 hex digits>/<quantization>-g<N>`) are looked at, never `keep`'s own content's."""
    now = time.time() if now is None else now
    ours = _read_source(keep)
    removed = []
    try:
        keys = [p for p in cache_dir.iterdir() if _CHECKPOINT_KEY.fullmatch(p.name) and p.is_dir()]
    except OSError:
        return removed
    for key in keys:
        if key.is_symlink():
            continue
        exports = [p for p in key.iterdir() if _EXPORT_NAME.fullmatch(p.name) and p.is_dir() and not p.is_symlink()]
        replaced = key != keep and ours is not None and _read_source(key) == ours
        before = len(removed)
        for export in exports:
            if key == keep and export.name.endswith(f"-g{GRAPH_VERSION}"):
                continue  # this checkpoint's content, another quantization's: other agents' (or this one's next)
            unused_s = now - export.stat().st_mtime
            if replaced or unused_s > STALE_AFTER_S:
                shutil.rmtree(export, ignore_errors=True)
                removed.append(export)
                log.info(
                    "removed the export %s: %s", export,
                    "its checkpoint folder holds another model now" if replaced else
                    f"unused for {unused_s / 86400:.0f} days",
                )  # fmt: skip
        if len(removed) > before and not any(p.is_dir() for p in key.iterdir()):  # (partial folders are folders)
            with contextlib.suppress(OSError):
                (key / SOURCE_NAME).unlink(missing_ok=True)
                key.rmdir()
    return removed


def _read_source(key: Path) -> str | None:
    try:
        return (key / SOURCE_NAME).read_text(encoding="utf-8").strip() or None
    except (OSError, UnicodeDecodeError):
        return None
