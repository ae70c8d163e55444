"""Completions' legacy log-probabilities as OpenAI writes them, for tokens that are pieces of a character."""

from proto.gen import worker_pb2
from serving.grammar import llg_tokenizer
from serving.openai.chat_tokenizer import ChatTokenizer
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


def test_a_token_after_bytes_that_made_no_character_starts_after_their_replacement():
    """(a review) The answer's text holds U+FFFD for a lone piece of a character; the next token's offset counted
    from before it, one short."""
    tokenizer = build_tokenizer(512)
    llg = llg_tokenizer(tokenizer, ())
    first = tokenizer.encode("東").ids[0]  # the first of its three byte tokens, alone: no character
    word = tokenizer.encode(" it").ids
    logprobs = Logprobs(False, lambda token: tokenizer.decode([token]), lambda token: llg.decode_bytes([token]))
    ids = [first, *word]
    got = logprobs.of(worker_pb2.GenerateChunk(token_ids=ids, logprobs=[-1.0] * len(ids)))
    text = "\ufffd it"  # as the answer's text reads
    assert got["text_offset"][:2] == [0, 1] and text[got["text_offset"][1] :].startswith(" i")


def test_the_byte_0xff_token_has_its_byte(demo_checkpoint):
    """(a review) llguidance drops the byte 0xFF (its mark of a special token): the byte-level vocabulary's `ÿ`
    token had no bytes, and its completions name was empty."""
    chat = ChatTokenizer(demo_checkpoint)
    (token,) = [i for i in range(chat.tokenizer.get_vocab_size()) if chat.tokenizer.id_to_token(i) == "ÿ"]
    assert chat.token_bytes(token) == b"\xff"
    logprobs = Logprobs(False, chat.token_text, chat.token_bytes)
    got = logprobs.of(worker_pb2.GenerateChunk(token_ids=[token], logprobs=[-1.0]))
    assert got["tokens"] == ["bytes:\\xff"]
