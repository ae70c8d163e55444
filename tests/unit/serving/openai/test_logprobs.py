"""Completions' legacy log-probabilities as OpenAI writes them, for tokens that are pieces of a character."""

from proto.gen import worker_pb2
from serving.grammar import llg_tokenizer
from serving.openai.format import Logprobs
from tandem.demo_model import build_tokenizer


def test_pieces_of_a_character_are_named_by_their_bytes_and_counted_once():
    tokenizer = build_tokenizer(512)
    llg = llg_tokenizer(tokenizer, ())
    ids = tokenizer.encode("a 東京 b").ids
    pieces = [i for i in ids if "\ufffd" in tokenizer.decode([i])]
    assert len(pieces) == 6  # the test's premise: each CJK character is three byte tokens here
    logprobs = Logprobs(False, lambda token: tokenizer.decode([token]), lambda token: llg.decode_bytes([token]))
    alternatives = worker_pb2.TopLogprobs(token_ids=pieces[:3], logprobs=[-0.5, -0.6, -0.7])
    chunk = worker_pb2.GenerateChunk(token_ids=ids, logprobs=[-1.0] * len(ids), top_logprobs=[alternatives] * len(ids))
    got = logprobs.of(chunk)
    assert got["tokens"] == ["a", " ", *(f"bytes:\\x{b:02x}" for b in "東京".encode()), " b"]
    for token, top in zip(got["tokens"], got["top_logprobs"], strict=True):
        assert token in top and round(top[token], 4) in (-1.0, -0.5, -0.6, -0.7)  # the chosen token is always there
        assert len(top) >= 3  # three pieces, three keys: as U+FFFD they were one
    assert got["text_offset"] == [0, 1, 2, 2, 2, 3, 3, 3, 4]  # characters of "a 東京 b" before each token
