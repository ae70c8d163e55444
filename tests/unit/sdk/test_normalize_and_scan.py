"""What the detectors read: the normalized text, and the one text a request carries (SDK and gateway alike)."""

import json
import subprocess
import sys

import pytest
from tandem_sdk.detectors import DETECTORS, detect
from tandem_sdk.normalize import normalize
from tandem_sdk.scan import request_text

MINIFIED = json.dumps({"users": [{"email": "ann@example.com", "id": 1}, *({"id": i} for i in range(40))]},
                      separators=(",", ":"))  # fmt: skip


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("plain ascii stays", "plain ascii stays"),
        ("４１１１\u00a0１１１１", "4111 1111"),  # full-width digits, NBSP
        ("a\u200bb\u200dc\ufeffd\u00ade\u2060f", "abcdef"),  # zero-width space and joiner, BOM, soft hyphen, WJ
        ("1\u20132\u20143\u22124\u20105", "1-2-3-4-5"),  # en dash, em dash, minus sign, hyphen
        ("a\u3000b\u2009c\u202fd", "a b c d"),  # ideographic, thin, narrow no-break spaces
        ("a\u2028b\u2029c", "a\nb\nc"),
        ("٠١٢٣ ०१२३ ๐๑๒๓", "0123 0123 0123"),  # Arabic-Indic, Devanagari, Thai digits
        ("ａｎｎ＠ｅｘａｍｐｌｅ．ｃｏｍ", "ann@example.com"),
        ("𝟏𝟐𝟑 ① ﬁ ¹", "123 ① fi ¹"),  # mathematical digits (outside the BMP), ligature; circled and superscript stay
        ("中文不变，😀", "中文不变，😀"),  # only what the detectors read changes
        (
            "415·555·2671 090・1234 ･ 4111 • 1111∙2⋅3‧4",
            "415.555.2671 090.1234 . 4111 . 1111.2.3.4",
        ),  # dots between groups
        ("ジョン・スミス", "ジョン.スミス"),
        ("4\ufe0f1\U000e01001\u034f1\u180b2", "41112"),  # variation selectors, CGJ, Mongolian FVS: invisible
        ("4111\u31641111\u115f1\uffa02\u28003", "4111 1111 1 2 3"),  # Hangul fillers, Braille blank: blanks
        ("tele\u0301fono 4\ufe0f\u20e3 4\u0332 5\u0336\u0336 Телефо\u0301н", "telefono 4 4 5 Телефон"),  # marks apart
        ("नमस्ते फ़ोन", "नमस्ते फ़ोन"),  # a script's own vowel signs and marks stay
        ("tel%3A%2B1 %3a", "tel:+1 :"),  # a URL's escapes for `:` too
        # an edge review: UTF-16 read as UTF-8 (a NUL after every character) hid PII from the detectors, and the
        # tokenizer kept the NULs for the model; a later review: other control characters stay a boundary, as the
        # fields of a FIX message and a NUL-separated list are
        ("a\x00n\x00n\x00@\x00e\x00x\x00.\x00c\x00o\x00m\x00", "ann@ex.com"),
        ("34=1571\x0111=130355126\x0138=2469", "34=1571\x0111=130355126\x0138=2469"),
        ("25835457\x0096353980 \ue0a0 12:30", "25835457\x0096353980 \ue0a0 12:30"),
        ("ann&#64;x &#x40; &#X40 &commat; &#97;&#110;&#110; &#46;com", "ann@x @ @ @ ann .com"),
        ("&#0; &#1114112; &#xD800; &amp; &lt;", "&#0; &#1114112; &#xD800; &amp; &lt;"),  # no character: left
    ],
)
def test_normalize(raw, normal):
    assert normalize(raw) == normal


def test_the_normalization_table_is_what_this_pythons_unicode_gives():
    result = subprocess.run(
        [sys.executable, "-m", "tandem_sdk.normalization_gen", "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


CARD_A, CARD_B = "4111 1111", "1111 1111"


@pytest.mark.parametrize(
    ("body", "fires"),
    [
        ({"messages": [{"role": "system", "content": "reply to ann@example.com"}]}, "email"),
        ({"messages": [{"role": "assistant", "content": "your card 4111111111111111"}]}, "credit-card"),
        ({"messages": [{"role": "tool", "content": "+44 20 7946 0958", "tool_call_id": "c1"}]}, "phone"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "mail ann@exam"},
                                                    {"type": "text", "text": "ple.com"}]}]}, "email"),
        ({"messages": [{"role": "user", "content": CARD_A}, {"role": "user", "content": CARD_B}]}, "credit-card"),
        ({"messages": [{"role": "assistant", "content": None, "tool_calls": [
            {"id": "c", "type": "function",
             "function": {"name": "send", "arguments": '{"to": "ann@example.com"}'}}]}]}, "email"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url",
                                                     "image_url": {"url": "https://x.test/?m=ann@example.com"}}]}]},
         "email"),
        ({"messages": [{"role": "user", "content": "hi"}], "stop": ["4111 1111 1111 1111"]}, "credit-card"),
        ({"messages": [{"role": "user", "content": "hi"}], "stop": "DE89370400440532013000"}, "iban"),
        ({"messages": [{"role": "user", "content": "hi"}], "user": "ann@example.com"}, "email"),
        ({"messages": [{"role": "user", "name": "ann@example.com", "content": "hi"}]}, "email"),
        ({"prompt": "call +1-202-555-0143"}, "phone"),
        ({"prompt": ["fine", "call +1-202-555-0143"]}, "phone"),
        ({"prompt": [1, 2]}, "email"),  # token ids are decoded: no way around the detectors
        ({"prompt": [[3], [1, 2]]}, "email"),
        ({"prompt": "x", "suffix": "11010519491231002X"}, "cn-id"),
        ({"messages": [{"role": "user", "content": "hi"}],
          "tools": [{"type": "function", "function": {"name": "f", "description": "for ann@example.com"}}]},
         "email"),
        # found by an adversarial review: a subtree under "type", a key, a regex pattern
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"properties": {"type": {"const": "alice.smith@example.com"}}}}}}, "email"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f",
            "parameters": {"properties": {"alice.smith@example.com": {"type": "string"}}}}}]}, "email"),
        ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
            "arguments": {"type": "alice.smith@example.com"}}}]}]}, "email"),
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"type": "string", "pattern": "^alice\\.smith@example\\.com$"}}}}, "email"),
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"type": "string", "pattern": "^4111[ ]1111[ ]1111[ ]1111$"}}}}, "credit-card"),
        ({"messages": [{"role": "ann@example.com", "content": "hi"}]}, "email"),
        # found by a second review: PII at the end of a part, glued to the next part's first word
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "Customer: ann@example.com"},
                                                    {"type": "text", "text": "2 open tickets"}]}]}, "email"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "Card: 4111 1111 1111 1111"},
                                                    {"type": "text", "text": "3 items"}]}]}, "credit-card"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": "IBAN DE89 3704 0044 0532 0130 00"},
                                                    {"type": "text", "text": "Thanks"}]}]}, "iban"),
        # fields that leave with the body
        ({"messages": [{"role": "user", "content": "hi"}], "safety_identifier": "ann@example.com"}, "email"),
        ({"messages": [{"role": "user", "content": "hi"}], "metadata": {"customer": "ann@example.com"}}, "email"),
        ({"messages": [{"role": "user", "content": "hi"}], "prompt_cache_key": "ann@example.com"}, "email"),
        ({"messages": [{"role": "user", "content": "hi"}],
          "prediction": {"type": "content", "content": "Contact ann@example.com"}}, "email"),
        ({"messages": [{"role": "user", "content": "hi"}],
          "functions": [{"name": "mail", "description": "mail ann@example.com"}]}, "email"),
        ({"messages": [{"role": "user", "content": "hi"}], "documents": [{"text": "ann@example.com"}]}, "email"),
        # message shapes a client sends although the API wants a list of parts
        ({"messages": [{"role": "user", "content": {"type": "text", "text": "ann@example.com"}}]}, "email"),
        ({"messages": [{"role": "user", "content": [{"type": "text", "text": {"value": "ann@example.com"}}]}]},
         "email"),
        ({"messages": {"role": "user", "content": "mail ann@example.com"}}, "email"),
        ({"messages": "mail ann@example.com"}, "email"),
        ({"messages": 4111111111111111}, "credit-card"),  # any value: read, not a TypeError (a third review)
        # found by a third review: numbers are text the model and the grammar read, and dots between digit groups
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {
            "name": "x", "schema": {"properties": {"card": {"enum": [4111111111111111]}}}}}}, "credit-card"),
        ({"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f",
            "parameters": {"properties": {"to": {"type": "integer", "default": 14155552671}}}}}]}, "phone"),
        ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
            "arguments": {"card": 4111111111111111.0}}}]}]}, "credit-card"),
        ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
            "arguments": {"card": 4.111111111111111e15}}}]}]}, "credit-card"),
        ({"messages": [{"role": "user", "content": "+81・90・1234・5678"}]}, "phone"),
        ({"messages": [{"role": "user", "content": "+1 (415) 555·2671"}]}, "phone"),
        ({"messages": [{"role": "user", "content": "４１１１・１１１１・１１１１・１１１１"}]}, "credit-card"),
        ({"messages": [{"role": "user", "content": "4111 • 1111 • 1111 • 1111"}]}, "credit-card"),
        # found by a fourth review: a split number beside a message's other fields, keys that are numbers, metadata
        # in any shape, tags and bias keys that are text
        ({"messages": [{"role": "user", "name": "bob", "content": "my card is 4111 1111"},
                       {"role": "user", "content": "1111 1111"}]}, "credit-card"),
        ({"messages": [{"role": "tool", "tool_call_id": "call_1", "content": "+44 20"},
                       {"role": "user", "content": "7946 0958"}]}, "phone"),
        ({"messages": [{"role": "user", "content": "hi"}], "metadata": {"cards": {4111111111111111: "primary"}}},
         "credit-card"),
        ({"messages": [{"role": "user", "content": "hi"}], "metadata": {"x": {4111111111111111.0: 1}}}, "credit-card"),
        ({"messages": [{"role": "user", "content": "hi"}], "metadata": ["ann@example.com"]}, "email"),
        ({"messages": [{"role": "user", "content": "hi"}], "metadata": "ann@example.com"}, "email"),
        ({"messages": [{"role": "user", "content": "hi"}], "metadata": {"privacy": "ann@example.com"}}, "email"),
        ({"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"ann@example.com": 1}}, "email"),
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"type": "string", "pattern": "^(?:ann\\.lee)?\\x40example\\.com(?:\\?.*)?$"}}}}, "email"),
        # JSON text written by json.dumps: escapes for full-width digits and tabs
        ({"messages": [{"role": "tool", "tool_call_id": "1",
                        "content": json.dumps({"card": "４１１１ １１１１ １１１１ １１１１"})}]}, "credit-card"),
        ({"messages": [{"role": "user", "content": json.dumps({"x": "卡号4111111111111111"})}]}, "credit-card"),
        ({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f",
            "arguments": json.dumps({"card": "4111\t1111\t1111\t1111"})}}]}]}, "credit-card"),
        # escapes in text that is no JSON value as a whole (an adversarial review): an agent's observation, log
        # lines, a printed Python dict, escapes of escapes
        ({"messages": [{"role": "user", "content": 'Observation: {"card": "4111\\u00a01111\\u00a01111\\u00a01111"}'}]},
         "credit-card"),
        ({"messages": [{"role": "tool", "tool_call_id": "1",
                        "content": '{"a": 1}\n{"phone": "+44\\u00a020\\u00a07946\\u00a00958"}'}]}, "phone"),
        ({"messages": [{"role": "user", "content": "tool returned {'card': '4111\\xa01111\\xa01111\\xa01111'}"}]},
         "credit-card"),
        ({"messages": [{"role": "user", "content": "x: " + " ".join(["\\uff14\\uff11\\uff11\\uff11"]
                                                                   + ["\\uff11" * 4] * 3)}]}, "credit-card"),
        ({"messages": [{"role": "user", "content": 'log: "4111\\\\u00a01111\\\\u00a01111\\\\u00a01111"'}]},
         "credit-card"),
        ({"prompt": 'Observation: {"mail": "ann\\u0040example.com"}'}, "email"),
        # a pattern's classes of several characters and its counts (an adversarial review)
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"type": "string", "pattern": "^4111[- ]1111[- ]1111[- ]1111$"}}}}, "credit-card"),
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"type": "string", "pattern": "^41{15}$"}}}}, "credit-card"),
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"type": "string", "pattern": "^4111(?:[ ]1111){3}$"}}}}, "credit-card"),
        ({"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"type": "string", "pattern": "^\\+44[ ]?20[ ]?7946[ ]?0958$"}}}}, "phone"),
        # an address split over messages or batch prompts (they were joined with a line break, which ends a domain)
        ({"messages": [{"role": "user", "content": "mail ann@exam"}, {"role": "user", "content": "ple.com thanks"}]},
         "email"),
        ({"messages": [{"role": "user", "content": "mail ann"}, {"role": "user", "content": "@example.com"}]}, "email"),
        ({"messages": [{"role": "user", "content": "ann@example.c"}, {"role": "user", "content": "om"}]}, "email"),
        ({"messages": [{"role": "user", "content": "ｏｌｇａ＠ｅｘａｍ"}, {"role": "user", "content": "ｐｌｅ．ｃｏｍ"}]},
         "email"),
        ({"prompt": ["write to ann@", "example", ".com now"]}, "email"),
        # a review of those: the `@` written as the detectors read it otherwise
        ({"messages": [{"role": "user", "content": "write to ann&#64;exam"}, {"role": "user", "content": "ple.com"}]},
         "email"),
        ({"messages": [{"role": "user", "content": "write to ann\ufe6bexam"}, {"role": "user", "content": "ple.com"}]},
         "email"),
        ({"messages": [{"role": "user", "content": "ann"}, {"role": "user", "content": "&#64;example.com"}]}, "email"),
        # and a third: the word running on past the address, an empty message between, a minified JSON in pieces
        ({"prompt": ["ann@exam", "ple.com", "1"]}, "email"),
        ({"messages": [{"role": "user", "content": "write to ann@exam"}, {"role": "assistant", "content": ""},
                       {"role": "user", "content": "ple.com"}]}, "email"),
        ({"prompt": [MINIFIED[i : i + 32] for i in range(0, len(MINIFIED), 32)]}, "email"),
        # (a review) a message's name, which the model reads before its content (`SSN: 123456789`)
        ({"messages": [{"role": "user", "name": "SSN", "content": "123456789"}]}, "ssn"),
        ({"messages": [{"role": "user", "name": "phone", "content": [{"type": "text", "text": "4155550100"}]}]},
         "phone"),
    ],
)  # fmt: skip
def test_everything_that_leaves_is_scanned(body, fires):
    spelled = {(1, 2): "mail ann@example.com", (3,): "hello"}
    text = request_text(body, decode=lambda ids: spelled[tuple(ids)])
    assert fires in detect(text, list(DETECTORS)), text


@pytest.mark.parametrize(
    "contents",
    [
        ["Please update my snippet to logo@3x.webp", "Summarize the notes above."],  # each side whole already
        ["ping @john", "thanks"],
        ["user@host", "Summarize"],
    ],
)
def test_words_are_not_glued_across_messages_into_an_address(contents):
    body = {"messages": [{"role": "user", "content": text} for text in contents]}
    assert detect(request_text(body), ["email"]) == []


@pytest.mark.parametrize("word", ["@", "＠", "x"])
def test_a_batch_of_one_word_prompts_is_read_in_about_its_own_size(word):
    """A review: 150,000 prompts of `＠` (a 1 MB body) gave a 512-character word at every seam, 10 s and 600 MB."""
    text = request_text({"prompt": [word] * 100_000})
    assert len(text) < 4 * 100_000  # the prompts, each line; the word they make, once; a few windows


def test_a_prompt_of_token_ids_cannot_be_scanned_without_a_tokenizer():
    with pytest.raises(ValueError, match="tokenizer"):
        request_text({"prompt": [1, 2, 3]})


def test_role_and_type_are_structure_not_text():
    body = {"messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]}
    assert request_text(body) == "ab\na\nb"  # the parts joined, then each alone


def test_a_number_too_long_to_print_is_no_identifier_and_no_crash():
    body = {"messages": [{"role": "user", "content": "hi"}], "seed": 10**5000, "temperature": float("inf")}
    assert detect(request_text(body), list(DETECTORS)) == []


def test_an_int_enum_is_read_as_the_digits_json_sends():
    import enum

    class Card(enum.IntEnum):
        MAIN = 4111111111111111

    body = {
        "messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {"c": Card.MAIN}}}]}]
    }
    assert json.dumps(Card.MAIN) == "4111111111111111"
    assert "credit-card" in detect(request_text(body), list(DETECTORS))


def test_token_id_bias_keys_are_not_text_and_other_keys_are():
    ids = {"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"2147483647": 5, "12": -1}}
    assert "2147483647" not in request_text(ids)
    card = {"messages": [{"role": "user", "content": "hi"}], "logit_bias": {"4111111111111111": 5}}  # no token id
    assert "credit-card" in detect(request_text(card), list(DETECTORS))


def test_call_arguments_are_read_as_the_chat_template_writes_them_again():
    """The template decodes a call's arguments and writes them back: a float in e-notation reaches the model as
    its digits (a review: `{"card": 4.111111111111111e15}` went to the cloud)."""
    from tandem_sdk.detectors import detect
    from tandem_sdk.scan import request_text

    def fired(arguments: str) -> list[str]:
        call = {"id": "c", "type": "function", "function": {"name": "pay", "arguments": arguments}}
        body = {"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}
        return detect(request_text(body), ["credit-card", "phone"])

    assert fired('{"card":4.111111111111111e15}') == ["credit-card"]
    assert fired("4.111111111111111E+15") == ["credit-card"]
    assert fired('{"phone":1.4155550100e10}') == ["phone"]
    assert fired('{"amount": 12.5}') == []


@pytest.mark.parametrize(
    "arguments",
    [
        {"name": "Ann Lee", "ssn": "123456789"},  # an object, as some clients send a call's arguments
        {"name": "Ann Lee", "dob": "1990-01-01", "notes": "x", "ssn": 123456789},
        {"person": {"name": "Ann Lee", "ids": {"passport": "X1", "ssn": "123456789"}}},
        {"name": "SSN", "value": "123456789"},  # (a second review) a label in one key's value, the number in `value`
        {"field": "ssn", "val": 123456789},
    ],
)
def test_a_key_is_read_beside_its_value_not_after_every_key(arguments):
    """(a review) Every key of an object was read first, then the values: `ssn` ended lines away from its number,
    found only where it was the object's first key."""
    call = {"id": "c", "type": "function", "function": {"name": "update", "arguments": arguments}}
    body = {"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}
    assert detect(request_text(body), ["ssn"]) == ["ssn"]
    assert detect(request_text({"model": "m", "metadata": arguments}), ["ssn"]) == ["ssn"]


@pytest.mark.parametrize(
    ("text", "readings"),
    [
        ("\u0405\u0405N", ["SSN"]),  # Macedonian Dze, twice, before a Latin N
        ("SS\u039d", ["SSN"]),  # a Greek Nu after Latin letters
        ("\u0405\u0405\u039d", ["SSN"]),  # Cyrillic and Greek, no Latin letter: no language writes both in a word
        ("S.\u0405.N.", ["S.S.N."]),  # an abbreviation's letters between dots
        ("\u0440hone", ["phone"]),  # a Cyrillic er: one key of a Russian layout
        (
            "\u0440hone\u043e\u043c",
            ["phoneo\u043c", "phone\u043e\u043c", "\u0440\u04bb\u043en\u0435\u043e\u043c"],
        ),  # ending kept
        ("iPh\u043ene\u043c", ["iPhone\u043c", "\u0456\u0420\u04bb\u043en\u0435\u043c"]),  # `м` draws no Latin
        ("é\u0455x", ["ésx"]),
        (
            "Te\u043b\u0435\u0444\u043e\u043d",
            ["Te\u043be\u0444o\u043d", "\u0422\u0435\u043b\u0435\u0444\u043e\u043d"],
        ),  # Телефон
        (
            "T\u03b7\u03bb\u03ad\u03c6\u03c9\u03bd\u03bf",
            ["T\u03b7\u03bb\u03ad\u03c6\u03c9vo", "\u03a4\u03b7\u03bb\u03ad\u03c6\u03c9\u03bd\u03bf"],
        ),
        ("Мой телефон", []),  # no word where the scripts meet: no second reading
        ("Τηλέφωνο", []),
        ("\u0430 b", []),  # scripts in two words, not one
    ],
)
def test_lookalike_letters_are_read_again_as_latin_and_as_the_words_own_script(text, readings):
    from tandem_sdk.normalize import lookalike_readings, normalize_utf8

    assert normalize(text) == text  # the text itself stays as it is
    assert [r.decode() for r in lookalike_readings(normalize_utf8(text))] == readings


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("Teлефон: 9161234567", "phone"),  # Latin T and e in a Russian label
        ("TEЛЕФОН 9161234567", "phone"),
        ("Мой рhoneом: 9161234567", "phone"),  # a lookalike in a Latin label, and its Russian ending
        ("Tηλέφωνο 6912345678", "phone"),  # a Latin T in a Greek label
        ("\u0405\u0405\u039d: 123456789", "ssn"),
        ("S.\u0405.N.: 123456789", "ssn"),
        ("\u0405.\u0405.\u039d.: 123456789", "ssn"),
        # (a second review) a lookalike between the last Latin letter and a Russian ending (the old reading had it)
        ("S\u0405\u039d\u044b: 123456789", "ssn"),
        ("phon\u0435\u044b: 4155550100", "phone"),
        ("TE\u04c0: 4155550100", "phone"),  # capital palochka, lunate capital sigma, straight u
        ("\u03f9ell: 4155550100", "phone"),
        ("Social Securit\u04af: 123456789", "ssn"),
        # (a third review) a label in lookalikes, then a form's leader of dots: the dots made it one word too long
        ("\u0405\u0405N" + "." * 60 + " 123456789", "ssn"),
        ("\u0405\u0405N" + "\u2026" * 20 + " 123456789", "ssn"),
        ("M\u043ebile" + "." * 70 + " 4155550100", "phone"),
        ("S.\u0405.N." + "." * 62 + " 123456789", "ssn"),
    ],
)
def test_a_label_typed_in_two_scripts_is_read(text, kind):
    """(a review) A Russian or Greek label with a Latin letter in it, a label in Cyrillic and Greek lookalikes with no
    Latin letter, and an abbreviation's lookalikes between dots were no labels: the numbers after them went to the
    cloud."""
    assert detect(text, list(DETECTORS)) == [kind]
    assert detect(text.split()[-1], list(DETECTORS)) == []  # the number alone: the label is what finds it


@pytest.mark.parametrize(
    "before",
    [
        " ".join(
            ["\u0432i\u043d \u043c\u0456\u0441\u0442\u043e \u044f\u043ai \u043ci\u0439"] * 300
        ),  # Ukrainian, Latin i
        " ".join(["\u03b4\u03b5\u03af\u03b3\u03bc\u03b1 5 \u03bcg"] * 1100),  # Greek units
    ],
)
def test_a_label_in_two_scripts_is_read_past_a_thousand_words_that_mix_them(before):
    """(a second review) Past 256 words where scripts met, the text was read with every lookalike as Latin only:
    `Teлефон` after a Ukrainian text typed with a Latin `i` went to the cloud."""
    for label in (
        "Te\u043b\u0435\u0444\u043e\u043d: 4155550100",
        "T\u03b7\u03bb\u03ad\u03c6\u03c9\u03bd\u03bf 4155550100",
    ):
        assert detect(before + "\n" + label, list(DETECTORS)) == ["phone"], label
    assert detect(before + "\nphone", list(DETECTORS)) == []


@pytest.mark.parametrize(
    "text",
    ["Пишите в WhatsAppе 9123456789", "Пишите по Viberу: 9123456789", "Мой mobileе: 9123456789", "мой SSNом 123456789"],
)
def test_a_latin_label_with_a_russian_ending_is_read_as_before(text):
    """(a review) Mapped in place, a Latin label's Russian case ending turned Latin (`WhatsAppе` read `WhatsAppe`):
    no label, and the number went to the cloud. The lookalikes are a second reading, beside the text as it is."""
    assert detect(text, list(DETECTORS))


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ({"phoneNumbers": [{"type": "mobile", "value": "4155550100"}]}, "phone"),  # an address book's contact
        ({"phoneNumbers": [{"value": "+1 415-555-0100", "type": "mobile", "formattedType": "Mobile"}]}, "phone"),
        ({"phone": {"verified": True, "value": "4155550100"}}, "phone"),  # a key between the label and the slot
        ({"ssn": {"value": "123456789", "verified": True}}, "ssn"),
        ({"customer": {"phone_numbers": [{"primary": True, "value": "4155550100"}]}}, "phone"),
        # (a third review) FHIR's telecom, Firestore's and DynamoDB's typed values, JSON after a fence
        ({"telecom": [{"system": "phone", "value": "415-555-0100", "use": "mobile"}]}, "phone"),
        ({"fields": {"phone": {"stringValue": "4155550100"}}}, "phone"),
        ({"Item": {"ssn": {"S": "123456789"}}}, "ssn"),
        # (a second review) a name before the slot with a pair between; what names a slot in CRMs and clouds
        ({"owner": "José", "customFields": [{"id": 17, "label": "SSN", "type": "text", "value": "123456789"}]}, "ssn"),
        ({"owner": "José", "attributes": [{"key": "ssn", "type": "string", "value": "123456789"}]}, "ssn"),
        ({"phone": [{"label": "work", "value": "4155550100", "primary": True}]}, "phone"),  # Pipedrive
        ({"contacts": [{"type": "phone", "value": "4155550100"}]}, "phone"),
        ({"identifiers": [{"type": "ssn", "value": "123456789"}]}, "ssn"),
        ({"UserAttributes": [{"Name": "custom:ssn", "Value": "123456789"}]}, "ssn"),  # AWS Cognito
        ({"phoneNumbers": [{"label": "_$!<Mobile>!$_", "value": {"stringValue": "4155550100"}}]}, "phone"),  # Apple
        (["vcard", [["version", {}, "text", "4.0"], ["tel", {"type": ["cell"]}, "text", "4155550100"]]], "phone"),
    ],
)
def test_a_slot_under_a_label_is_read_beside_it(value, kind):
    """(a review) A value's slot nested under its label was read lines away from it: a tool's result of a contact,
    `{"phoneNumbers": [{"type": "mobile", "value": "…"}]}`, went to the cloud, as JSON text (pretty-printed or not,
    with no escape to make it read as JSON) and as an arguments object."""
    call = {"id": "c", "type": "function", "function": {"name": "save", "arguments": value}}
    bodies = [
        {"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]},
        {"messages": [{"role": "tool", "tool_call_id": "c", "content": json.dumps(value)}]},
        {"messages": [{"role": "tool", "tool_call_id": "c", "content": json.dumps(value, indent=2)}]},
        {"model": "m", "metadata": value},
    ]
    for body in bodies:
        assert detect(request_text(body), list(DETECTORS)) == [kind], body


@pytest.mark.parametrize(
    "value",
    [
        {"build": {"id": "12345678", "value": 123456789}},
        {"user": {"id": 1234567890, "verified": True}},
        {"phone": {"model": "Pixel 8"}, "stats": {"value": 12345678}},  # the slot is under `stats`, not `phone`
        # (a second review) JSON text's numbers stay as JSON writes them: a line break between them read as a space
        {"type": "LineString", "coordinates": [[-122.422696, 37.773137], [-122.422542, 37.77293]]},
        {"status": "success", "data": {"result": [{"values": [[1712345678, "23.796"], [1712345693, "54.423"]]}]}},
        [4111, 1111, 1111, 1111],
        # (a third review) analytics' counts by device or channel: JSON numbers
        {"breakdown": [{"name": "mobile", "value": 12345678}, {"name": "desktop", "value": 23456789}]},
        {"channels": [{"name": "SMS", "value": 12345678}]},
    ],
)
def test_a_slot_under_a_key_that_labels_nothing_stays_quiet(value):
    for text in (json.dumps(value), json.dumps(value, indent=2)):
        body = {"messages": [{"role": "tool", "tool_call_id": "c", "content": text}]}
        assert detect(request_text(body), list(DETECTORS)) == [], text


def test_a_long_key_over_many_slots_is_read_once():
    """(a second review) The label was copied before every slot under it: a 160 KB body read as 400 million
    characters (1.9 GB, 13 s). A name is read beside a slot only when short."""
    body = {"messages": [{"role": "user", "content": json.dumps({"k" * 40000: [{"v": 1}] * 10000})}]}
    assert len(request_text(body)) <= 3 * len(json.dumps(body))


def test_json_after_a_fence_or_a_prefix_is_read_for_its_pairs():
    value = json.dumps({"phoneNumbers": [{"type": "mobile", "value": "4155550100"}]}, indent=2)
    for text in (f"```json\n{value}\n```", f"Observation: {value}", f"200 OK\n{value}"):
        body = {"messages": [{"role": "tool", "tool_call_id": "c", "content": text}]}
        assert detect(request_text(body), ["phone"]) == ["phone"], text


def test_a_bodys_pairs_stay_a_few_times_its_size():
    """(a third review) 1,890 objects of 8 naming keys and 4 slots read as 22 million characters (5 KB a 1 KB
    object): an object gives at most a few pairs."""
    one = {k: "123456789 z " * 4 for k in ("type", "kind", "label", "name", "key", "field", "title", "category")}
    one |= {k: "4155550100 " * 4 for k in ("value", "val", "data", "v")}
    arguments = json.dumps([one] * 500)
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}
    body = {"messages": [{"role": "assistant", "content": None, "tool_calls": [call]}]}
    assert len(request_text(body)) <= 3 * len(arguments)


def test_a_content_parts_json_text_is_read_as_a_strings():
    content = [{"type": "text", "text": json.dumps({"phoneNumbers": [{"type": "mobile", "value": "4155550100"}]})}]
    assert detect(request_text({"messages": [{"role": "user", "content": content}]}), ["phone"]) == ["phone"]


@pytest.mark.parametrize("pattern", ["(a{1000}){1000}", "x{99999999}", "[", "(", ")", "{3}", "[^", "\\", "((((", "[]]"])
def test_a_pattern_of_any_shape_is_read_and_spells_a_bounded_text(pattern):
    body = {"response_format": {"type": "json_schema", "json_schema": {"schema": {"pattern": pattern}}}}
    assert len(request_text(body)) < 200_000


@pytest.mark.parametrize(
    "pattern", ["^\\+?[1-9]\\d{7,14}$", "^[2-9]\\d{2}-\\d{3}-\\d{4}$", "^07\\d{9}$", "^1[3-9]\\d{9}$"]
)
def test_a_pattern_of_any_number_spells_no_number(pattern):
    """A tool's phone-number schema holds no one's number: its request is not private for it (a second review)."""
    body = {"tools": [{"type": "function", "function": {"name": "f", "parameters": {"properties": {
        "to": {"type": "string", "pattern": pattern}}}}}]}  # fmt: skip
    assert detect(request_text(body), list(DETECTORS)) == []


def test_escapes_of_escapes_are_read_in_linear_size():
    """`\\x5cx5cx5c…` loses three characters a layer: undone layer by layer, a 100 KB body was megabytes of text."""
    chain = "\\x5c" + "x5c" * 100_000 + "x41"
    assert len(request_text({"messages": [{"role": "user", "content": chain}]})) <= 3 * len(chain)


def test_patterns_spell_no_more_than_a_few_times_their_length():
    """A hundred small patterns of `(…){64}` were 50 times the body's size to scan (a third review)."""
    pattern = "(" + "1234 56 " * 18 + "){64}"
    body = {"response_format": {"type": "json_schema", "json_schema": {"schema": {"properties": {
        f"p{i}": {"type": "string", "pattern": pattern} for i in range(100)}}}}}  # fmt: skip
    assert len(request_text(body)) <= 6 * len(json.dumps(body))


def test_a_body_that_is_no_json_object_is_read_whole_not_a_crash():
    """A caller's mistake (a list of messages where a body goes) raised AttributeError (a review); every string in
    it is read instead, so what it holds is still found."""
    text = request_text([{"role": "user", "content": "mail ann@example.com"}, "SSN 123-45-6789"])
    assert set(detect(text, ["email", "ssn"])) == {"email", "ssn"}
    assert request_text([]) == "" and request_text("just text") == "just text"
