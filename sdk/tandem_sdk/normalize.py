"""The text the PII detectors read: one normal form for what people type in any script.

`normalize(text)` maps, character by character:
- Unicode format characters (category Cf: zero-width space and joiners, soft
  hyphen, BOM, word joiner, bidi marks) to nothing, so a number or an address
  split by invisible characters reads whole;
- decimal digits of every script (full-width, Arabic-Indic, Devanagari, ...)
  to 0-9;
- every Unicode dash to "-", every Unicode space to " ", line and paragraph
  separators to a line break;
- every other character whose NFKC form is ASCII to that form: full-width
  letters and "@", "．", "（", ligatures, circled and mathematical digits.
Characters whose NFKC form is not ASCII (CJK compatibility ideographs, say)
stay as they are: the detectors only read ASCII.

The mapping is a generated table (`_normalization_table.py`, from one Unicode
version), so the SDK on a phone and the gateway on a server normalize the same
text the same way whatever Python each runs. Regenerate it with
`python -m tandem_sdk.normalization_gen --write`; `make test` runs `--check`.
Pure ASCII text is returned as it is, which costs one C-level scan.
"""

import re

from tandem_sdk._normalization_table import MAPPING


def _ranges(codes: list[int]) -> str:
    if not codes:  # only while the table is being generated
        return "\x00"
    out, start, prev = [], codes[0], codes[0]
    for code in [*codes[1:], -1]:
        if code == prev + 1:
            prev = code
            continue
        out.append(re.escape(chr(start)) + ("" if start == prev else "-" + re.escape(chr(prev))))
        start = prev = code
    return "".join(out)


# Two classes: one within the BMP, which re compiles to a fast bitmap, and the rest (math digits, tags).
_BMP = re.compile("[" + _ranges(sorted(c for c in MAPPING if c < 0x10000)) + "]+")
_ASTRAL = re.compile("[\U00010000-\U0010ffff]+")


def _mapped(match: re.Match[str]) -> str:
    return match.group().translate(MAPPING)


def normalize(text: str) -> str:
    """What the detectors scan: ASCII digits, dashes and spaces, no invisible characters."""
    if text.isascii():
        return text
    if len(_BMP.findall(text)) > len(text) // 8 + 16:
        return text.translate(MAPPING)  # dense: one pass of str.translate is cheaper than a call per run
    mapped = _BMP.sub(_mapped, text)
    if _ASTRAL.search(mapped):
        mapped = _ASTRAL.sub(_mapped, mapped)
    return mapped
