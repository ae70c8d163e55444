"""Oracle: the fp32 ONNX export against HF transformers, with and without past KV."""

import asyncio
import json
import shutil

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM

from edge_agent.export import MANIFEST_NAME, cached_export
from edge_agent.runner import OnnxStepModel
from edge_agent.server import engine_for
from serving.engine_api import GenerationRequest, SamplingParams

PROMPT = [1, 309, 201, 428, 307, 265, 411, 339, 406, 33, 2, 201, 1, 343, 201]


@pytest.fixture(scope="module")
def export_dir(demo_checkpoint, tmp_path_factory):
    return cached_export(demo_checkpoint, tmp_path_factory.mktemp("edge-cache"))


@pytest.fixture(scope="module")
def hf(demo_checkpoint):
    return AutoModelForCausalLM.from_pretrained(demo_checkpoint, dtype=torch.float32).eval()


def test_prefill_logits_equal_hf(export_dir, hf):
    step = OnnxStepModel(export_dir)
    logits, _ = step.prefill(PROMPT)
    with torch.no_grad():
        expected = hf(torch.tensor([PROMPT])).logits[0, -1]
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=0)


def test_decode_with_past_equals_hf(export_dir, hf):
    step = OnnxStepModel(export_dir)
    _, state = step.prefill(PROMPT[:-4])
    for offset, token in enumerate(PROMPT[-4:]):
        logits, state = step.decode(state, token, len(PROMPT) - 4 + offset)
    with torch.no_grad():
        expected = hf(torch.tensor([PROMPT])).logits[0, -1]
    torch.testing.assert_close(logits, expected, atol=1e-4, rtol=0)
    assert state.length == len(PROMPT)


def test_the_lm_head_runs_on_the_kept_positions_only(export_dir):
    step = OnnxStepModel(export_dir)
    every = step.logits(PROMPT)  # logits_to_keep = all
    last_three = step._run(PROMPT, 0, keep=3)
    assert every.shape[0] == len(PROMPT) and last_three.shape[0] == 3
    np.testing.assert_allclose(last_three, every[-3:], atol=1e-5)
    logits, _ = step.prefill(PROMPT)  # keep = 1
    np.testing.assert_allclose(logits.numpy(), every[-1], atol=1e-5)


def test_export_is_cached_by_checkpoint_content(demo_checkpoint, export_dir):
    before = (export_dir / "model.onnx").stat().st_mtime_ns
    again = cached_export(demo_checkpoint, export_dir.parent.parent)
    assert again == export_dir and (export_dir / "model.onnx").stat().st_mtime_ns == before
    manifest = json.loads((export_dir / MANIFEST_NAME).read_text())
    assert manifest["quantization"]["bits"] == 32 and "model.onnx" in manifest["files"]


@pytest.mark.parametrize(("name", "change"), [("generation_config.json", "eos"), ("tokenizer.json", "whitespace")])
def test_an_export_is_made_again_when_a_file_it_copies_changes(demo_checkpoint, tmp_path, name, change):
    """The cache was keyed by config.json and the weights: a generation_config.json that gained an end-of-turn id
    (as Llama-3-Instruct's fix did) kept the old export, which decoded past it (a review)."""
    from edge_agent.export import checkpoint_hash

    checkpoint = tmp_path / "tandem-demo"
    shutil.copytree(demo_checkpoint, checkpoint)
    before = checkpoint_hash(checkpoint)
    path = checkpoint / name
    if change == "eos":
        config = json.loads(path.read_text()) if path.is_file() else {}
        path.write_text(json.dumps(config | {"eos_token_id": [2, 16]}))
    else:
        path.write_text(path.read_text() + "\n")
    assert checkpoint_hash(checkpoint) != before


def test_edge_engine_reports_provider_and_matches_cloud_greedy_and_seeded(demo_checkpoint, export_dir):
    """Greedy, and sampled with a seed: one sampler on both tiers, so the same seed gives the same tokens."""
    from cloud_worker.build import build_engine as build_cloud

    async def tokens(engine, **sampling):
        request = GenerationRequest("r", tuple(PROMPT), SamplingParams(max_tokens=24, **sampling))
        return [t async for c in engine.generate(request) for t in c.token_ids]

    edge, cloud = engine_for(export_dir, demo_checkpoint), build_cloud(demo_checkpoint)
    try:
        assert edge.stats().execution_provider == "CPUExecutionProvider"
        assert edge.stats().kind == "edge"
        assert asyncio.run(tokens(edge, temperature=0)) == asyncio.run(tokens(cloud, temperature=0))
        seeded = dict(temperature=1.2, top_p=0.95, seed=42, ignore_eos=True)
        assert asyncio.run(tokens(edge, **seeded)) == asyncio.run(tokens(cloud, **seeded))
        assert asyncio.run(tokens(edge, **seeded)) != asyncio.run(tokens(edge, **seeded | {"seed": 43}))
    finally:
        edge.close()
        cloud.close()


def test_the_cli_refuses_to_export_into_a_folder_of_someone_elses(demo_checkpoint, tmp_path, export_dir):
    """`tandem edge export CKPT mydir` deleted what mydir held; `CKPT CKPT` deleted the checkpoint's weights. Both
    are refused before any work, untouched; an older export there is replaced."""
    import shutil

    from typer.testing import CliRunner

    from tandem.cli import app

    mine = tmp_path / "mydir"
    (mine / "notes").mkdir(parents=True)
    (mine / "notes" / "thesis.txt").write_text("important")
    before = sorted(p.name for p in demo_checkpoint.iterdir())
    for out in (mine, demo_checkpoint):
        result = CliRunner().invoke(app, ["edge", "export", str(demo_checkpoint), str(out), "--bits", "32"])
        assert result.exit_code == 1 and "which this does not write" in result.output, result.output
        assert "Traceback" not in result.output
    assert (mine / "notes" / "thesis.txt").read_text() == "important"
    assert sorted(p.name for p in demo_checkpoint.iterdir()) == before
    older = tmp_path / "older"
    shutil.copytree(export_dir, older)
    (older / MANIFEST_NAME).write_text("{}")  # an export of another version, or broken: ours to replace
    result = CliRunner().invoke(app, ["edge", "export", str(demo_checkpoint), str(older), "--bits", "32"])
    assert result.exit_code == 0, result.output
    assert json.loads((older / MANIFEST_NAME).read_text())["files"]
    # (a review) A folder of the user's own ONNX files, whose names an export writes too, was deleted and replaced:
    # with no manifest it is no export, and is refused whole; a name an export does not write is foreign
    optimum = tmp_path / "optimum"
    optimum.mkdir()
    for name in ("model.onnx", "config.json"):
        (optimum / name).write_text(f"the user's {name}")
    bak = tmp_path / "bak"
    shutil.copytree(export_dir, bak)
    (bak / "model.onnx.bak").write_text("the user's backup")
    for out, said in ((optimum, "but no manifest.json: it is no export"), (bak, "model.onnx.bak, which this")):
        before = {p.name: p.read_bytes() for p in out.iterdir()}
        result = CliRunner().invoke(app, ["edge", "export", str(demo_checkpoint), str(out), "--bits", "32"])
        assert result.exit_code == 1 and said in result.output and "Traceback" not in result.output, result.output
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_context_too_short_to_trace_is_refused_and_a_linked_folder_is_exported_into(demo_checkpoint, tmp_path):
    """(a review) A context under 5 tokens ended the export in a 381-line IndexError; an OUT that is a symbolic
    link to an empty folder failed after the whole export (`Not a directory`), nothing written where it pointed."""
    from edge_agent.export import ExportError, export_onnx
    from edge_agent.quantize import Quantization

    tiny = tmp_path / "tiny"
    shutil.copytree(demo_checkpoint, tiny)
    config = json.loads((tiny / "config.json").read_text()) | {"max_position_embeddings": 4}
    (tiny / "config.json").write_text(json.dumps(config))
    with pytest.raises(ExportError, match="a context of 4 tokens .* needs at least 5"):
        export_onnx(tiny, tmp_path / "out", Quantization(bits=32), show_progress=False)
    target = tmp_path / "target"
    target.mkdir()
    (target / ".DS_Store").write_bytes(b"\0")  # a desktop's litter is no one's files (a review: it was refused)
    (tmp_path / "link").symlink_to(target)
    export_onnx(demo_checkpoint, tmp_path / "link", Quantization(bits=32), show_progress=False)
    assert (target / MANIFEST_NAME).is_file() and (tmp_path / "link").is_symlink()
