"""Quantized exports (MatMulNBits INT4/INT8, fp16) and the manifest that guards every export."""

import json
import shutil

import numpy as np
import onnx
import pytest

from edge_agent.export import MANIFEST_NAME, ExportError, cached_export, export_onnx, verify_export
from edge_agent.quantize import Quantization
from edge_agent.runner import OnnxStepModel

PROMPT = [1, 309, 201, 428, 307, 265, 411, 339, 406, 33, 2, 201, 1, 343, 201]


@pytest.fixture(scope="module")
def exports(demo_checkpoint, tmp_path_factory):
    root = tmp_path_factory.mktemp("quantized")
    variants = {
        "fp32": Quantization(bits=32),
        "int4": Quantization(bits=4, block_size=32),
        "int4-head32": Quantization(bits=4, block_size=32, keep_lm_head=True),
        "int4-emb4": Quantization(bits=4, block_size=32, quantize_embedding=True),
        "int8": Quantization(bits=8, block_size=32),
        "fp16": Quantization(bits=16),
    }
    return {name: export_onnx(demo_checkpoint, root / name, q, show_progress=False) for name, q in variants.items()}


def manifest(path):
    return json.loads((path / MANIFEST_NAME).read_text())


def test_int4_linear_weights_are_at_most_0_3_of_fp32(exports):
    sizes = manifest(exports["int4"])["sizes"]
    assert sizes["linear_weight_bytes"] <= 0.3 * sizes["fp32_linear_weight_bytes"], sizes
    ops = [n.op_type for n in onnx.load(str(exports["int4"] / "model.onnx")).graph.node]
    assert ops.count("MatMulNBits") == 15  # 2 layers x 7 linears + LM head
    assert ops.count("GroupQueryAttention") == 2 and "MatMul" not in ops  # attention is the fused op
    head_kept = [n.op_type for n in onnx.load(str(exports["int4-head32"] / "model.onnx")).graph.node]
    assert head_kept.count("MatMulNBits") == 14


def test_int4_can_quantize_the_embedding_too(exports):
    """The embedding table as GatherBlockQuantized when asked: otherwise it stays fp32, most of a small file."""
    ops = [n.op_type for n in onnx.load(str(exports["int4-emb4"] / "model.onnx")).graph.node]
    plain = [n.op_type for n in onnx.load(str(exports["int4"] / "model.onnx")).graph.node]
    assert ops.count("GatherBlockQuantized") == 1 and "GatherBlockQuantized" not in plain
    size = {name: manifest(exports[name])["sizes"]["model_bytes"] for name in ("fp32", "int4", "int4-emb4")}
    assert size["int4-emb4"] < 0.8 * size["int4"], size  # the demo's table is 512 x 64: a third of its INT4 file
    assert manifest(exports["int4-emb4"])["quantization"]["embedding"] == "quantized"
    assert manifest(exports["int4"])["quantization"]["embedding"] == "fp32"


@pytest.mark.parametrize(
    "variant, min_cosine", [("int8", 0.999), ("fp16", 0.9999), ("int4", 0.95), ("int4-emb4", 0.95)]
)
def test_quantized_logits_stay_close_to_fp32(exports, variant, min_cosine):
    reference, _ = OnnxStepModel(exports["fp32"]).prefill(PROMPT)
    logits, _ = OnnxStepModel(exports[variant]).prefill(PROMPT)
    a, b = reference.numpy(), logits.numpy()
    assert float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) >= min_cosine
    assert manifest(exports[variant])["quantization"]["bits"] == {"int8": 8, "fp16": 16}.get(variant, 4)


@pytest.mark.parametrize(
    "damage, message",
    [
        (
            lambda d: (d / "model.onnx").write_bytes((d / "model.onnx").read_bytes() + b"x"),
            "model.onnx does not match its checksum",
        ),
        (lambda d: (d / "tokenizer.json").unlink(), "tokenizer.json is missing"),
        (lambda d: (d / MANIFEST_NAME).unlink(), "no manifest.json"),
        (
            lambda d: (d / MANIFEST_NAME).write_text(json.dumps(manifest(d) | {"format_version": 99})),
            "format version 99",
        ),
    ],
    ids=["tampered-model", "missing-file", "no-manifest", "future-format"],
)
def test_the_agent_refuses_an_export_that_does_not_match_its_manifest(exports, tmp_path, damage, message):
    copy = shutil.copytree(exports["int8"], tmp_path / "copy")
    verify_export(copy)
    damage(copy)
    with pytest.raises(ExportError, match=message):
        OnnxStepModel(copy)


def test_a_damaged_cached_export_is_made_again(demo_checkpoint, tmp_path):
    first = cached_export(demo_checkpoint, tmp_path, Quantization(bits=8))
    (first / "model.onnx").write_bytes(b"garbage")
    again = cached_export(demo_checkpoint, tmp_path, Quantization(bits=8))
    assert again == first and verify_export(again)
    # (a review) one that lost its manifest (a neighbour's collection killed halfway) is the agent's own all the
    # same: made again, where the rule for a folder a user names (no manifest: not an export) stopped the start
    (first / "manifest.json").unlink()
    assert cached_export(demo_checkpoint, tmp_path, Quantization(bits=8)) == first and verify_export(first)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"bits": 3},
        {"bits": 4, "block_size": 24},
        {"bits": 4, "block_size": 8},
        {"bits": 4, "block_size": 512},  # (a review) onnxruntime's kernels take up to 256: a traceback after the export
        {"bits": 4, "accuracy_level": 99},  # (a review) each was accepted and did nothing
        {"bits": 16, "quantize_embedding": True},
        {"bits": 8, "quantize_embedding": True},
    ],
)
def test_bad_quantization_settings_are_refused(kwargs):
    with pytest.raises(ValueError):
        Quantization(**kwargs)


def all_logits(export_dir, ids):
    """Logits at every position of one prefill (the runner returns only the last)."""
    return OnnxStepModel(export_dir).logits(ids)


def test_int4_against_fp32_on_real_text(exports, demo_checkpoint):
    """The issue's bars: logits cosine >= 0.98 and top-1 agreement >= 90 %, over the bundled text.

    Measured on the demo (hidden size 64, block 32): cosine 0.982, top-1 99.7 % over 382 positions.
    The demo was fitted to this text; on text it never saw, top-1 agreement is 83 to 88 %, which is
    what a 64-wide model's near-flat distributions give there, not a property of the export.
    """
    from serving.checkpoint import load_tokenizer
    from tandem.demo_model import CORPUS_PATH

    ids = load_tokenizer(demo_checkpoint).encode(CORPUS_PATH.read_text()).ids
    assert len(ids) >= 300
    reference, quantized = all_logits(exports["fp32"], ids), all_logits(exports["int4"], ids)
    cosine = (reference * quantized).sum(-1) / np.linalg.norm(reference, axis=-1) / np.linalg.norm(quantized, axis=-1)
    assert cosine.mean() >= 0.98
    assert (reference.argmax(-1) == quantized.argmax(-1)).mean() >= 0.90


@pytest.mark.parametrize("variant", ["fp32", "int4", "fp16"])
def test_large_weights_go_to_one_file_beside_the_graph_and_an_export_replaces_its_own(
    exports, demo_checkpoint, tmp_path, monkeypatch, variant
):
    """One protobuf holds at most 2 GB: an INT4 or fp16 export of a model with a large vocabulary failed to save,
    and an fp32 one left a file per tensor, which the next export into its folder took for someone else's (a
    review). Past EXTERNAL_DATA_BYTES (here 0, as a model of billions of weights), the weights are one file."""
    from edge_agent import quantize as quantize_module

    monkeypatch.setattr(quantize_module, "EXTERNAL_DATA_BYTES", 0)
    q = {"fp32": Quantization(bits=32), "int4": Quantization(bits=4, block_size=32), "fp16": Quantization(bits=16)}
    out = export_onnx(demo_checkpoint, tmp_path / variant, q[variant], show_progress=False)
    listed = manifest(out)["files"]
    assert "model.onnx.data" in listed and set(listed) == {p.name for p in out.iterdir()} - {MANIFEST_NAME}
    assert not [name for name in listed if name.startswith(("onnx__", "fp32"))]
    big, small = OnnxStepModel(out), OnnxStepModel(exports[variant])
    np.testing.assert_allclose(big.prefill(PROMPT)[0].numpy(), small.prefill(PROMPT)[0].numpy(), rtol=0, atol=1e-5)
    assert manifest(out)["sizes"]["model_bytes"] >= (out / "model.onnx.data").stat().st_size
    assert export_onnx(demo_checkpoint, out, q[variant], show_progress=False) == out  # its own folder, replaced


def test_an_export_of_a_checkpoint_saved_over_is_removed_at_the_next_start(demo_checkpoint, tmp_path):
    """Every edit of a checkpoint folder (a fine-tune saved over the last) left its whole export in the cache for
    good, gigabytes a model on a laptop's disk; the next start from that folder removes it, and keeps the exports of
    other folders (another agent's model) until they go unused for 30 days."""
    checkpoint = tmp_path / "ckpt"
    shutil.copytree(demo_checkpoint, checkpoint)
    other = tmp_path / "other"
    shutil.copytree(demo_checkpoint, other)
    (other / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 5]}))
    cache = tmp_path / "cache"
    of_other = cached_export(other, cache, Quantization(bits=8))
    before = cached_export(checkpoint, cache, Quantization(bits=8))
    (checkpoint / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 7]}))  # saved over
    after = cached_export(checkpoint, cache, Quantization(bits=8))
    assert after.parent != before.parent and verify_export(after)
    assert not before.parent.exists(), "the export of the folder's former content was kept"
    assert verify_export(of_other), "another folder's export was removed"


def test_only_exports_unused_for_30_days_and_named_as_the_cache_names_them_are_collected(tmp_path):
    import os
    import time

    from edge_agent.export import GRAPH_VERSION, STALE_AFTER_S, collect_stale

    def made(path, days_ago):
        path.mkdir(parents=True)
        (path / MANIFEST_NAME).write_text("{}")
        when = time.time() - days_ago * 86400
        os.utime(path, (when, when))
        return path

    keep = tmp_path / "0123456789abcdef"
    current = made(keep / f"int4-g{GRAPH_VERSION}", 400)  # this start's content: never, however old
    older_graph = made(keep / "int4-g0", 31)
    old = made(tmp_path / "fedcba9876543210" / "int4-g1", 31)
    recent = made(tmp_path / "aaaaaaaaaaaaaaaa" / "int8-g1", 29)
    users = made(tmp_path / "my-notes" / "int4-g1", 400)  # not the cache's name: a user's
    removed = collect_stale(tmp_path, keep=keep)
    assert sorted(removed) == sorted([older_graph, old])
    assert current.exists() and recent.exists() and users.exists()
    assert not (tmp_path / "fedcba9876543210").exists()  # its last export gone, the folder too
    assert STALE_AFTER_S == 30 * 86400


def test_an_export_in_use_is_not_collected_by_a_neighbours_start(demo_checkpoint, tmp_path, monkeypatch):
    """Marked used only after its checksums were read (seconds on a real model), an export 30 days old was removed
    by a neighbour's start meanwhile; and a running agent's export was never marked again (a review)."""
    import asyncio
    import os
    import time

    from edge_agent import export
    from edge_agent.export import collect_stale, keep_marked_in_use

    cache = tmp_path / "cache"
    first = cached_export(demo_checkpoint, cache, Quantization(bits=8))
    made = (first / MANIFEST_NAME).stat().st_ino
    old = time.time() - 40 * 86400
    os.utime(first, (old, old))
    verify = export.verify_export

    def a_neighbour_collects_meanwhile(export_dir):
        collect_stale(cache, keep=cache / "ffffffffffffffff")
        return verify(export_dir)

    monkeypatch.setattr(export, "verify_export", a_neighbour_collects_meanwhile)
    again = cached_export(demo_checkpoint, cache, Quantization(bits=8))
    assert again == first and (first / MANIFEST_NAME).stat().st_ino == made  # kept, not exported again
    os.utime(first, (old, old))
    monkeypatch.setattr(export, "IN_USE_MARK_S", 0.05)

    async def run_a_while():
        marking = asyncio.ensure_future(keep_marked_in_use(first))
        await asyncio.sleep(0.2)
        marking.cancel()

    asyncio.run(run_a_while())
    assert time.time() - first.stat().st_mtime < 60
