"""Penalties and biases against HF transformers' own processors and generate(), on both engines."""

import asyncio

import pytest
import torch
from transformers import AutoModelForCausalLM
from transformers.generation.logits_process import RepetitionPenaltyLogitsProcessor, SequenceBiasLogitsProcessor

from serving.engine_api import GenerationRequest, RequestRejected, SamplingParams
from serving.logits_processors import apply_penalties

VOCAB = 50
PROMPT = [1, 309, 201, 428, 309, 57, 88, 201]


def test_repetition_penalty_is_hfs():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, VOCAB, generator=gen) * 3
    ids = torch.randint(0, VOCAB, (3, 12), generator=gen)
    params = [SamplingParams(repetition_penalty=1.7), SamplingParams(), SamplingParams(repetition_penalty=0.6)]
    got = apply_penalties(logits, params, [r[:8].tolist() for r in ids], [r[8:].tolist() for r in ids])
    for row, penalty in ((0, 1.7), (2, 0.6)):
        expected = RepetitionPenaltyLogitsProcessor(penalty)(ids[row : row + 1], logits[row : row + 1].clone())
        torch.testing.assert_close(got[row], expected[0])
    assert torch.equal(got[1], logits[1])  # a row that asks for nothing is untouched


def test_logit_bias_is_hfs_sequence_bias_for_single_tokens():
    logits = torch.randn(1, VOCAB, generator=torch.Generator().manual_seed(1))
    bias = ((3, -100.0), (7, 5.5), (49, 0.25))
    got = apply_penalties(logits, [SamplingParams(logit_bias=bias)], [[1, 2]], [[]])
    hf = SequenceBiasLogitsProcessor({(token,): value for token, value in bias})
    torch.testing.assert_close(got, hf(torch.tensor([[1, 2]]), logits.clone()))


def test_presence_and_frequency_penalties_count_output_tokens_only():
    logits = torch.zeros(1, 6)
    params = [SamplingParams(presence_penalty=0.5, frequency_penalty=0.25)]
    got = apply_penalties(logits, params, [[4, 4, 4]], [[1, 1, 1, 2]])
    # OpenAI: logit - count * frequency_penalty - (count > 0) * presence_penalty; the prompt's 4 is not counted
    assert got[0].tolist() == [0.0, -(3 * 0.25 + 0.5), -(0.25 + 0.5), 0.0, 0.0, 0.0]


def test_a_token_id_outside_the_vocabulary_changes_nothing_else():
    logits = torch.randn(1, VOCAB)
    got = apply_penalties(logits, [SamplingParams(logit_bias=((VOCAB + 5, 9.0), (0, 1.0)))], [[1]], [[]])
    assert torch.equal(got[0, 1:], logits[0, 1:]) and got[0, 0] == logits[0, 0] + 1


@pytest.mark.parametrize(
    "fields",
    [
        {"presence_penalty": 2.5},
        {"frequency_penalty": float("nan")},
        {"repetition_penalty": 0.0},
        {"repetition_penalty": 5e-324},  # would divide a logit into inf
        {"logit_bias": ((1, 101.0),)},
        {"logit_bias": ((-1, 1.0),)},
        {"top_logprobs": 21},
    ],
)
def test_values_out_of_range_are_the_requests_fault(fields):
    with pytest.raises(RequestRejected):
        SamplingParams(**fields)


def hf_greedy(checkpoint, num_out, **kwargs):
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model.generate(
            torch.tensor([PROMPT]),
            max_new_tokens=num_out,
            min_new_tokens=num_out,
            do_sample=False,
            pad_token_id=0,
            **kwargs,
        )
    return out[0, len(PROMPT) :].tolist()


async def tokens(engine, params: SamplingParams, name="r"):
    out = []
    async for chunk in engine.generate(GenerationRequest(name, tuple(PROMPT), params)):
        out += chunk.token_ids
    return out


def test_greedy_with_a_repetition_penalty_equals_hf_generate_on_both_engines(engine, demo_checkpoint):
    num_out = 16
    expected = hf_greedy(demo_checkpoint, num_out, repetition_penalty=1.8)
    plain = hf_greedy(demo_checkpoint, num_out)
    assert expected != plain  # the penalty changes the answer on this prompt, so the test can tell

    async def both():  # batched with a request that asks for nothing, on the cloud engine
        return await asyncio.gather(
            tokens(engine, SamplingParams(max_tokens=num_out, ignore_eos=True, repetition_penalty=1.8), "a"),
            tokens(engine, SamplingParams(max_tokens=num_out, ignore_eos=True), "b"),
        )

    assert asyncio.run(both()) == [expected, plain]


def test_a_banned_token_never_appears_and_logprobs_are_the_raw_models(engine, demo_checkpoint):
    num_out = 12
    plain = hf_greedy(demo_checkpoint, num_out)
    banned = plain[0]
    expected = hf_greedy(demo_checkpoint, num_out, sequence_bias={(banned,): -100.0})
    params = SamplingParams(max_tokens=num_out, ignore_eos=True, logit_bias=((banned, -100.0),), top_logprobs=3)

    async def run():
        return [c async for c in engine.generate(GenerationRequest("r", tuple(PROMPT), params))]

    chunks = asyncio.run(run())
    got = [t for c in chunks for t in c.token_ids]
    assert got == expected and banned not in got
    tops = [top for c in chunks for top in c.top_logprobs]
    assert len(tops) == num_out and all(len(top) == 3 for top in tops)
    assert tops[0][0][0] == banned  # the raw model still ranks the banned token first
    chosen = [lp for c in chunks for lp in c.logprobs]
    assert len(chosen) == num_out and all(lp <= 0 for lp in chosen)
    assert all(abs(lp - dict(top).get(t, lp)) < 1e-5 for t, lp, top in zip(got, chosen, tops, strict=True))


def test_a_stop_string_the_last_tokens_complete_ends_with_stop_on_both_engines(engine):
    """Byte tokens that are no character (logit_bias forces them) become U+FFFD only when max_tokens ends the
    answer: a stop string of that character still cuts the text and makes finish_reason "stop", not "length"."""
    params = SamplingParams(max_tokens=2, ignore_eos=True, logit_bias=((97, 100.0),), stop_strings=("\ufffd",))

    async def run():
        return [c async for c in engine.generate(GenerationRequest("r", tuple(PROMPT), params))]

    chunks = asyncio.run(run())
    assert "".join(c.text for c in chunks) == ""
    assert chunks[-1].finish_reason == "stop"
    assert [t for c in chunks for t in c.token_ids] == []  # the stop's tokens never leave
