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
`lookalike_readings(data)` are second readings of the normalized text, where
Latin, Cyrillic or Greek letters meet in a word (`ЅЅN`, `рhone`, `Teлефон`):
the detectors read them all, so a label in lookalikes is read as it shows, a
Russian or Greek label with a Latin letter typed in as its own script's, and a
Latin label with a Russian ending (`WhatsAppе`, `SSNом`) as it was.
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
_LOOKALIKES = "аеорсухѕіјһԁԛԝӏүӀ" "АВЕКМНОРСТХЅІЈҮԚԜ" "ΑΒΕΖΗΙΚΜΝΟΡΤΥΧονρϲϹ"  # fmt: skip
_DRAWN_AS = "aeopcyxsijhdqwlyl" "ABEKMHOPCTXSIJYQW" "ABEZHIKMNOPTYXovpcC"  # fmt: skip
_LOOKALIKE_TABLE = str.maketrans(_LOOKALIKES, _DRAWN_AS)
LATIN_LOOKALIKES = dict(
    zip(_LOOKALIKES, _DRAWN_AS, strict=True)
)  # each Cyrillic or Greek lookalike -> its Latin letter


def _script_of(letter: str) -> str:
    return "Cyrillic" if "\u0400" <= letter < "\u0530" else "Greek"


def _drawn_in(script: str) -> dict[int, str]:
    """Every lookalike, Latin ones included, as the letter of `script` drawn the same (`o` and Greek `ο` as
    Cyrillic `о`), for a word of that script with a Latin or other lookalike typed into it (`Teлефон`)."""
    own = {latin: other for other, latin in zip(_LOOKALIKES, _DRAWN_AS, strict=True) if _script_of(other) == script}
    table = {ord(latin): other for latin, other in own.items()}
    for other, latin in zip(_LOOKALIKES, _DRAWN_AS, strict=True):
        if _script_of(other) != script and latin in own:
            table[ord(other)] = own[latin]
    return table


_AS_SCRIPT = {"Cyrillic": _drawn_in("Cyrillic"), "Greek": _drawn_in("Greek")}
# Each byte as what it is to where scripts meet: an ASCII letter `L`, a Greek or Cyrillic letter's first byte `C`, a
# character's later byte `c`, a dot `.` (`S.Ѕ.N.`), else a space; then the meets below are found by bytes.find at
# memory speed. Where both Greek and Cyrillic letters are, their first bytes told apart (`G` for Greek's) as well.
_BYTE_CLASSES = {
    **{b: "c" for b in range(0x80, 0xC0)},
    **{b: "C" for b in range(0xCE, 0xD5)},
    **{ord(letter): "L" for letter in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"},
    ord("."): ".",
}
_CLASSES = bytes.maketrans(bytes(range(256)), bytes(ord(_BYTE_CLASSES.get(b, " ")) for b in range(256)))
_SCRIPTS = bytes.maketrans(
    bytes(range(256)), bytes(ord({0xCE: "G", 0xCF: "G"}.get(b, _BYTE_CLASSES.get(b, " "))) for b in range(256))
)
# Where two scripts meet in a word (or in an abbreviation's one-letter parts between dots), with how far into the
# pattern a letter of the word is: Latin and Greek or Cyrillic either way round; and Greek and Cyrillic (`ЅЅΝ`: no
# language writes both in one word)
_LATIN_MEETS = ((b"LC", 1), (b"L.C", 2), (b"CcL", 0), (b"Cc.L", 0))
_SCRIPT_MEETS = ((b"CcG", 0), (b"GcC", 0), (b"Cc.G", 0), (b"Gc.C", 0))


_GREEK_OR_CYRILLIC = re.compile(rb"[\xce-\xd4]")
_CYRILLIC = re.compile(rb"[\xd0-\xd4]")  # a Cyrillic letter's first byte (a Greek one's: 0xCE, 0xCF)
# A word of ASCII, Greek and Cyrillic letters (one class, repeated in C; its later bytes are other characters' later
# bytes too, skipped at the word's start), read forward from where the scripts meet and back on the bytes reversed
_WORD = re.compile(rb"[A-Za-z\x80-\xbf\xce-\xd4]*")
# An abbreviation's one-letter parts, each with one dot after it (`S.Ѕ.N.`; not a leader of dots after a label, which
# made `ЅЅN` and sixty dots one word too long to read; a review), forward and on the bytes reversed
_DOTTED = re.compile(rb"(?:(?:[A-Za-z]|[\xce-\xd4][\x80-\xbf])\.?)*")
_DOTTED_BACK = re.compile(rb"(?:\.?(?:[A-Za-z]|[\x80-\xbf][\xce-\xd4]))*")
# Words where the scripts meet read one by one, up to this many (Ukrainian typed with a Latin `і` has one in most
# words); past them, the whole text is read with every lookalike as Latin, and as each script's own
_MOST_WORDS = 1024
_MOST_MEETS = 4 * _MOST_WORDS  # a word has one or two, or a few more where it is written in three scripts
_LONGEST_WORD = 64  # bytes: no label is longer, and a longer word is read as it is (a review's 2,000-letter words)
# A Greek or Cyrillic letter that draws no Latin one (`м`, `л`, `η`), by script; and a word's last ASCII letter
_OWN = {
    script: re.compile(
        "[" + "".join(chr(c) for c in range(first, last) if chr(c).isalpha() and chr(c) not in _LOOKALIKES) + "]"
    )
    for script, first, last in (("Cyrillic", 0x400, 0x530), ("Greek", 0x370, 0x400))
}
_LAST_LATIN = re.compile(r"[A-Za-z](?=[^A-Za-z]*\Z)")


def _own_letters(text: str) -> dict[str, int]:
    """How many Greek and Cyrillic letters text has that draw no Latin one, by script (each counted in C: a word of
    2,000 letters was a loop over each; a review)."""
    return {script: len(own.findall(text)) for script, own in _OWN.items()}


def _as_latin(word: str) -> tuple[str, str]:
    """A word's lookalikes as the Latin letters they show: all of them (`phonеы` reads `phoneы`, a label and a Russian
    ending), and all but an ending after its last Latin letter that has letters only its own script has (`рhoneом`
    reads `phoneом`, as `phoneом` is read: a Latin label with a Russian case ending typed on a Russian layout)."""
    whole = word.translate(_LOOKALIKE_TABLE)
    last = _LAST_LATIN.search(word)
    cut = last.end() if last is not None else 0
    if any(_own_letters(ending := word[cut:]).values()):
        return whole, word[:cut].translate(_LOOKALIKE_TABLE) + ending
    return whole, whole


def _in_its_script(word: str) -> str:
    """A word with letters of its own script that draw no Latin one (`Teлефон`'s л, ф, н; `Tηλέφωνο`'s η, λ, φ…), its
    lookalikes as that script's letters (Greek's where it has more of them than Cyrillic); other words as they are."""
    counts = _own_letters(word)
    if not any(counts.values()):
        return word
    return word.translate(_AS_SCRIPT["Greek" if counts["Greek"] > counts["Cyrillic"] else "Cyrillic"])


def _one_letter_parts(letters: bytes, at: int, pattern: bytes) -> bool:
    """A meet across a dot (`pattern` holds one) counts between one-letter parts only (`S.Ѕ.N.`), not between words
    (`объект.name`, code: past the words' limit, it read every `РН` as `PH`; a review)."""
    end = at + len(pattern) + (pattern[-1:] != b"L")  # past the last letter (and its later byte)
    return letters[at - 1 : at] not in (b"L", b"C", b"G", b"c") and letters[end : end + 1] not in (b"L", b"C", b"G")


# The same mappings as byte replacements, for a whole text: one replace in C a letter (~0.3 ms a megabyte each),
# where str.translate with a table of non-ASCII letters took ~50 ns a character
_REPLACEMENTS = {
    name: tuple((chr(old).encode(), (new if isinstance(new, str) else chr(new)).encode()) for old, new in table.items())
    for name, table in (("Latin", _LOOKALIKE_TABLE), *_AS_SCRIPT.items())
}


def _whole_text_readings(data: bytes) -> list[bytes]:
    """Every lookalike in the text as Latin, and as the letters of each script the text has."""
    scripts = ["Greek"] if b"\xce" in data or b"\xcf" in data else []
    scripts += ["Cyrillic"] if _CYRILLIC.search(data) else []
    readings = []
    for name in ("Latin", *scripts):
        reading = data
        for old, new in _REPLACEMENTS[name]:
            reading = reading.replace(old, new)
        readings.append(reading)
    return readings


def lookalike_readings(data: bytes) -> list[bytes]:
    """Second readings of the normalized text (normalize_utf8's) where Latin, Greek and Cyrillic letters meet in a
    word: with the lookalikes of each such word read as the Latin letters they show (`ЅЅN`, `рhone`, `ЅЅΝ`,
    `S.Ѕ.N.`), once more keeping its own script's ending (`рhoneом`); and, where such a word has letters only its own
    script has, with its Latin lookalikes read as that script's (`Teлефон`, `Tηλέφωνο`: a Russian or Greek label
    typed with a Latin letter in it). No reading where no word has two scripts (Russian and Greek text as people
    write it). Mapping them in place lost a Latin label's Russian ending (`WhatsAppе` read `WhatsAppe`, no label):
    these readings are beside the text as it is. Only those words: every lookalike in the text read as Latin made
    Russian words labels (`РН` read `PH`) once a `GitHubе` was anywhere; but past _MOST_WORDS such words, the whole
    text is read so, in C (`_whole_text_readings`)."""
    if _GREEK_OR_CYRILLIC.search(data) is None:  # most text: one scan in C
        return []
    classes = data.translate(_CLASSES)
    meets: list[tuple[int, bool]] = []  # (where a word's scripts meet, across a dot)
    both = (b"\xce" in data or b"\xcf" in data) and _CYRILLIC.search(data)  # Greek and Cyrillic
    for letters, patterns in ((classes, _LATIN_MEETS), (data.translate(_SCRIPTS) if both else b"", _SCRIPT_MEETS)):
        for pattern, offset in patterns:
            at, looked, dotted = 0, 0, b"." in pattern
            while len(meets) <= _MOST_MEETS and looked <= _MOST_MEETS and (at := letters.find(pattern, at)) != -1:
                looked += dotted  # (a dotted pair of words, `ab.вг.`, is looked at and let go: at most so many)
                if not dotted or _one_letter_parts(letters, at, pattern):
                    meets.append((at + offset, dotted))
                at += 1
    if not meets:
        return []
    if len(meets) > _MOST_MEETS:
        return _whole_text_readings(data)
    latin, kept, native, done, words = [], [], [], 0, 0
    for meet, dotted in sorted(meets):
        if meet < done:
            continue  # in the word read already
        if (words := words + 1) > _MOST_WORDS:
            return _whole_text_readings(data)
        back, forward = (_DOTTED_BACK, _DOTTED) if dotted else (_WORD, _WORD)
        start = meet - back.match(data[done:meet][::-1]).end()
        while classes[start] == 99:  # `c`: the tail of another script's character (`é`) before the word
            start += 1
        end = forward.match(data, meet).end()
        if end - start > _LONGEST_WORD:
            start = end  # read as it is, with what comes before it
        word = data[start:end].decode(errors="surrogateescape")
        between = data[done:start]
        whole, ending_kept = _as_latin(word)
        latin += [between, whole.encode(errors="surrogateescape")]
        kept += [between, ending_kept.encode(errors="surrogateescape")]
        native += [between, _in_its_script(word).encode(errors="surrogateescape")]
        done = end
    readings = []
    for pieces in (latin, kept, native):
        reading = b"".join([*pieces, data[done:]])
        if reading != data and reading not in readings:
            readings.append(reading)
    return readings


_URL_ESCAPES = ((b"%20", b" "), (b"%2B", b"+"), (b"%2b", b"+"), (b"%40", b"@"), (b"%3A", b":"), (b"%3a", b":"))


def _html_space(match: re.Match[bytes]) -> bytes:
    return b"\n" if match.group()[:1] == b"<" else b" "


def normalize(text: str) -> str:
    return normalize_utf8(text).decode()


# Subtitles (SRT, WebVTT): each cue's number and times, then its lines. They part a question from its answer in the
# next cue (`What's the best phone number to reach you?`, `2`, `00:00:04,500 --> 00:00:07,000`, `4155550100`), and a
# voice tag names the speaker (`<v Customer>4155550100`) where a transcript writes `Customer: 4155550100`.
_CUE_TIME = rb"(?:[0-9]{1,3}:)?[0-9]{1,2}:[0-9]{2}[.,][0-9]{1,3}"
# A cue's header: its identifier where one stands alone after a blank line (SRT's number, WebVTT's any text: `q1`),
# then its times (`-->` with or without blanks, WebVTT's settings after).
_CUE = re.compile(
    rb"^[ \t]*(?:(?:(?<=\n\n)|(?<=\n\r\n)|\A)[^\r\n]{1,64}\r?\n[ \t]*)?"
    + _CUE_TIME
    + rb"[ \t]*-->[ \t]*"
    + _CUE_TIME
    + rb"[^\r\n]{0,256}(?:\r?\n|\Z)"
    # WebVTT's NOTE and STYLE blocks, up to the blank line that ends them
    + rb"|^(?:NOTE|STYLE|REGION)(?:[ \t][^\r\n]*)?(?:\r?\n[^\r\n]+)*(?:\r?\n|\Z)",
    re.MULTILINE,
)
_BLANK_LINES = re.compile(rb"\n(?:[ \t]*\r?\n){2,}")
_VOICE = re.compile(rb"<v(?:\.[a-z0-9_.-]{1,40})?[ \t]+([^<>\r\n]{1,64})>", re.IGNORECASE)
_CUE_MARKUP = re.compile(
    rb"</?(?:v|c|i|b|u|lang|ruby|rt|font)(?:\.[a-z0-9_.-]{1,40})?(?:[ \t][^<>\r\n]{0,64})?>|<"
    + _CUE_TIME
    + rb">|\{\\an?[0-9]{1,2}\}",  # SRT's position tags (`{\an8}`)
    re.IGNORECASE,
)


def subtitle_reading(data: bytes) -> bytes | None:
    """A second reading of the normalized text where it holds subtitles' cues: their headers (identifier, times)
    and WebVTT's NOTE blocks dropped, a voice tag written as a transcript's speaker (`<v Customer>` as
    `Customer: `), other cue markup (`<i>`, `<font …>`, `{\an8}`, `<00:00:05.000>`) dropped, one blank line at most
    between cues; so a question and the answer in the next cue meet as in a transcript. None where the text has no
    cue times (one scan for `-->`, in C). Cues stay apart by their blank line: joined, a count in one and a number
    in the next read as one phone number (a review)."""
    if b"-->" not in data:
        return None
    read = _CUE.sub(b"", data)
    if read == data:
        return None
    return _BLANK_LINES.sub(b"\n\n", _CUE_MARKUP.sub(b"", _VOICE.sub(rb"\1: ", read)))
