"""The demo checkpoint: deterministic, fitted to its corpus, in Hugging Face layout."""

import json

from tandem.demo_model import DemoShape, write_demo_checkpoint


def test_same_arguments_same_bytes(tmp_path):
    shape = DemoShape(fit_steps=10)
    a, b = write_demo_checkpoint(tmp_path / "a", shape), write_demo_checkpoint(tmp_path / "b", shape)
    for name in (
        "model.safetensors",
        "tokenizer.json",
        "config.json",
        "tokenizer_config.json",
        "generation_config.json",
    ):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    assert (a / "model.safetensors").read_bytes() != (
        write_demo_checkpoint(tmp_path / "c", DemoShape(fit_steps=0)) / "model.safetensors"
    ).read_bytes()


def test_a_build_killed_midway_leaves_nothing_that_looks_like_a_checkpoint(tmp_path, monkeypatch):
    """Ctrl-C while the first `make up` fits the demo: the next start must build it again, not serve half of it."""
    import pytest

    import tandem.demo_model

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(tandem.demo_model, "_fit", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_demo_checkpoint(tmp_path / "demo", DemoShape(fit_steps=0))
    assert not (tmp_path / "demo").exists()  # only the .partial folder, which the next build clears
    monkeypatch.undo()
    built = write_demo_checkpoint(tmp_path / "demo", DemoShape(fit_steps=0))
    assert (built / "model.safetensors").is_file() and not (tmp_path / "demo.partial").exists()


def test_the_demo_recites_its_corpus(demo_checkpoint):
    import asyncio

    from cloud_worker.build import build_engine
    from serving.checkpoint import load_tokenizer
    from serving.engine_api import GenerationRequest, SamplingParams

    tokenizer = load_tokenizer(demo_checkpoint)
    prompt = tokenizer.encode("Tandem answers a question where it is").ids
    engine = build_engine(demo_checkpoint)

    async def complete():
        request = GenerationRequest("r", tuple(prompt), SamplingParams(max_tokens=8))
        return "".join([c.text async for c in engine.generate(request)])

    try:
        assert asyncio.run(complete()).startswith(" cheapest and safest")
    finally:
        engine.close()
    assert json.loads((demo_checkpoint / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
