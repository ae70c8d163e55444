"""The text the PII detectors read: one normal form for what people type in any script.

`normalize(text)` maps, character by character:
- Unicode format characters (category Cf: zero-width space and joiners, soft
  hyphen, BOM, word joiner, bidi marks) to nothing, so a number or an address
  split by invisible characters reads whole; and so the combining marks of no
  one script (an accent written apart, an underline, a keycap: `4️⃣`, `4̲`);
- decimal digits of every script (full-width, Arabic-Indic, Devanagari, ...)
  to 0-9;
- every Unicode dash (and the katakana prolonged sound mark, typed between
  digits on Japanese keyboards) to "-", every Unicode space to " ", line and
  paragraph separators to a line break;
- every other character whose NFKC form is written with what numbers and
  addresses are written with (ASCII letters, digits, spaces and `@.+-()/#%_`)
  to that form: full-width letters and "@", "．", "（", ligatures and
  mathematical digits. Superscripts and circled numbers (category No) stay: a
  footnote mark after a number is not one of its digits;
`latin_looking(data)` is a second reading of the normalized text, where Cyrillic
or Greek letters meet ASCII ones in a word (`ЅЅN`, `рhone`): the detectors read
both, so a label in lookalikes is read as it shows, and a Latin label with a
Russian ending (`WhatsAppе`, `SSNом`) as it was.
Other characters stay as they are (CJK compatibility ideographs, a full-width
comma, colon or full stop, which CJK text is full of): the detectors only read
ASCII letters, digits and those signs.

The mapping is a generated table (`_normalization_table.py`, from one Unicode
version), so the SDK on a phone and the gateway on a server normalize the same
text the same way whatever Python each runs. Regenerate it with
`python -m tandem_sdk.normalization_gen --write`; `make test` runs `--check`.
Pure ASCII text is returned as it is. The detectors read `normalize_utf8`'s bytes.
"""

import re

from tandem_sdk._normalization_table import MAPPING, MARKS


def _trie(encodings: list[bytes]) -> str:
    """A regex matching exactly one of these byte strings, as a trie: `\xef(?:\xbc[\x90-\x99]|...)`.

    Its first byte is a plain class, so `re` skips every other byte in C: CJK text, whose lead bytes
    (0xE4-0xE9) start no mapped character, is passed over at memory speed.
    """
    if not encodings:  # only while the table is being generated
        return "(?!)"
    by_first: dict[int, list[bytes]] = {}
    for encoding in encodings:
        by_first.setdefault(encoding[0], []).append(encoding[1:])
    singles = sorted(first for first, rests in by_first.items() if rests == [b""])
    branches = ["[" + "".join(f"\\x{b:02x}" for b in singles) + "]"] if singles else []
    for first, rests in sorted(by_first.items()):
        if rests != [b""]:
            assert b"" not in rests, "UTF-8 is prefix-free"
            branches.append(f"\\x{first:02x}" + _trie(rests))
    return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"


_ONE_MAPPED = _trie(sorted(chr(code).encode() for code in MAPPING))
# A run of them. Written `x(?:x)*`, not `(?:x)+`: re takes the first-byte class from a leading branch only.
_UTF8 = re.compile(f"{_ONE_MAPPED}(?:{_ONE_MAPPED})*".encode("latin-1"))


# Deleted by re in C, without a call a match (and `x(?:x)*` as above): a text of stacked marks (Zalgo) is cheap
_ONE_MARK = _trie(sorted(chr(code).encode() for first, last in MARKS for code in range(first, last + 1)))
_MARKS = re.compile(f"{_ONE_MARK}(?:{_ONE_MARK})*".encode("latin-1"))
_ONE = {chr(code).encode(): value.encode() for code, value in MAPPING.items()}  # the usual run: one character


def _mapped(match: re.Match[bytes]) -> bytes:
    run = match.group()
    one = _ONE.get(run)
    return one if one is not None else run.decode().translate(MAPPING).encode()


_HTML_SPACE = re.compile(rb"&nbsp;|&#160;|&#xa0;|<br\s*/?>", re.IGNORECASE)
# Control characters stay what they are, a boundary: the fields of a FIX message (`34=1571\x0111=130355126`) or a
# NUL-separated list (deleted, they glued fields into phone and card numbers: a review). But text read in the wrong
# encoding, UTF-16 as UTF-8, has a NUL after every character (`a\x00n\x00n\x00@\x00…`): there the NULs are
# nothing, or its PII would be hidden from the detectors and still reach the model (the tokenizer keeps them).
_UTF16_READ_AS_UTF8 = re.compile(rb"(?:[^\x00]\x00){8}")
# HTML's character references for what addresses and numbers are written with, as a CMS writes an address to hide
# it from harvesters (`ann&#64;example.com`, every character as `&#97;` or `&#x61;`) and as pasted pages keep them
_HTML_REFERENCE = re.compile(r"&#(?:[xX]([0-9a-fA-F]{1,6})|([0-9]{1,7}));?")
_HTML_NAMED = (("&commat;", "@"), ("&period;", "."), ("&plus;", "+"), ("&colon;", ":"), ("&lpar;", "("),
               ("&rpar;", ")"), ("&hyphen;", "-"), ("&dash;", "-"), ("&lowbar;", "_"), ("&sol;", "/"))  # fmt: skip


def _html_character(match: re.Match[str]) -> str:
    code = int(match.group(1), 16) if match.group(1) else int(match.group(2))
    return chr(code) if 0 < code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else match.group()


def normalize_utf8(text: str) -> bytes:
    """What the detectors scan, as UTF-8: ASCII digits, dashes and spaces, no invisible characters.

    Text pasted from a web page or a mail keeps its HTML spaces and line breaks (4111&nbsp;1111…):
    they read as a space and a line break; and a pasted URL its escapes for a space, a `+`, an `@` and a `:`. A lone
    surrogate (invalid Unicode) reads as "?". HTML character references are read as what they spell (`&#64;`,
    `&#x40;`, `&commat;`); in UTF-16 read as UTF-8, the NULs as nothing."""
    if "&" in text:
        if "&#" in text:
            text = _HTML_REFERENCE.sub(_html_character, text)
        if ";" in text:
            for name, sign in _HTML_NAMED:
                text = text.replace(name, sign)
    data = text.encode(errors="replace")
    if len(data) != len(text):  # not ASCII
        dense = len(data) // 16 + 16
        data, runs = _UTF8.subn(_mapped, data, count=dense)
        if runs == dense:  # a mapped character every few: one str.translate is cheaper than a call per run
            data = text.translate(MAPPING).encode(errors="replace")
        data = _MARKS.sub(b"", data)
    if b"\x00" in data and _UTF16_READ_AS_UTF8.search(data):
        data = data.replace(b"\x00", b"")
    if b"&" in data or b"<" in data:
        data = _HTML_SPACE.sub(_html_space, data)
    if b"%" in data:  # a pasted URL's query: ?phone=%2B442079460958, ?card=4111%201111…, ?email=ann%40example.com
        for escape, sign in _URL_ESCAPES:  # in C: a megabyte of `%20` is one call each, not a call a match
            data = data.replace(escape, sign)
    return data


# Cyrillic and Greek letters drawn as Latin ones (`ЅЅN` with Macedonian Dze, `рhone` typed with one key of a Russian
# layout, `SSΝ` with a Greek Nu), each as the Latin letter it shows
_LOOKALIKE_TABLE = str.maketrans(  # each letter above the Latin one it shows
    "аеорсухѕіјһԁԛԝӏ" "АВЕКМНОРСТХЅІЈҮԚԜ" "ΑΒΕΖΗΙΚΜΝΟΡΤΥΧονρϲ",
    "aeopcyxsijhdqwl" "ABEKMHOPCTXSIJYQW" "ABEZHIKMNOPTYXovpc",
)  # fmt: skip
# Each byte as what it is to where scripts meet: an ASCII letter `L`, a Greek or Cyrillic letter's first byte `C`,
# a character's later byte `c`, else a space; then `LC` and `CcL` are found by bytes.find at memory speed.
_CLASSES = bytes.maketrans(
    bytes(range(256)),
    bytes(
        ord("L") if chr(b).isascii() and chr(b).isalpha() else
        ord("C") if b in (0xCE, 0xCF, 0xD0, 0xD1, 0xD2, 0xD3, 0xD4) else
        ord("c") if 0x80 <= b < 0xC0 else
        ord(" ")
        for b in range(256)
    ),
)  # fmt: skip


_GREEK_OR_CYRILLIC = re.compile(rb"[\xce-\xd4]")
# A word of ASCII, Greek and Cyrillic letters (one class, repeated in C; its later bytes are other characters' later
# bytes too, skipped at the word's start), read forward from where the scripts meet and back on the bytes reversed
_WORD = re.compile(rb"[A-Za-z\x80-\xbf\xce-\xd4]*")
_MOST_MEETS = 256  # words where the scripts meet read one by one; past them, every lookalike is read as Latin


def latin_looking(data: bytes) -> bytes | None:
    """The normalized text (normalize_utf8's) with the Greek and Cyrillic lookalikes of each word where one meets an
    ASCII letter read as the Latin letters they show; None where no word has both (Russian and Greek text as people
    write it: no second reading). Mapping them in place lost a Latin label's Russian ending (`WhatsAppе` read
    `WhatsAppe`, no label): this reading is a second one, beside the text as it is. Only those words: every lookalike
    in the text read as Latin made Russian words labels (`РН` read `PH`) once a `GitHubе` was anywhere; but past
    _MOST_MEETS such words (no one writes so many), every lookalike is, in one pass."""
    if _GREEK_OR_CYRILLIC.search(data) is None:  # most text: one scan in C
        return None
    classes = data.translate(_CLASSES)
    meets, at = [], 0
    while len(meets) <= _MOST_MEETS and (at := classes.find(b"LC", at)) != -1:
        meets.append(at + 1)
        at += 1
    at = 0
    while len(meets) <= 2 * _MOST_MEETS and (at := classes.find(b"CcL", at)) != -1:
        meets.append(at)
        at += 1
    if not meets:
        return None
    if len(meets) > _MOST_MEETS:
        return data.decode(errors="surrogateescape").translate(_LOOKALIKE_TABLE).encode(errors="surrogateescape")
    pieces, done = [], 0
    for meet in sorted(meets):
        if meet < done:
            continue  # in the word read already
        start = meet - _WORD.match(data[done:meet][::-1]).end()
        while classes[start] == 99:  # `c`: the tail of another script's character (`é`) before the word
            start += 1
        end = _WORD.match(data, meet).end()
        word = data[start:end].decode(errors="surrogateescape").translate(_LOOKALIKE_TABLE)
        pieces += [data[done:start], word.encode(errors="surrogateescape")]
        done = end
    pieces.append(data[done:])
    return b"".join(pieces)


_URL_ESCAPES = ((b"%20", b" "), (b"%2B", b"+"), (b"%2b", b"+"), (b"%40", b"@"), (b"%3A", b":"), (b"%3a", b":"))


def _html_space(match: re.Match[bytes]) -> bytes:
    return b"\n" if match.group()[:1] == b"<" else b" "


def normalize(text: str) -> str:
    return normalize_utf8(text).decode()
