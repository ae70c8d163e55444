import pytest

from serving.detokenizer import IncrementalDetokenizer
from tandem.demo_model import build_tokenizer


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(512)


def stream(tokenizer, text, stops=()):
    detok = IncrementalDetokenizer(tokenizer, stops)
    out = []
    for token in tokenizer.encode(text).ids:
        out.append(detok.push(token))
        if detok.is_stopped:
            return "".join(out), True
    return "".join(out) + detok.flush(), False


def test_streamed_text_equals_whole_decode(tokenizer):
    text = "The gateway routes each request. Ünïcödé ✓ 東京"
    assert stream(tokenizer, text) == (text, False)


@pytest.mark.parametrize(
    "stops, expected",
    [
        (("request",), "The gateway routes each "),
        (("es e",), "The gateway rout"),  # a stop that spans token boundaries
        (("nowhere",), "The gateway routes each request."),
        (("each", "gate"), "The "),  # the earliest stop wins
    ],
)
def test_stop_strings_end_the_text_before_the_stop(tokenizer, stops, expected):
    text, stopped = stream(tokenizer, "The gateway routes each request.", stops)
    assert text == expected
    assert stopped == (expected != "The gateway routes each request.")


@pytest.mark.parametrize("stops", [("User:", "\n"), ("\n", "User:")])
def test_two_stops_one_token_brings_cut_at_the_first_in_the_text_whatever_the_lists_order(stops):
    """(a review) `stop: ["User:", "\n"]` and a token `\nUser:`: the list's first won, and the answer kept the `\n`."""

    class Words:  # a token a whole word, as a real tokenizer's `\nUser:` can be
        words = ("Sure", "\nUser:", " hi")

        def decode(self, ids, skip_special_tokens=True):
            return "".join(self.words[i] for i in ids)

    detok = IncrementalDetokenizer(Words(), stops)
    out = ""
    for token in (0, 1, 2):
        out += detok.push(token)
        if detok.is_stopped:
            break
    else:
        out += detok.flush()
    assert (out, detok.is_stopped) == ("Sure", True)


def test_incomplete_utf8_is_held_until_complete(tokenizer):
    detok = IncrementalDetokenizer(tokenizer)
    pieces = [detok.push(t) for t in tokenizer.encode("東").ids]
    assert all("\ufffd" not in p for p in pieces)
    assert "".join(pieces) == "東"


def test_long_streams_decode_a_window_not_the_whole_text(tokenizer):
    calls = []

    class Counting:
        def decode(self, ids, skip_special_tokens=True):
            calls.append(len(ids))
            return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    text = "The gateway routes each request to the right place. " * 20
    detok = IncrementalDetokenizer(Counting())
    streamed = "".join(detok.push(t) for t in tokenizer.encode(text).ids) + detok.flush()
    assert streamed == text
    assert max(calls) <= 8  # a few tokens per decode, however long the stream


def test_tokens_leave_with_their_text_and_a_stop_strings_never_do(tokenizer):
    """OpenAI's log-probabilities describe the returned text: a token is handed out (with its score) once its text
    begins to leave, one held back as a possible stop string's start waits, and those of a matched stop are
    dropped although they were scored before it could be seen."""
    ids = tokenizer.encode("The gateway routes each request.").ids
    detok = IncrementalDetokenizer(tokenizer, ("each",))
    text, taken = "", []
    for i, token in enumerate(ids):
        text += detok.push(token, -float(i), ((token, -float(i)),))
        got, logprobs, tops = detok.take()
        assert logprobs == tuple(-float(n) for n in range(len(taken), len(taken) + len(got)))  # in order, each its own
        assert [t for ((t, _),) in tops] == list(got)
        taken += got
        assert not taken or len(tokenizer.decode(taken[:-1])) < len(text)  # none left before its text began to
        if detok.is_stopped:
            break
    assert text == "The gateway routes "
    assert tokenizer.decode(taken).startswith(text) and "each" not in tokenizer.decode(taken)
    assert detok.flush() == "" and detok.take() == ((), (), ())  # a flush after the stop hands out nothing more


def test_every_token_leaves_by_the_end_even_a_characters_first_bytes(tokenizer):
    ids = tokenizer.encode("東京 ✓ routes").ids
    detok = IncrementalDetokenizer(tokenizer, ("zz",))  # holds one character back
    taken, text = [], ""
    for token in ids:
        text += detok.push(token)
        taken += detok.take()[0]
        assert tokenizer.decode(taken).startswith(text)  # what left is covered by the tokens that left
    text += detok.flush()
    assert taken + list(detok.take()[0]) == ids and text == "東京 ✓ routes"


def test_bytes_that_never_finish_a_character_are_text_and_the_window_stays_short(tokenizer):
    """A run of byte tokens that are no UTF-8 character (here "\\xa1" alone, which logit_bias can force) was held
    forever: the answer was "", and every token decoded the whole growing run (quadratic)."""
    assert tokenizer.decode([97]) == "\ufffd"
    calls = []

    class Counting:
        def decode(self, ids, skip_special_tokens=True):
            calls.append(len(ids))
            return tokenizer.decode(ids, skip_special_tokens=skip_special_tokens)

    detok = IncrementalDetokenizer(Counting())
    text = "".join(detok.push(97) for _ in range(400))
    assert len(text) >= 390 and set(text) == {"\ufffd"}  # released as they go, but for the last few
    assert max(calls) < 12  # the window stays a few tokens long
    assert text + detok.flush() == "\ufffd" * 400
    ids = tokenizer.encode("東京").ids  # a real character split over tokens still waits for its last piece
    detok = IncrementalDetokenizer(tokenizer)
    assert "".join(detok.push(t) for t in [97, 97, 97, 97, *ids]) + detok.flush() == "\ufffd" * 4 + "東京"


def test_a_stop_string_that_only_the_flush_completes_still_stops(tokenizer):
    """Bytes that never finish a character become U+FFFD only when the sequence ends: a stop string ending in one
    must cut there too, not come out in the answer (and its tokens must not leave)."""
    ok = tokenizer.encode("ok").ids
    detok = IncrementalDetokenizer(tokenizer, ("\ufffd",))
    text = "".join(detok.push(t) for t in [*ok, 97])  # "ok", then one byte that is no character
    text += detok.flush()
    assert (text, detok.is_stopped) == ("ok", True)
    assert list(detok.take()[0]) == ok  # the byte's token is the stop's: it never leaves


def test_tokens_that_span_two_characters_stream_every_character():
    """(a review) A byte-level vocabulary may hold a token with the end of one character and the start of the next:
    after 3 such tokens the stream took everything but the last 3 as final, and sent a valid 中 as U+FFFD."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers

    from serving.openai.chat_tokenizer import _BYTE_LEVEL

    spell = {byte: char for char, byte in _BYTE_LEVEL.items()}
    raw = "中文字符".encode()
    pieces = [raw[0:1], raw[1:4], raw[4:7], raw[7:10], raw[10:12]]  # each ends inside the next character
    vocab = {spell[b]: b for b in range(256)}
    for piece in pieces:
        vocab.setdefault("".join(spell[b] for b in piece), len(vocab))
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    ids = [vocab["".join(spell[b] for b in piece)] for piece in pieces]
    assert tokenizer.decode(ids) == "中文字符"
    detok = IncrementalDetokenizer(tokenizer)
    streamed = "".join(detok.push(i) for i in ids) + detok.flush()
    assert streamed == "中文字符"
