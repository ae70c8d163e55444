"""The serial engine with the real torch model: cancellation, limits, stop ids."""

import asyncio

import pytest
import torch

from edge_agent.serial_engine import SerialEngine
from modeling.loader import load_model
from serving.checkpoint import load_tokenizer
from serving.engine_api import GenerationRequest, RequestRejected, SamplingParams


class CountingStepModel:
    """The real torch model as a StepModel (contiguous KV), counting decode steps so a test can see work stop."""

    def __init__(self, model) -> None:
        self._model = model
        self.max_context_tokens = model.config.max_position_embeddings
        self.vocab_size = model.config.vocab_size
        self.num_decode_steps = 0

    def prefill(self, prompt_token_ids):
        ids = torch.tensor([prompt_token_ids])
        logits, cache = self._model(ids, torch.arange(ids.shape[1]).unsqueeze(0), self._model.empty_cache())
        return logits[0, -1], cache

    def prefill_all(self, prompt_token_ids):
        ids = torch.tensor([prompt_token_ids])
        logits, cache = self._model(ids, torch.arange(ids.shape[1]).unsqueeze(0), self._model.empty_cache())
        return logits[0], cache

    def decode(self, state, token_id, position):
        self.num_decode_steps += 1
        logits, cache = self._model(torch.tensor([[token_id]]), torch.tensor([[position]]), state)
        return logits[0, -1], cache


@pytest.fixture
def engine_and_model(demo_checkpoint):
    model = CountingStepModel(load_model(demo_checkpoint))
    engine = SerialEngine(model, load_tokenizer(demo_checkpoint), (2,), "tandem-demo", "cloud", "torch-cpu")
    yield engine, model
    engine.close()


def request(max_tokens, **kwargs):
    return GenerationRequest("r", (1, 309, 201, 428), SamplingParams(max_tokens=max_tokens, ignore_eos=True, **kwargs))


def test_closing_the_stream_stops_generation(engine_and_model):
    engine, model = engine_and_model

    async def run():
        stream = engine.generate(request(1500))
        await anext(stream)
        await stream.aclose()
        while engine.stats().running:  # the engine notices at its next step
            await asyncio.sleep(0.01)
        # the next request is served at once, not after the abandoned one
        chunks = [c async for c in engine.generate(request(3))]
        return chunks

    chunks = asyncio.run(run())
    assert chunks[-1].finish_reason == "length" and chunks[-1].usage.completion_tokens == 3
    assert model.num_decode_steps < 100  # far from the 1500 the abandoned request asked for


def test_a_queued_request_whose_caller_left_is_no_longer_counted_as_queued(engine_and_model):
    """Its job stays in the queue until the engine reaches it (and skips it), but the queue depth the gateway
    routes on counted it all that while."""
    engine, _ = engine_and_model

    async def run():
        busy = engine.generate(request(1500))
        await anext(busy)
        queued = engine.generate(request(3))
        waiting = asyncio.ensure_future(anext(queued))
        await asyncio.sleep(0.05)
        depth_while_queued = engine.stats().queue_depth
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        await queued.aclose()
        depth_after = engine.stats().queue_depth
        await busy.aclose()
        while engine.stats().running:  # the engine notices at its next step (and emits nothing more)
            await asyncio.sleep(0.01)
        return depth_while_queued, depth_after

    assert asyncio.run(run()) == (1, 0)


def test_prompt_plus_max_tokens_past_the_context_is_rejected(engine_and_model):
    engine, _ = engine_and_model

    async def run():
        return [c async for c in engine.generate(request(2048))]

    with pytest.raises(RequestRejected, match="exceeds this worker's context of 2048"):
        asyncio.run(run())


def test_stop_token_ids_end_the_sequence(engine_and_model):
    engine, _ = engine_and_model

    async def run(params):
        return [c async for c in engine.generate(GenerationRequest("r", (1, 309), params))]

    first = asyncio.run(run(SamplingParams(max_tokens=8, ignore_eos=True)))
    tokens = [t for c in first for t in c.token_ids]
    stopped = asyncio.run(run(SamplingParams(max_tokens=8, ignore_eos=True, stop_token_ids=(tokens[2],))))
    assert [t for c in stopped for t in c.token_ids] == tokens[: tokens.index(tokens[2])]
    assert stopped[-1].finish_reason == "stop"
