"""PII detectors: recall, false alarms and scan time, on a seeded oracle written apart from the detectors.

Every case is an OpenAI request body, built the way clients send them, passed
through `request_text` and then `detect(text, every detector)`. Measured:
- recall over labelled in-scope PII (e-mail addresses, phone numbers, payment
  cards, Chinese resident IDs, IBANs, US Social Security numbers): many
  formats per type; six encodings
  (ASCII, full-width, zero-width characters inside, Unicode spaces and dashes
  as separators, Arabic-Indic digits, a mix); nine positions (start and end
  of the text, inside an English, Chinese, German or Arabic sentence, next to
  CJK with no space, alone, right after another number); twelve places in the request (system, user,
  assistant and tool messages, a content part, split over two content parts
  or two messages, tool-call arguments, `stop`, `user`, a completions
  `prompt` string or list). A case counts when its own detector fires; how
  often any detector fires is reported too;
- the false-alarm rate over look-alikes that must fire nothing: dates, times,
  versions and ranges, order and invoice numbers, ISBNs, UUIDs, hashes,
  Luhn-failing card-shaped numbers, IP addresses, amounts, percentages, code
  with "@", coordinates, maths, short numbers, years, postal codes,
  timestamps, log lines, IBANs and IDs with a wrong check, SSN-shaped numbers
  that are no SSN;
- recall on PII the detectors do not promise to find (national numbers
  without a trunk prefix, 7-digit local numbers, base64 addresses,
  JSON-escaped text, other card schemes, residence permits, IBANs whose
  bank's own check fails, ITINs), reported apart and counted in no goal;
  and written-out addresses (`email-obfuscated`: `ann (at) example (dot)
  com`), kept there since the `email` detector learned to read them
  (2026-12-04) so the seeded cases before them stay the same;
- the p99 time of `detect(request_text(body))` on a ~16,000-character English
  prompt (~4k tokens) and a ~5,500-character Chinese one; the English prompt
  with curly quotes and em dashes (no longer ASCII) is timed and reported too,
  not counted.

Goals: recall >= 0.995, false-alarm rate <= 0.01, p99 <= 1000 us.
Prints a table, up to 20 missed positives and 20 false alarms; last line: one JSON object.

    python bench/privacy.py --quick      # ~1,500 positives, ~1,300 look-alikes
    python bench/privacy.py              # 5x the cases, 2,000 timed scans per prompt (--quick: 500)
"""

import argparse
import base64
import functools
import json
import random
import re
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path

import phonenumbers as pn
from stdnum import iban as std_iban
from stdnum import isbn as std_isbn
from stdnum import numdb
from stdnum.cn import ric

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sdk"))

from tandem_sdk.detectors import DETECTORS, detect  # noqa: E402
from tandem_sdk.scan import request_text  # noqa: E402

NAMES = list(DETECTORS)
GOALS = {"recall": 0.995, "false_alarm_rate": 0.01, "detect_us_p99": 1000.0}
LAST_BIRTH_DATE = date(2024, 12, 31)  # fixed, so that a seed gives the same cases on every day
DIGITS, UPPER = "0123456789", "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
MODEL = "tandem-demo"
SYSTEM = "You are a helpful assistant."


@dataclass
class Case:
    kind: str  # the PII type, the look-alike family or the out-of-scope kind
    group: str  # "positive", "lookalike" or "out_of_scope"
    expect: str | None  # the detector that must fire; None: none may
    fmt: str
    enc: str
    pos: str
    placement: str
    texts: list[str]  # what was put in the request (two pieces when split)
    body: dict
    fired: list[str] = field(default_factory=list)


# ---------------------------------------------------------------- encodings

FULLWIDTH = {chr(c): chr(c + 0xFEE0) for c in range(0x21, 0x7F)} | {" ": "\u3000"}
INVISIBLE = ["\u200b", "\u200d", "\ufeff", "\u00ad", "\u200c", "\u2060"]
SPACES = ["\u00a0", "\u202f", "\u2009", "\u2007", "\u3000"]
DASHES = ["\u2013", "\u2010", "\u2011", "\u2012", "\u2014", "\ufe63", "\uff0d"]


def insert_invisible(rng: random.Random, s: str, count: int) -> str:
    for _ in range(count):
        if len(s) >= 2:
            i = rng.randint(1, len(s) - 1)
            s = s[:i] + rng.choice(INVISIBLE) + s[i:]
    return s


def unicode_separators(rng: random.Random, s: str, share: float) -> str:
    """Spaces and hyphens to other Unicode spaces and dashes: one kind throughout (share 1) or a mix."""
    space, dash = rng.choice(SPACES), rng.choice(DASHES)
    out = []
    for c in s:
        if c not in " -" or rng.random() >= share:
            out.append(c)
        elif share >= 1:
            out.append(space if c == " " else dash)
        else:
            out.append(rng.choice(SPACES if c == " " else DASHES))
    return "".join(out)


def encode(rng: random.Random, s: str, enc: str) -> str:
    if enc == "fullwidth":
        return "".join(FULLWIDTH.get(c, c) for c in s)
    if enc == "zero-width":
        return insert_invisible(rng, s, rng.randint(1, 3))
    if enc == "unicode-separators":
        return unicode_separators(rng, s, 1.0)
    if enc == "arabic-indic":
        zero = rng.choice([0x660, 0x6F0])  # Arabic-Indic, Extended (Persian)
        return "".join(chr(zero + int(c)) if c in DIGITS else c for c in s)
    if enc == "mixed":
        s = unicode_separators(rng, s, 0.5)
        s = "".join(FULLWIDTH[c] if c != " " and c in FULLWIDTH and rng.random() < 0.5 else c for c in s)
        return insert_invisible(rng, s, 1)
    return s


def effective_encoding(enc: str, value: str) -> str:
    if enc == "unicode-separators" and not re.search("[ -]", value):
        return "mixed"  # nothing to swap in a contiguous number
    return enc


# ---------------------------------------------------------------- contexts and placements

POSITIONS = [
    "start",
    "end",
    "middle-en",
    "middle-zh",
    "middle-de",
    "middle-ar",
    "cjk-adjacent",
    "alone",
    "after-number",
]
POSITION_LANGUAGE = {"middle-zh": "zh", "cjk-adjacent": "zh", "middle-de": "de", "middle-ar": "ar"}
TEMPLATES = {
    "start": ["{v} is the {label} I gave you last week, please update the record.",
              "{v}, that is the {label} we have on file.", "{v} (the {label} from the form) needs checking."],
    "end": ["Please update my {label} to {v}", "The {label} on file is {v}.", "Use this {label}: {v}",
            "Sorry for the delay (new {label}: {v})"],
    "middle-en": ["Hi team, my {label} is {v} and I would like it changed before Friday.",
                  "Could you check whether {v} is still the right {label} on file?",
                  "For reference: {label} {v}, copied from the old ticket."],
    "middle-zh": ["你好，我的{label}是 {v} ，麻烦帮我更新一下。", "请核对一下{label}：{v}，确认后回复我。",
                  "客户留下的{label}是{v}，请尽快处理。"],
    "middle-de": ["Hallo, als {label} ist {v} hinterlegt, bitte bis Freitag ändern.",
                  "Können Sie prüfen, ob {v} noch die richtige Angabe ({label}) ist?",
                  "Zur Info: {label} {v}, aus dem alten Ticket übernommen."],
    "middle-ar": ["مرحبا، {label} الخاص بي هو {v} وأرجو تحديثه قبل يوم الجمعة.",
                  "هل يمكنك التأكد من أن {v} هو {label} الصحيح لهذا الحساب؟"],
    "cjk-adjacent": ["我的{label}是{v}请保密", "{label}：{v}谢谢", "请把{v}填到{label}一栏", "{v}是我的{label}"],
    "alone": ["{v}"],
    # another number just before it: a room, a step, a total on the line above (a batch's previous prompt)
    "after-number": ["Room 12 {v} is the {label} to use.", "Total: 42\n{v} is my {label}.", "Step 3. {v} ({label})",
                     "Order 88\n{v}"],
}  # fmt: skip
BASE_PLACEMENTS = ["user", "system", "assistant", "tool-result", "content-part", "tool-args", "stop",
                   "user-field", "prompt", "prompt-list"]  # fmt: skip


def balanced(rng: random.Random, options: list, n: int) -> list:
    """n picks, each option about as often as the others, in a seeded order."""
    out = (options * (n // len(options) + 1))[:n]
    rng.shuffle(out)
    return out


def context(rng: random.Random, labels: dict[str, list[str]], pos: str) -> tuple[str, str]:
    template = rng.choice(TEMPLATES[pos])
    label = rng.choice(labels[POSITION_LANGUAGE.get(pos, "en")])
    prefix, suffix = template.replace("{label}", label).split("{v}")
    return prefix, suffix


def split_value(rng: random.Random, value: str, placement: str) -> list[str]:
    if placement == "split-parts" or (placement == "split-messages" and "@" in value):  # any cut: parts are joined
        # with nothing, and an address sent in two messages is read across the seam
        i = rng.randint(1, len(value) - 1)
        return [value[:i], value[i:]]
    if placement == "split-messages":  # a person sends the number in two messages, at a group break (not before its
        breaks = list(re.finditer(r"(?<=\d)\D+(?=\d)", value))  # first digit: a label stays with it)
        if breaks:
            cut = breaks[len(breaks) // 2]
            return [value[: cut.start()], value[cut.end() :]]
        first = re.search(r"\d", value).start()  # nine digits after a label: cut among the digits, as `SSN: 1234`
        i = first + 4 * max(1, (len(value) - first) // 8)  # then `56789`
        return [value[:i], value[i:]]
    return [value]


def user(text) -> dict:
    return {"role": "user", "content": text}


def tool_call(arguments: str) -> dict:
    call = {"id": "call_0", "type": "function", "function": {"name": "update_profile", "arguments": arguments}}
    return {"role": "assistant", "content": None, "tool_calls": [call]}


def place(placement: str, texts: list[str]) -> dict:
    """A request body with the text where `placement` says."""
    t, sys_msg = texts[0], {"role": "system", "content": SYSTEM}
    chat = {"model": MODEL, "messages": [sys_msg, user(t)]}
    if placement == "system":
        chat["messages"] = [{"role": "system", "content": t}, user("Summarize the notes above.")]
    elif placement == "assistant":
        chat["messages"] = [sys_msg, user("What do you have on file?"), {"role": "assistant", "content": t},
                            user("Thanks, keep it.")]  # fmt: skip
    elif placement == "tool-result":
        chat["messages"] = [sys_msg, user("Look me up."), tool_call('{"lookup": "me"}'),
                            {"role": "tool", "tool_call_id": "call_0", "content": t}]  # fmt: skip
    elif placement == "content-part":
        image = {"type": "image_url", "image_url": {"url": "https://example.com/receipt.png"}}
        chat["messages"] = [sys_msg, user([{"type": "text", "text": t}, image])]
    elif placement == "split-parts":
        chat["messages"] = [sys_msg, user([{"type": "text", "text": s} for s in texts])]
    elif placement == "split-messages":
        chat["messages"] = [sys_msg, user(texts[0]), user(texts[1])]
    elif placement in ("tool-args", "tool-args-escaped"):
        arguments = json.dumps({"note": t, "priority": "normal"}, ensure_ascii=placement == "tool-args-escaped")
        chat["messages"] = [sys_msg, user("Update my details."), tool_call(arguments)]
    elif placement == "stop":
        chat = {"model": MODEL, "messages": [sys_msg, user("List the accounts.")], "stop": ["\n\n", t]}
    elif placement == "user-field":
        chat["messages"], chat["user"] = [sys_msg, user("Hello!")], t
    elif placement == "prompt":
        chat = {"model": MODEL, "prompt": t, "max_tokens": 64}
    elif placement == "prompt-list":
        chat = {"model": MODEL, "prompt": ["Summarize the following.", t], "max_tokens": 64}
    return chat


def make_case(rng: random.Random, kind: str, group: str, expect: str | None, value: str, fmt: str,
              draw: tuple[str, str, str]) -> Case:  # fmt: skip
    enc, pos, placement = draw
    enc = effective_encoding(enc, value)
    pieces = [encode(rng, p, enc) for p in split_value(rng, value, placement)]
    prefix, suffix = context(rng, LABELS[kind], pos)
    if len(pieces) == 1:
        texts = [prefix + pieces[0] + suffix]
    else:
        texts = [prefix + pieces[0], pieces[1] + suffix]
    return Case(kind, group, expect, fmt, enc, pos, placement, texts, place(placement, texts))


# ---------------------------------------------------------------- e-mail

FIRST_NAMES = ["ann", "john", "maria", "wei", "li", "fatima", "lukas", "sophie", "raj", "yuki", "omar", "chen",
               "olga", "diego", "jean", "aisha", "mateo", "ingrid", "kwame", "noa"]  # fmt: skip
LAST_NAMES = ["smith", "zhang", "mueller", "garcia", "nguyen", "kowalski", "haddad", "tanaka", "oconnor",
              "silva", "rossi", "ivanova", "kim", "patel", "schmidt", "wang", "dubois", "jensen", "mensah"]  # fmt: skip
DOMAINS = ["example.com", "mail.example.org", "corp.example.co.uk", "gmail.com", "outlook.de", "qq.com", "163.com",
           "yahoo.co.jp", "uni-heidelberg.de", "example.io", "startup.ai", "web.de", "sina.com.cn", "x.org",
           "museum-berlin.museum", "studio.photography", "firm.international", "shop.travelersinsurance",
           "b2b-partners.net", "mail.gov.cn", "proton.me", "hospital.sa", "edu.example.ac.kr"]  # fmt: skip


def email_local(rng: random.Random) -> str:
    first, last = rng.choice(FIRST_NAMES), rng.choice(LAST_NAMES)
    return rng.choice([
        f"{first}.{last}", f"{first}_{last}", f"{first[0]}{last}", f"{first}-{last}",
        f"{first}.{last}+{rng.choice(['news', 'shop', 'work', '2024'])}", f"{first}{rng.randint(1, 9999)}",
        str(rng.randint(10000, 9999999999)), rng.choice(["info", "support", "billing", "hr", "no-reply"]),
        f"{first}.{rng.choice(UPPER).lower()}.{last}", f"{last}.{first}{rng.randint(70, 99)}",
    ])  # fmt: skip


def gen_email(rng: random.Random) -> tuple[str, str]:
    address = f"{email_local(rng)}@{rng.choice(DOMAINS)}"
    case = rng.choice(["lower", "lower", "lower", "upper", "capitalized"])
    if case == "upper":
        address = address.upper()
    elif case == "capitalized":
        address = ".".join(p[:1].upper() + p[1:] for p in address.split("."))
    wrap = rng.choice(["bare"] * 5 + ["angle", "named", "mailto", "markdown"])
    value = {"bare": address, "angle": f"<{address}>", "named": f"Ann Smith <{address}>",
             "mailto": f"mailto:{address}", "markdown": f"[{address}](mailto:{address})"}[wrap]  # fmt: skip
    return value, f"{wrap}-{case}"


# ---------------------------------------------------------------- phone

INTL, E164, NATIONAL, RFC3966 = (pn.PhoneNumberFormat.INTERNATIONAL, pn.PhoneNumberFormat.E164,
                                 pn.PhoneNumberFormat.NATIONAL, pn.PhoneNumberFormat.RFC3966)  # fmt: skip
NANP_AREAS = ["201", "212", "213", "305", "312", "404", "415", "416", "503", "512", "604", "617", "646", "702",
              "713", "718", "801", "905", "917", "972"]  # fmt: skip
CN_MOBILE = ["130", "133", "135", "137", "138", "139", "145", "150", "152", "156", "158", "166", "170", "176",
             "177", "180", "182", "186", "187", "189", "191", "195", "198", "199"]  # fmt: skip


@functools.cache
def phone_examples() -> list[pn.PhoneNumber]:
    """The phonenumbers example mobile and fixed-line numbers of every region it knows."""
    out = []
    for region in sorted(pn.SUPPORTED_REGIONS):
        for ptype in (pn.PhoneNumberType.MOBILE, pn.PhoneNumberType.FIXED_LINE):
            number = pn.example_number_for_type(region, ptype)
            if number is not None:
                out.append(number)
    return out


def national_in_scope(s: str) -> bool:
    """Promised national shapes: a trunk prefix 0, an area code in parentheses, or 3-3-4."""
    if sum(c in DIGITS for c in s) < 9:
        return False
    return s.startswith("0") or "(" in s or bool(re.fullmatch(r"\d{3}[-. ]\d{3}[-. ]\d{4}", s))


@functools.cache
def national_pools() -> tuple[list[pn.PhoneNumber], list[pn.PhoneNumber]]:
    fmt = [(n, pn.format_number(n, NATIONAL)) for n in phone_examples()]
    return [n for n, s in fmt if national_in_scope(s)], [n for n, s in fmt if not national_in_scope(s)]


def vary(rng: random.Random, example: pn.PhoneNumber) -> pn.PhoneNumber:
    """Another valid number of the same region and type: the example with its last digits changed."""
    nsn = pn.national_significant_number(example)
    for _ in range(20):
        k = rng.randint(1, max(1, min(4, len(nsn) - 3)))
        number = pn.parse(f"+{example.country_code}{nsn[:-k]}{''.join(rng.choices(DIGITS, k=k))}")
        if pn.is_valid_number(number) and pn.number_type(number) == pn.number_type(example):
            return number
    return example


def any_number(rng: random.Random) -> pn.PhoneNumber:
    return vary(rng, rng.choice(phone_examples()))


def national(rng: random.Random) -> str:
    number = vary(rng, rng.choice(national_pools()[0]))
    text = pn.format_number(number, NATIONAL)
    return text if national_in_scope(text) else pn.format_number(rng.choice(national_pools()[0]), NATIONAL)


def international_trunk(rng: random.Random) -> str:
    """+44 (0)20 7946 0958: the way many Europeans write their number for abroad."""
    pool = [n for n in national_pools()[0] if pn.format_number(n, NATIONAL).startswith("0")]
    number = vary(rng, rng.choice(pool))
    text = pn.format_number(number, NATIONAL)
    return f"+{number.country_code} (0){text[1:]}" if text.startswith("0") else pn.format_number(number, INTL)


def nanp(rng: random.Random) -> str:
    a, b, c = rng.choice(NANP_AREAS), str(rng.randint(200, 999)), "".join(rng.choices(DIGITS, k=4))
    return rng.choice([f"({a}) {b}-{c}", f"{a}-{b}-{c}", f"{a}.{b}.{c}", f"{a} {b} {c}", f"1-{a}-{b}-{c}",
                       f"({a}){b}-{c}", f"1 ({a}) {b}-{c}", f"+1 ({a}) {b}-{c}"])  # fmt: skip


def cn_mobile(rng: random.Random) -> str:
    head, mid, tail = rng.choice(CN_MOBILE), "".join(rng.choices(DIGITS, k=4)), "".join(rng.choices(DIGITS, k=4))
    return rng.choice([f"{head}{mid}{tail}", f"{head} {mid} {tail}", f"{head}-{mid}-{tail}"])


def with_extension(rng: random.Random) -> str:
    base = rng.choice([pn.format_number(any_number(rng), INTL), national(rng), nanp(rng)])
    ext = rng.choice([" ext. {}", " x{}", " ext {}", " (ext. {})", ", extension {}"]).format(rng.randint(2, 9999))
    return base + ext


def cc_then_digits(rng: random.Random) -> str:
    number = any_number(rng)
    return f"+{number.country_code} {pn.national_significant_number(number)}"


PHONE_FORMATS: dict[str, Callable[[random.Random], str]] = {
    "international": lambda rng: pn.format_number(any_number(rng), INTL),
    "e164": lambda rng: pn.format_number(any_number(rng), E164),
    "00-prefix": lambda rng: "00" + pn.format_number(any_number(rng), INTL)[1:],
    "international-dashes": lambda rng: re.sub("[ -]", "-", pn.format_number(any_number(rng), INTL)),
    "international-dots": lambda rng: re.sub("[ -]", ".", pn.format_number(any_number(rng), INTL)),
    "international-double-spaces": lambda rng: pn.format_number(any_number(rng), INTL).replace(" ", "  "),
    "cc-then-digits": cc_then_digits,
    "tel-uri": lambda rng: pn.format_number(any_number(rng), RFC3966),
    "tel-uri-e164": lambda rng: "tel:" + pn.format_number(any_number(rng), E164),
    "international-(0)": international_trunk,
    "national": national,
    "national-2": national,  # the promised national shapes, twice the weight
    "nanp": nanp,
    "cn-mobile": cn_mobile,
    "extension": with_extension,
}


def gen_phone(rng: random.Random) -> tuple[str, str]:
    fmt = rng.choice(list(PHONE_FORMATS))
    return PHONE_FORMATS[fmt](rng), fmt.removesuffix("-2")


# ---------------------------------------------------------------- payment cards

ISSUERS = {  # name: (prefix ranges, lengths)
    "visa": ([(4, 4)], [16, 16, 16, 13, 19]),
    "mastercard": ([(51, 55), (2221, 2720)], [16]),
    "amex": ([(34, 34), (37, 37)], [15]),
    "discover": ([(6011, 6011), (65, 65)], [16, 16, 19]),
    "jcb": ([(3528, 3589)], [16]),
    "unionpay": ([(62, 62)], [16, 16, 17, 18, 19]),
    "diners": ([(36, 36), (38, 38)], [14]),
}
GROUPINGS = {13: [4, 3, 3, 3], 14: [4, 6, 4], 15: [4, 6, 5], 16: [4, 4, 4, 4], 17: [4, 4, 4, 5], 18: [4, 4, 4, 6],
             19: [4, 4, 4, 4, 3]}  # fmt: skip
CARD_SEPARATORS = {"contiguous": "", "space": " ", "nbsp": "\u00a0", "dash": "-", "en-dash": "\u2013", "dot": ".",
                   "slash": "/", "double-space": "  "}  # fmt: skip


def luhn_check_digit(payload: str) -> str:
    total = 0
    for i, c in enumerate(reversed(payload)):
        d = int(c) * (2 if i % 2 == 0 else 1)
        total += d - 9 if d > 9 else d
    return str(-total % 10)


def card_digits(rng: random.Random, issuer: str, valid: bool = True) -> str:
    ranges, lengths = ISSUERS[issuer]
    low, high = rng.choice(ranges)
    prefix, length = str(rng.randint(low, high)), rng.choice(lengths)
    payload = prefix + "".join(rng.choices(DIGITS, k=length - len(prefix) - 1))
    check = int(luhn_check_digit(payload))
    return payload + str(check if valid else (check + rng.randint(1, 9)) % 10)


def grouped(digits: str, separator: str) -> str:
    groups, i = [], 0
    for size in GROUPINGS[len(digits)]:
        groups.append(digits[i : i + size])
        i += size
    return separator.join(groups)


def gen_card(rng: random.Random) -> tuple[str, str]:
    issuer = rng.choice(list(ISSUERS))
    sep = rng.choice(list(CARD_SEPARATORS))
    return grouped(card_digits(rng, issuer), CARD_SEPARATORS[sep]), f"{issuer}-{sep}"


def card_issuer(digits: str) -> str | None:
    for name, (ranges, _) in ISSUERS.items():
        for low, high in ranges:
            width = len(str(low))
            if low <= int(digits[:width]) <= high and 13 <= len(digits) <= 19:
                return name
    return None


# ---------------------------------------------------------------- Chinese resident ID

MAINLAND = ["11", "12", "13", "14", "15", "21", "22", "23", "31", "32", "33", "34", "35", "36", "37", "41", "42",
            "43", "44", "45", "46", "50", "51", "52", "53", "54", "61", "62", "63", "64", "65"]  # fmt: skip
CN_ID_WEIGHTS = [7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2]


@functools.cache
def cn_counties() -> list[str]:
    """Real county codes (stdnum's copy of the GB/T 2260 list), mainland provinces only."""
    out = []
    for _, province, _, _, counties in numdb.get("cn/loc").prefixes:
        if province in MAINLAND:
            out += [province + c[1] for c in counties if not c[1].endswith("00")]
    return out


def cn_check(body17: str) -> str:
    """ISO 7064 MOD 11-2."""
    return "10X98765432"[sum(int(d) * w for d, w in zip(body17, CN_ID_WEIGHTS, strict=True)) % 11]


def birth_date(rng: random.Random) -> date:
    first, last = (date(1900, 1, 1), LAST_BIRTH_DATE) if rng.random() < 0.2 else (date(1945, 1, 1), date(2010, 12, 31))
    return first + timedelta(days=rng.randint(0, (last - first).days))


def cn_id(rng: random.Random, area: str, want_x: bool) -> str:
    born = birth_date(rng).strftime("%Y%m%d")
    for _ in range(60):
        body = area + born + "".join(rng.choices(DIGITS, k=3))
        if not want_x or cn_check(body) == "X":
            break
    assert cn_check(body) == ric.calc_check_digit(body + "0")
    return body + cn_check(body)


def gen_cn_id(rng: random.Random) -> tuple[str, str]:
    number = cn_id(rng, rng.choice(cn_counties()), want_x=rng.random() < 0.2)
    check = ""
    if number.endswith("X"):
        check = rng.choice(["-X", "-x"])
        number = number[:-1] + check[1]
    style = rng.choice(["contiguous", "contiguous", "grouped-space", "grouped-dash"])
    if style != "contiguous":
        sep = " " if style == "grouped-space" else "-"
        number = sep.join([number[:6], number[6:14], number[14:]])
    return number, style + check


# ---------------------------------------------------------------- IBAN

IBAN_COUNTRIES = [(p[1], p[3]["bban"]) for p in numdb.get("iban").prefixes]


def bban_groups(rng: random.Random, structure: str) -> list[str]:
    chars = {"n": DIGITS, "a": UPPER, "c": DIGITS + UPPER}
    return ["".join(rng.choices(chars[k], k=int(n))) for n, k in re.findall(r"(\d+)!([nac])", structure)]


def iban_parts(rng: random.Random, national_check: bool = True) -> tuple[str, str, list[str]]:
    """A random account of a random registry country; with `national_check`, one whose bank's own check
    digits (Belgium, Spain, Norway, ...: stdnum's country modules) hold too, as on every real IBAN."""
    country, structure = rng.choice(IBAN_COUNTRIES)
    for _ in range(2000):
        groups = bban_groups(rng, structure)
        check = std_iban.calc_check_digits(country + "00" + "".join(groups))
        if std_iban.is_valid(country + check + "".join(groups), check_country=national_check):
            break
    return country, check, groups


def iban_text(rng: random.Random, compact: str, head: str, groups: list[str]) -> tuple[str, str]:
    fours = [compact[i : i + 4] for i in range(0, len(compact), 4)]
    fmt = rng.choice(["print", "print", "compact", "dashes", "dots", "lower-print", "lower-compact", "mixed-case",
                      "bank-groups"])  # fmt: skip
    text = {"print": " ".join(fours), "compact": compact, "dashes": "-".join(fours), "dots": ".".join(fours),
            "lower-print": " ".join(fours).lower(), "lower-compact": compact.lower(),
            "mixed-case": "".join(c.lower() if rng.random() < 0.5 else c for c in " ".join(fours)),
            "bank-groups": " ".join([head, *groups])}[fmt]  # fmt: skip
    return text, fmt


def gen_iban(rng: random.Random) -> tuple[str, str]:
    country, check, groups = iban_parts(rng)
    compact = country + check + "".join(groups)
    assert std_iban.is_valid(compact), compact
    return iban_text(rng, compact, country + check, groups)


# ---------------------------------------------------------------- US Social Security number

SSN_AREAS = [f"{a:03d}" for a in range(1, 900) if a != 666]  # the SSA issues no area 000, 666 or 900-999
SSN_LABELS = ["SSN", "SSN:", "SSN#", "SSN #:", "SS#", "S.S.N.", "Social Security No.", "social security number",
              "Soc. Sec. #", "ssn =", "SOCIAL SECURITY NUMBER:"]  # fmt: skip


def ssn_parts(rng: random.Random) -> tuple[str, str, str]:
    """An area, group and serial the SSA issues: group 01-99, serial 0001-9999."""
    return rng.choice(SSN_AREAS), f"{rng.randint(1, 99):02d}", f"{rng.randint(1, 9999):04d}"


def gen_ssn(rng: random.Random) -> tuple[str, str]:
    area, group, serial = ssn_parts(rng)
    fmt = rng.choice(["dashes", "dashes", "dashes", "spaces", "spaced-dashes", "labelled", "labelled",
                      "labelled-dashes"])  # fmt: skip
    number = {"dashes": f"{area}-{group}-{serial}", "spaces": f"{area} {group} {serial}",
              "spaced-dashes": f"{area} - {group} - {serial}", "labelled": area + group + serial,
              "labelled-dashes": f"{area}-{group}-{serial}"}[fmt]  # fmt: skip
    if fmt.startswith("labelled"):  # 9 digits unbroken are an SSN only after a label
        number = f"{rng.choice(SSN_LABELS)}{rng.choice([' ', ' ', ''])}{number}"
    return number, fmt


PII: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "email": gen_email, "phone": gen_phone, "credit-card": gen_card, "cn-id": gen_cn_id, "iban": gen_iban,
    "ssn": gen_ssn,
}  # fmt: skip
ALL_ENCODINGS = ["ascii", "ascii", "fullwidth", "zero-width", "unicode-separators", "arabic-indic", "mixed"]
PII_ENCODINGS = {
    "email": ["ascii", "ascii", "fullwidth", "zero-width", "mixed"],
    "iban": ["ascii", "ascii", "fullwidth", "zero-width", "unicode-separators", "mixed"],
}
PII_PLACEMENTS = {"email": BASE_PLACEMENTS + ["split-parts", "split-messages"],
                  "credit-card": BASE_PLACEMENTS + ["split-parts", "split-messages"],
                  "ssn": BASE_PLACEMENTS + ["split-parts", "split-messages"]}  # fmt: skip


# ---------------------------------------------------------------- look-alikes (none may fire)


def some_datetime(rng: random.Random) -> datetime:
    return datetime(1990, 1, 1) + timedelta(seconds=rng.randint(0, 40 * 365 * 86400))


def lookalike_date(rng: random.Random) -> str:
    d = some_datetime(rng)
    form = rng.choice(["%Y-%m-%d", "%Y-%m-%d %H:%M", "%d.%m.%Y", "%m/%d/%Y", "%d/%m/%Y", "%Y/%m/%d", "%b %d, %Y",
                       "%d %B %Y", "%Y-%m-%dT%H:%M:%SZ", "%Y%m%d", "%d-%b-%Y", "%A, %d %B %Y", "%d.%m.%Y %H:%M",
                       "%Y-%m-%d %H:%M:%S", "zh", "short", "range"])  # fmt: skip
    if form == "zh":
        return f"{d.year}年{d.month}月{d.day}日"
    if form == "short":
        return f"{d.month}/{d.day}/{d:%y}"
    if form == "range":
        return f"{d:%Y-%m-%d} – {d + timedelta(days=rng.randint(1, 30)):%Y-%m-%d}"
    return d.strftime(form)


def lookalike_time(rng: random.Random) -> str:
    d, ms = some_datetime(rng), rng.randint(0, 999)
    return rng.choice([f"{d:%H:%M}", f"{d:%H:%M:%S}", f"{d:%I:%M %p}", f"{d:%H:%M:%S}.{ms:03d}", f"{d.hour}h{d:%M}",
                       f"{d.hour % 5}h {d.minute}m", f"{d:%H:%M}–{(d + timedelta(hours=2)):%H:%M}",
                       f"UTC+{rng.randint(0, 12):02d}:00", f"00:{d:%M:%S}.{ms:03d}"])  # fmt: skip


def lookalike_version(rng: random.Random) -> str:
    a, b, c = rng.randint(0, 30), rng.randint(0, 20), rng.randint(0, 200)
    return rng.choice([f"{a}.{b}.{c}", f"v{a}.{b}.{c}", f"Python 3.{b}.{c % 20}", f"{a}.{b}.{c}-rc.{b % 5}",
                       f"{a}.{b}.{c}+build.{rng.randint(1, 999)}", f"Chrome {rng.randint(90, 130)}.0.{rng.randint(1000, 9999)}.{c}",
                       f"Ubuntu 22.04.{c % 5} LTS", f"kernel 6.{b}.0-{c}-generic", f"iOS 17.{b % 6}.{c % 4}",
                       f"build 2024{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}.{c}",
                       f"Windows 10.0.{rng.randint(10000, 22999)}.{rng.randint(100, 9999)}"])  # fmt: skip


def lookalike_semver_range(rng: random.Random) -> str:
    a, b, c = rng.randint(0, 20), rng.randint(0, 20), rng.randint(0, 50)
    return rng.choice([f"^{a}.{b}.{c}", f"~{a}.{b}.0", f">={a}.{b}.{c} <{a + 1}.0.0", f"{a}.x || >={a + 1}.{b}.0",
                       f"{a}.{b}.{c} - {a + 1}.{b}.{c}", f">=3.{b % 10},<3.{b % 10 + 4}", f"~={a}.{b}.{c}",
                       f"!={a}.{b}.{c}", f"[{a}.0,{a + 1}.0)", f"{a}.{b}.*"])  # fmt: skip


def lookalike_order(rng: random.Random) -> str:
    hex6 = "".join(rng.choices("0123456789ABCDEF", k=6))
    return rng.choice([f"ORD-{rng.randint(2015, 2025)}-{rng.randint(100000, 999999)}", f"#{hex6}",
                       f"PO-{rng.randint(10000, 99999)}", f"SO#000{rng.randint(1000, 9999)}",
                       f"order #{rng.randint(1000000, 9999999)}", f"SKU-{rng.randint(1000, 9999)}-{rng.randint(1000, 9999)}",
                       f"{rng.choice(['111', '112', '114'])}-{rng.randint(1000000, 9999999)}-{rng.randint(1000000, 9999999)}",
                       f"RMA {rng.randint(100000, 999999)}", f"ticket JIRA-{rng.randint(1, 20000)}"])  # fmt: skip


def lookalike_isbn(rng: random.Random) -> str:
    if rng.random() < 0.5:
        body = rng.choice(["0", "1", "3", "2", "4", "7", "84", "88"])
        body += "".join(rng.choices(DIGITS, k=9 - len(body)))
        check = (11 - sum((10 - i) * int(d) for i, d in enumerate(body)) % 11) % 11
        number, label = body + ("X" if check == 10 else str(check)), "ISBN-10: "
    else:
        body = rng.choice(["978", "978", "9791", "9798"])
        body += "".join(rng.choices(DIGITS, k=12 - len(body)))
        number = body + str(-sum((1, 3)[i % 2] * int(d) for i, d in enumerate(body)) % 10)
        label = "ISBN-13: "
    assert std_isbn.is_valid(number), number
    return rng.choice(["ISBN ", label, ""]) + std_isbn.format(number)


def lookalike_uuid(rng: random.Random) -> str:
    u = str(uuid.UUID(int=rng.getrandbits(128), version=4))
    return rng.choice([u, u.upper(), "{" + u + "}", u.replace("-", ""), f"urn:uuid:{u}"])


def lookalike_hash(rng: random.Random) -> str:
    def hexes(k):
        return "".join(rng.choices("0123456789abcdef", k=k))

    return rng.choice([hexes(40), f"commit {hexes(7)}", hexes(64), f"md5 {hexes(32)}", f"{hexes(12)}",
                       f"sha256:{hexes(64)}", f"{hexes(8)}..{hexes(8)}", hexes(40).upper()])  # fmt: skip


def lookalike_bad_card(rng: random.Random) -> str:
    issuer = rng.choice([name for name, (_, lengths) in ISSUERS.items() if 16 in lengths or name == "amex"])
    digits = card_digits(rng, issuer, valid=False)
    while len(digits) not in (15, 16):
        digits = card_digits(rng, issuer, valid=False)
    return grouped(digits, rng.choice([" ", " ", "-", "", "\u00a0", "."]))


def lookalike_ipv4(rng: random.Random) -> str:
    o = [rng.randint(1, 254) for _ in range(4)]
    ip = rng.choice([f"192.168.{o[1]}.{o[2]}", f"10.{o[0]}.{o[1]}.{o[2]}", f"172.{rng.randint(16, 31)}.{o[1]}.{o[2]}",
                     ".".join(map(str, o))])  # fmt: skip
    return rng.choice([ip, f"{ip}:{rng.randint(1024, 65535)}", f"{ip}/{rng.choice([8, 16, 24, 32])}",
                       f"http://{ip}:8080/health", f"ip={ip}"])  # fmt: skip


def lookalike_amount(rng: random.Random) -> str:
    """Up to hundreds of millions, log-uniform (as amounts in text are: mostly small, Benford-like)."""
    n, cents = int(10 ** rng.uniform(0, 9)), rng.randint(0, 99)
    us, eu = f"{n:,}", f"{n:,}".replace(",", " ")
    return rng.choice([f"${us}.{cents:02d}", f"{eu} €", f"€{us.replace(',', '.')},{cents:02d}", eu,
                       f"USD {us}.00", f"¥{us}", f"£{n % 1000}.{cents:02d}", f"CHF {us.replace(',', chr(39))}.50",
                       f"{us}.{cents:02d}", f"{n % 10000:,}万元", f"-${n % 100}.{cents:02d}", f"${n % 100}.5M",
                       f"₹{n % 100},{n % 100:02d},000", f"{eu},{cents:02d} zł", f"{rng.randint(100, 999)} 000 000"])  # fmt: skip


def lookalike_percent(rng: random.Random) -> str:
    x = rng.uniform(-50, 150)
    return rng.choice([f"{x:.1f}%", f"{x:.2f} %", f"{x:+.2f} pp", f"{x:.1f}".replace(".", ",") + " %",
                       f"{abs(x):.0f}％", f"{abs(x):.1f} percent", f"p={abs(x) / 1000:.4f}"])  # fmt: skip


def lookalike_code_at(rng: random.Random) -> str:
    major, minor, patch = rng.randint(1, 20), rng.randint(0, 20), rng.randint(0, 40)
    hexes = "".join(rng.choices("0123456789abcdef", k=64))
    name = rng.choice(["alice_w", "bob.smith", "dev-ops", "chen_li", "maria89"])
    return rng.choice([
        '@app.route("/x")', '@app.get("/items/{item_id}")', "@pytest.mark.parametrize(\"n\", [1, 2, 3])",
        "@dataclass(frozen=True)", "@functools.lru_cache(maxsize=128)", "@Override", "@SpringBootApplication",
        "@media (max-width: 600px)", f"npm i react@{major}.{minor}.{patch}", f"pnpm add lodash@^4.17.{patch}",
        f"yarn add @types/node@{major}.{minor}.{patch}", "npx create-next-app@latest", "icon@2x.png",
        "logo@3x.webp", "sprite@2x.jpg", f"@{name}", f"cc @{name} please review", f"docker pull nginx@sha256:{hexes}",
        f"ssh deploy@10.0.{minor}.{patch}", "root@web-01:~$ ls", f"go install golang.org/x/tools/gopls@v0.{minor}.{patch}",
        f"@angular/core@{major}.{minor}.{patch}", "C = A @ B.T", "@import url('theme.css');",
    ])  # fmt: skip


def lookalike_coordinates(rng: random.Random) -> str:
    lat, lon = rng.uniform(-90, 90), rng.uniform(-180, 180)
    return rng.choice([f"{abs(lat):.4f}° {'N' if lat > 0 else 'S'}, {abs(lon):.4f}° {'E' if lon > 0 else 'W'}",
                       f"{lat:.4f}, {lon:.4f}", f"{lat:.4f},{lon:.4f}", f"lat={lat:.4f}&lon={lon:.4f}",
                       f"POINT({lon:.4f} {lat:.4f})",
                       f"{int(abs(lat))}°{rng.randint(0, 59)}′{rng.randint(0, 59)}″N {int(abs(lon))}°{rng.randint(0, 59)}′W"])  # fmt: skip


def lookalike_math(rng: random.Random) -> str:
    a, b, c = rng.randint(2, 999), rng.randint(2, 999), rng.randint(1, 9)
    return rng.choice([f"{a} + {b} * ({c} - 1) = {a + b * (c - 1)}", f"x = {a}.5 * {c}.2", f"2^{c + 5} = {2 ** (c + 5)}",
                       f"f(x) = {c}x^2 + {a}x - {b}", f"{a} × {b} = {a * b}", f"1/{c + 1} + 1/{c + 2}",
                       f"sum(range({a})) = {sum(range(a))}", f"({a} - {b}) / {c} = {(a - b) / c:.3f}",
                       f"sqrt({a * a}) = {a}", f"{a} mod {c + 1} = {a % (c + 1)}"])  # fmt: skip


def lookalike_short_number(rng: random.Random) -> str:
    n = rng.randint(0, 9999)
    return rng.choice([str(n % 100), f"{n / 100:.2f}", str(n), f"-{n % 50}", f"port {rng.randint(1024, 65535)}",
                       f"HTTP {rng.choice([200, 301, 404, 500, 503])}", "ISO 9001:2015", f"RFC {n}", f"page {n % 300} of 300",
                       f"No. {n % 100}", "x86_64", f"CVE-{rng.randint(2015, 2025)}-{rng.randint(1000, 49999)}",
                       f"PEP {n % 800}", f"Room {n}", f"{n % 64} GB"])  # fmt: skip


def lookalike_year(rng: random.Random) -> str:
    y = rng.randint(1900, 2035)
    return rng.choice([str(y), f"in {y}", f"{y}–{y + rng.randint(1, 10)}", f"FY{y}", f"Q{rng.randint(1, 4)} {y}",
                       f"'{y % 100:02d}", f"{y // 10 * 10}s", f"{y}-{y + 4}", f"{y}年"])  # fmt: skip


def lookalike_postal_code(rng: random.Random) -> str:
    n = rng.randint(10000, 99999)
    letters = "".join(rng.choices(UPPER, k=2))
    return rng.choice([str(n), f"{n}-{rng.randint(1000, 9999)}", f"SW1A {rng.randint(1, 9)}{letters}",
                       f"{n} Berlin", str(rng.randint(100000, 850000)), f"〒{rng.randint(100, 999)}-{rng.randint(1000, 9999)}",
                       f"K1A {rng.randint(0, 9)}B{rng.randint(0, 9)}", f"{rng.randint(1000, 9999)} {letters}",
                       f"{n} Paris", f"0{rng.randint(1000, 9999)}-{rng.randint(100, 999)}"])  # fmt: skip


def lookalike_invoice(rng: random.Random) -> str:
    y, n = rng.randint(2015, 2025), rng.randint(1, 99999)
    return rng.choice([f"INV-{y}-{n:05d}", f"Invoice #{n}", f"RE-{y}/{n % 10000:04d}", f"{y}/INV/{n % 1000:04d}",
                       f"F{y}-{n:06d}", f"Rechnung Nr. {y}-{n}", f"发票号码{y % 100}{rng.randint(10**15, 10**16 - 1)}0",
                       f"Bill {y}{n:05d}", f"INV{n:06d}"])  # fmt: skip


def lookalike_timestamp(rng: random.Random) -> str:
    t = rng.randint(1_500_000_000, 1_800_000_000)
    d = datetime(1970, 1, 1) + timedelta(seconds=t)
    return rng.choice([str(t), f"{t}{rng.randint(100, 999)}", f"{d:%Y-%m-%dT%H:%M:%S}.{rng.randint(0, 999):03d}+08:00",
                       f"{d:%a, %d %b %Y %H:%M:%S} +0000", f"{d:%Y%m%dT%H%M%SZ}", f"[{d:%d/%b/%Y:%H:%M:%S} +0000]",
                       f"ts={t}.{rng.randint(0, 999999):06d}"])  # fmt: skip


def lookalike_log_line(rng: random.Random) -> str:
    d, ip = some_datetime(rng), lookalike_ipv4(rng).split("/")[0].split(":")[0]
    return rng.choice([
        f"{d:%Y-%m-%d %H:%M:%S},{rng.randint(0, 999):03d} INFO [worker-{rng.randint(1, 16)}] GET /api/v1/orders/"
        f"{rng.randint(1000, 999999)} 200 {rng.uniform(1, 900):.1f}ms",
        f'{ip} - - [{d:%d/%b/%Y:%H:%M:%S} +0000] "GET /index.html HTTP/1.1" 200 {rng.randint(100, 99999)}',
        f"pid={rng.randint(100, 99999)} rss={rng.randint(10, 4096)}MB cpu={rng.uniform(0, 100):.1f}% uptime={rng.randint(1, 999)}h",
        f"E{d:%m%d %H:%M:%S}.{rng.randint(0, 999999):06d} {rng.randint(100, 99999)} server.cc:{rng.randint(1, 999)}] timeout",
    ])  # fmt: skip


def lookalike_bad_check(rng: random.Random) -> str:
    """IBANs and resident IDs with a wrong check, and IDs with a valid check but no such birth date."""
    kind = rng.choice(["iban", "cn-id", "cn-id-date"])
    if kind == "iban":
        country, check, groups = iban_parts(rng)
        compact = f"{country}{(int(check) + rng.randint(1, 90)) % 97:02d}{''.join(groups)}"
        return iban_text(rng, compact, compact[:4], groups)[0]
    area = rng.choice([c for c in cn_counties() if not c.startswith("62")])  # 62: a UnionPay prefix
    if kind == "cn-id":
        number = cn_id(rng, area, want_x=False)
        return number[:-1] + rng.choice([c for c in "0123456789X" if c != number[-1]])
    body = area + rng.choice(["19851332", "20010230", "19990931", "18991231", "20991201"]) + str(rng.randint(100, 999))
    return body + cn_check(body)


def lookalike_ssn_shaped(rng: random.Random) -> str:
    """Numbers shaped like an SSN that are none: ones the SSA never issues (area 000, 666 or 9xx with a group no ITIN
    has, group 00, serial 0000), 3-2-4 inside a longer number (a Korean business number's 3-2-5) or glued to an
    identifier, ZIP+4, 3-2-4 with dots, and 9 digits with no SSN label. (No area 0xx, no 4-2-4 with a trunk 0, no
    3-2-4-2: phone numbers' shapes, `019-84-0000` a national number with its trunk 0.)"""
    _, group, serial = ssn_parts(rng)
    area = str(rng.randint(100, 899))
    never = rng.choice(["000", "666", str(rng.randint(900, 999))])
    return rng.choice([
        f"{never}-{rng.randint(1, 49):02d}-{serial}", f"{area}-00-{serial}", f"{area}-{group}-0000",
        f"{never} {rng.randint(1, 49):02d} {serial}", f"{rng.randint(1, 9)}{area}-{group}-{serial}",
        f"{rng.randint(1, 9)}{area[1:]}-{group}-{serial}{rng.randint(0, 9)}",
        f"SKU-{area}-{group}-{serial}", f"{rng.choice(UPPER)}{area}-{group}-{serial}",
        f"{rng.randint(10000, 99999)}-{serial}", f"build {area}.{group}.{serial}", f"{area}.{group}{serial}",
        f"order {area}{group}{serial}", f"tracking no. {area}{group}{serial}", f"ref {area}{group}{serial}",
    ])  # fmt: skip


LOOKALIKES: dict[str, Callable[[random.Random], str]] = {
    "dates": lookalike_date, "times": lookalike_time, "versions": lookalike_version,
    "semver-ranges": lookalike_semver_range, "order-numbers": lookalike_order, "isbn": lookalike_isbn,
    "uuid": lookalike_uuid, "hex-hashes": lookalike_hash, "luhn-failing-cards": lookalike_bad_card,
    "ipv4": lookalike_ipv4, "amounts": lookalike_amount, "percentages": lookalike_percent,
    "code-with-at": lookalike_code_at, "coordinates": lookalike_coordinates, "math": lookalike_math,
    "short-numbers": lookalike_short_number, "years": lookalike_year, "postal-codes": lookalike_postal_code,
    "invoice-numbers": lookalike_invoice, "timestamps": lookalike_timestamp, "log-lines": lookalike_log_line,
    "bad-check-ids": lookalike_bad_check, "ssn-shaped": lookalike_ssn_shaped,
}  # fmt: skip
LOOKALIKE_ENCODINGS = ["ascii"] * 5 + ["fullwidth", "unicode-separators", "zero-width"]


def card_like(digits: str) -> bool:
    """Luhn-valid, 13-19 digits, on a promised issuer range or any other real scheme's (2-6: Mir,
    Maestro, RuPay, ...): finding a card the promise does not list is no false alarm."""
    scheme = card_issuer(digits) or digits[0] in "23456" or digits[:2] in ("81", "82")
    return 13 <= len(digits) <= 19 and bool(scheme) and luhn_check_digit(digits[:-1]) == digits[-1]


SSN_GROUPED = re.compile(
    r"(?<![0-9A-Za-z])(?<![0-9A-Za-z][-./])(?P<area>\d{3})(?P<gap> - |[- ])(?P<group>\d{2})(?P=gap)(?P<serial>\d{4})"
    r"(?![0-9A-Za-z]|[-./]\d)"
)
SSN_AFTER_LABEL = re.compile(
    r"(?i)(?:ssn|ss ?#|social security|soc\.? ?sec\.?)\W{0,8}(?P<area>\d{3})(?P<group>\d{2})(?P<serial>\d{4})(?!\d)"
)


def ssn_issued(area: str, group: str, serial: str) -> bool:
    return area not in ("000", "666") and not area.startswith("9") and group != "00" and serial != "0000"


def pii_shaped(s: str) -> bool:
    """The oracle's own guard: a look-alike that is PII by the detectors' promise is no look-alike."""
    ssns = [*SSN_GROUPED.finditer(s), *SSN_AFTER_LABEL.finditer(s)]
    if any(ssn_issued(m["area"], m["group"], m["serial"]) for m in ssns):
        return True
    for m in re.finditer(r"\d(?:[ \-./]{0,2}\d){12,18}", s):
        if card_like(re.sub(r"\D", "", m.group())):
            return True
    if re.search(r"(?<!\d)1[3-9]\d{9}(?!\d)|(?<![\d.])\(?\d{3}\)?[-. ]\d{3}[-. ]\d{4}(?![\d.])", s):
        return True
    if any(ric.is_valid(m.group()) for m in re.finditer(r"(?<!\d)\d{17}[\dXx](?!\w)", s)):
        return True
    compact = re.sub(r"[ \-.]", "", s).upper()
    for m in re.finditer(r"[A-Z]{2}\d{2}[A-Z0-9]{11,30}", compact):
        lengths = [4 + sum(int(n) for n in re.findall(r"\d+", b)) for c, b in IBAN_COUNTRIES if c == m.group()[:2]]
        if any(std_iban.is_valid(m.group()[:n], check_country=False) for n in lengths):
            return True
    return False


# ---------------------------------------------------------------- out of scope (reported, never counted)


def oos_national(rng: random.Random) -> str:
    return pn.format_number(vary(rng, rng.choice(national_pools()[1])), NATIONAL)


def oos_local(rng: random.Random) -> str:
    a, b = rng.randint(200, 999), "".join(rng.choices(DIGITS, k=4))
    return rng.choice([f"{a}-{b}", f"{a} {b}", f"{a}{b}"])


def oos_obfuscated(rng: random.Random) -> str:
    local, host = email_local(rng), rng.choice(DOMAINS).split(".")
    return rng.choice([f"{local} at {' dot '.join(host)}", f"{local}[at]{'[dot]'.join(host)}",
                       f"{local} (at) {' (dot) '.join(host)}", f"{local} AT {' DOT '.join(host)}"])  # fmt: skip


def oos_base64(rng: random.Random) -> str:
    return base64.b64encode(f"contact: {gen_email(rng)[0]}".encode()).decode()


def oos_idn_email(rng: random.Random) -> str:
    return rng.choice(["jörg.müller@bücher.de", "用户@例子.广告", "josé@correo.españa", "анна@пример.рф",
                       f"{rng.choice(FIRST_NAMES)}@münchen-{rng.randint(1, 99)}.de"])  # fmt: skip


def oos_residence_permit(rng: random.Random) -> str:
    return cn_id(rng, rng.choice(["810000", "820000", "830000"]), want_x=False)


def oos_iban_national_check(rng: random.Random) -> str:
    country, check, groups = iban_parts(rng, national_check=False)
    while std_iban.is_valid(country + check + "".join(groups)):  # keep the ones whose bank check fails
        country, check, groups = iban_parts(rng, national_check=False)
    return " ".join([country + check, *groups])


def oos_itin(rng: random.Random) -> str:
    """An ITIN: 9xx with group 50-65, 70-88, 90-92 or 94-99 (a taxpayer's number, not the SSA's)."""
    group = rng.choice([*range(50, 66), *range(70, 89), 90, 91, 92, *range(94, 100)])
    return f"9{rng.randint(0, 99):02d}-{group}-{rng.randint(1, 9999):04d}"


def oos_other_card(rng: random.Random) -> str:
    prefix = rng.choice(["2200", "2201", "2204", "6759", "5018", "5020", "6062", "508"])  # Mir, Maestro, RuPay
    payload = prefix + "".join(rng.choices(DIGITS, k=15 - len(prefix)))
    return grouped(payload + luhn_check_digit(payload), rng.choice([" ", "-", ""]))


OUT_OF_SCOPE: dict[str, tuple[str, Callable[[random.Random], str], list[str], list[str]]] = {
    # kind: (the detector one might hope for, generator, encodings, placements)
    "phone-national-no-trunk-prefix": ("phone", oos_national, ["ascii"], BASE_PLACEMENTS),
    "phone-7-digit-local": ("phone", oos_local, ["ascii"], BASE_PLACEMENTS),
    "email-obfuscated": ("email", oos_obfuscated, ["ascii"], BASE_PLACEMENTS),
    "email-base64": ("email", oos_base64, ["ascii"], BASE_PLACEMENTS),
    "email-non-ascii": ("email", oos_idn_email, ["ascii"], BASE_PLACEMENTS),
    "email-json-escaped": ("email", lambda rng: gen_email(rng)[0], ["fullwidth", "zero-width"], ["tool-args-escaped"]),
    "card-json-escaped": ("credit-card", lambda rng: gen_card(rng)[0], ["fullwidth", "zero-width"], ["tool-args-escaped"]),
    "card-other-schemes": ("credit-card", oos_other_card, ["ascii"], BASE_PLACEMENTS),
    "cn-residence-permit": ("cn-id", oos_residence_permit, ["ascii"], BASE_PLACEMENTS),
    "iban-bank-check-fails": ("iban", oos_iban_national_check, ["ascii"], BASE_PLACEMENTS),
    "ssn-itin": ("ssn", oos_itin, ["ascii"], BASE_PLACEMENTS),
}  # fmt: skip

LABELS: dict[str, dict[str, list[str]]] = {
    "email": {"en": ["email", "e-mail address", "contact"], "zh": ["邮箱", "电子邮件地址"],
              "de": ["E-Mail-Adresse", "Kontakt"], "ar": ["البريد الإلكتروني"]},
    "phone": {"en": ["phone number", "mobile", "callback number"], "zh": ["手机号", "电话"],
              "de": ["Telefonnummer", "Handynummer"], "ar": ["رقم الهاتف", "رقم الجوال"]},
    "credit-card": {"en": ["card number", "card", "credit card"], "zh": ["卡号", "信用卡号"],
                    "de": ["Kartennummer", "Kreditkarte"], "ar": ["رقم البطاقة"]},
    "cn-id": {"en": ["ID number", "resident ID"], "zh": ["身份证号", "身份证号码"], "de": ["Ausweisnummer"],
              "ar": ["رقم الهوية"]},
    "iban": {"en": ["IBAN", "bank account"], "zh": ["银行账号", "国际银行账号"], "de": ["IBAN", "Kontonummer"],
             "ar": ["رقم الآيبان", "IBAN"]},
    "ssn": {"en": ["SSN", "social security number"], "zh": ["社会安全号码", "美国社保号"],
            "de": ["Sozialversicherungsnummer"], "ar": ["رقم الضمان الاجتماعي"]},
}  # fmt: skip
LOOKALIKE_LABELS = {  # family: (en, zh, de, ar)
    "dates": ("date", "日期", "Datum", "التاريخ"), "times": ("time", "时间", "Uhrzeit", "الوقت"),
    "versions": ("version", "版本", "Version", "الإصدار"), "semver-ranges": ("range", "版本范围", "Bereich", "النطاق"),
    "order-numbers": ("order", "订单号", "Bestellnummer", "رقم الطلب"), "isbn": ("book", "书号", "Buch", "الكتاب"),
    "uuid": ("request id", "请求编号", "Anfrage-ID", "معرف الطلب"), "hex-hashes": ("commit", "提交", "Commit", "الالتزام"),
    "luhn-failing-cards": ("card number", "卡号", "Kartennummer", "رقم البطاقة"),
    "ipv4": ("server", "服务器地址", "Server", "الخادم"), "amounts": ("amount", "金额", "Betrag", "المبلغ"),
    "percentages": ("rate", "比例", "Anteil", "النسبة"), "code-with-at": ("snippet", "代码", "Code", "الكود"),
    "coordinates": ("location", "坐标", "Koordinaten", "الإحداثيات"), "math": ("result", "算式", "Ausdruck", "التعبير"),
    "short-numbers": ("count", "数量", "Anzahl", "العدد"), "years": ("year", "年份", "Jahr", "السنة"),
    "postal-codes": ("postal code", "邮编", "Postleitzahl", "الرمز البريدي"),
    "invoice-numbers": ("invoice", "发票号", "Rechnungsnummer", "رقم الفاتورة"),
    "timestamps": ("timestamp", "时间戳", "Zeitstempel", "الطابع الزمني"), "log-lines": ("log", "日志", "Log", "السجل"),
    "bad-check-ids": ("account", "账号", "Konto", "الحساب"),
    "ssn-shaped": ("reference", "编号", "Referenz", "المرجع"),
}  # fmt: skip
LABELS |= {family: dict(zip(("en", "zh", "de", "ar"), ([w] for w in words), strict=True))
           for family, words in LOOKALIKE_LABELS.items()}  # fmt: skip
LABELS |= {kind: LABELS[expect] for kind, (expect, *_) in OUT_OF_SCOPE.items()}


# ---------------------------------------------------------------- the case sets


def draws(rng: random.Random, n: int, encodings: list[str], placements: list[str]) -> list[tuple[str, str, str]]:
    picks = balanced(rng, encodings, n), balanced(rng, POSITIONS, n), balanced(rng, placements, n)
    return list(zip(*picks, strict=True))


def positive_cases(rng: random.Random, per_type: int) -> list[Case]:
    cases = []
    for kind, generate in PII.items():
        encodings, placements = PII_ENCODINGS.get(kind, ALL_ENCODINGS), PII_PLACEMENTS.get(kind, BASE_PLACEMENTS)
        for draw in draws(rng, per_type, encodings, placements):
            value, fmt = generate(rng)
            cases.append(make_case(rng, kind, "positive", kind, value, fmt, draw))
    return cases


def lookalike_cases(rng: random.Random, per_family: int) -> tuple[list[Case], int]:
    cases, rejected = [], 0
    for family, generate in LOOKALIKES.items():
        for draw in draws(rng, per_family, LOOKALIKE_ENCODINGS, BASE_PLACEMENTS):
            value = generate(rng)
            for _ in range(100):
                if not pii_shaped(value):
                    break
                rejected += 1
                value = generate(rng)
            else:
                raise RuntimeError(f"{family}: the generator keeps making PII-shaped values, e.g. {value!r}")
            cases.append(make_case(rng, family, "lookalike", None, value, family, draw))
    return cases, rejected


def out_of_scope_cases(rng: random.Random, per_kind: int) -> list[Case]:
    cases = []
    for kind, (expect, generate, encodings, placements) in OUT_OF_SCOPE.items():
        for draw in draws(rng, per_kind, encodings, placements):
            cases.append(make_case(rng, kind, "out_of_scope", expect, generate(rng), kind, draw))
    return cases


# ---------------------------------------------------------------- scan time on long prompts

EN_SENTENCES = [
    "The quarterly review on {date} covered revenue, hiring and the migration plan.",
    "Revenue grew {pct} compared with the same period last year, mostly from the enterprise tier.",
    "We shipped version {ver} of the desktop client, which fixes the crash several customers reported.",
    "The team spent about {n} hours on incident response this month, down from the month before.",
    "Latency at the 99th percentile stayed under {n} milliseconds for the whole week.",
    "According to the survey, {pct} of respondents would recommend the product to a colleague.",
    "The budget for the next phase is {amount}, pending approval from the finance committee.",
    "Several customers asked for better documentation, especially around authentication and rate limits.",
    "The design review raised concerns about how the cache behaves when a region fails over.",
    "We agreed to revisit the pricing model once the pilot with the logistics partner ends.",
    "Most of the backlog consists of small usability fixes that the support team collected over the summer.",
    "The new onboarding flow reduced the time to first value, although the sample is still small.",
    "Engineering will freeze the release branch on {date} and publish release notes a week later.",
    "Two of the largest accounts renewed early, and one of them expanded to {n} additional seats.",
    "The legal team is still reviewing the data processing agreement with the new vendor.",
    "In the long run, the platform has to support more languages, more regions and stricter audits.",
    "Our forecast assumes a churn rate of {pct} and no change in the average contract value.",
    "The incident on {date} was caused by an expired certificate on an internal load balancer.",
    "Please summarise the risks, the open questions and the decisions we still need to take.",
    "The office in {city} will host the planning workshop, and remote participants can join by video.",
    "The customer's main complaint - slow exports - was fixed in the last release, but we'll keep watching it.",
    "It's worth noting that the partners' feedback was mostly positive, with a few \"must have\" requests.",
]
ZH_SENTENCES = [
    "本季度的经营情况总体平稳，收入同比增长{pct}，主要来自企业客户。",
    "项目组计划于{date}完成系统迁移，并在一周后发布版本{ver}。",
    "根据客户调研，大约{pct}的受访者表示愿意向同事推荐我们的产品。",
    "下一阶段的预算约为{amount}，仍需财务委员会审批。",
    "运维团队本月处理了{n}起告警，大部分与缓存配置有关。",
    "法务部门正在审核与新供应商签订的数据处理协议。",
    "{date}的故障是由内部负载均衡器的证书过期引起的。",
    "我们需要进一步完善文档，尤其是身份验证和限流相关的部分。",
    "新的注册流程缩短了用户首次使用的时间，但样本量仍然较小。",
    "请总结主要风险、尚未解决的问题以及需要做出的决定。",
    "两家大客户提前续约，其中一家新增了{n}个席位。",
    "长期来看，平台需要支持更多语言、更多地区以及更严格的审计要求。",
]  # fmt: skip
CITIES = ["Berlin", "Singapore", "Toronto", "Nairobi", "Shanghai", "Lyon"]


def filled(rng: random.Random, sentence: str, chinese: bool) -> str:
    d, k = some_datetime(rng), rng.randint(10, 999)
    dates = [f"{d.year}年{d.month}月{d.day}日", f"{d:%Y-%m-%d}"] if chinese else [f"{d:%B %d, %Y}", f"{d:%Y-%m-%d}"]
    return sentence.format(date=rng.choice(dates), pct=f"{rng.uniform(1, 60):.1f}%", n=rng.randint(3, 400),
                           ver=lookalike_version(rng).split()[-1], amount=f"{k}万元" if chinese else f"${k},000",
                           city=rng.choice(CITIES))  # fmt: skip


def prose(rng: random.Random, sentences: list[str], chars: int, joiner: str) -> str:
    paragraphs, size, chinese = [], 0, joiner == ""
    while size < chars:
        paragraph = joiner.join(filled(rng, rng.choice(sentences), chinese) for _ in range(rng.randint(4, 8)))
        paragraphs.append(paragraph)
        size += len(paragraph) + 2
    return "\n\n".join(paragraphs)[:chars]


def typographic(text: str) -> str:
    """The same prose as a word processor writes it: curly apostrophes and quotes, em dashes."""
    text = re.sub(r'"([^"]*)"', "\u201c\\1\u201d", text.replace("'", "\u2019"))
    return text.replace(" - ", " \u2014 ")


def timing_bodies(rng: random.Random) -> dict[str, dict]:
    """english (ASCII) and cjk count toward the goal; english-typographic is reported, not counted."""
    english = prose(rng, EN_SENTENCES, 16_000, " ")
    chinese = prose(rng, ZH_SENTENCES, 5_500, "")
    system_zh = {"role": "system", "content": "你是一个乐于助人的助手。"}
    return {
        "english": {"model": MODEL, "messages": [{"role": "system", "content": SYSTEM},
                                                 user("Summarize this report for the board:\n\n" + english)]},
        "cjk": {"model": MODEL, "messages": [system_zh, user("请为董事会总结以下报告：\n\n" + chinese)]},
        "english-typographic": {"model": MODEL, "messages": [{"role": "system", "content": SYSTEM},
                                                             user("Summarize this report for the board:\n\n" + typographic(english))]},
    }  # fmt: skip


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


def time_scan(body: dict, runs: int) -> dict:
    """Wall-clock p50/p99 (the goal) of detect(request_text(body)), and the same in this thread's CPU time,
    which other processes on a busy machine do not stretch."""
    fired = detect(request_text(body), NAMES)
    for _ in range(20):
        detect(request_text(body), NAMES)
    wall, cpu = [], []
    for _ in range(runs):
        started, started_cpu = time.perf_counter_ns(), time.thread_time_ns()
        detect(request_text(body), NAMES)
        cpu.append((time.thread_time_ns() - started_cpu) / 1000)
        wall.append((time.perf_counter_ns() - started) / 1000)
    return {"p99": percentile(wall, 0.99), "p50": percentile(wall, 0.5), "cpu_p99": percentile(cpu, 0.99),
            "cpu_p50": percentile(cpu, 0.5), "chars": len(request_text(body)), "fired": fired}  # fmt: skip


# ---------------------------------------------------------------- report


ISA = ("avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_int8")


def cpu_info() -> tuple[str, list[str]]:
    """The CPU's name and which of the vector instruction sets in ISA it has (figures differ 3-5x between
    machines, and AVX-512 against AVX2 alone changes the kernels libraries pick)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown", []
    model = re.search(r"^model name\s*:\s*(.+)$", text, re.M)
    flags = re.search(r"^flags\s*:\s*(.+)$", text, re.M)
    flag_set = set(flags.group(1).split()) if flags else set()
    return (model.group(1).strip() if model else "unknown"), [f for f in ISA if f in flag_set]


def load_average() -> float | None:
    """How busy the machine was (other processes make the timing's tail longer)."""
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def rate(hits: int, n: int) -> float:
    return round(hits / n, 4) if n else 0.0


def rates_by(cases: list[Case], key: Callable[[Case], str], hit: Callable[[Case], bool]) -> dict[str, float]:
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for case in cases:
        counts[key(case)][0] += hit(case)
        counts[key(case)][1] += 1
    return {k: rate(h, n) for k, (h, n) in sorted(counts.items())}


def shown(case: Case) -> str:
    text = repr(case.texts[0]) if len(case.texts) == 1 else f"{case.texts[0]!r} + {case.texts[1]!r}"
    return text if len(text) <= 120 else text[:117] + "..."


def spread(cases: list[Case], limit: int) -> list[Case]:
    """Up to `limit` cases, taken in turn from each kind, so one kind does not fill the list."""
    by_kind: dict[str, list[Case]] = defaultdict(list)
    for case in cases:
        by_kind[case.kind].append(case)
    out, queues = [], list(by_kind.values())
    while len(out) < limit and any(queues):
        for queue in queues:
            if queue and len(out) < limit:
                out.append(queue.pop(0))
    return out


def print_table(positives: list[Case], lookalikes: list[Case], oos: list[Case]) -> None:
    print(f"{'PII type':<16}{'cases':>7}{'recall':>9}{'any fired':>11}")
    for kind in PII:
        mine = [c for c in positives if c.kind == kind]
        print(f"{kind:<16}{len(mine):>7}{rate(sum(kind in c.fired for c in mine), len(mine)):>9.4f}"
              f"{rate(sum(bool(c.fired) for c in mine), len(mine)):>11.4f}")  # fmt: skip
    print(f"\n{'look-alike family':<22}{'cases':>7}{'alarms':>8}  detectors")
    for family in LOOKALIKES:
        mine = [c for c in lookalikes if c.kind == family]
        alarms = Counter(name for c in mine for name in c.fired)
        print(f"{family:<22}{len(mine):>7}{sum(bool(c.fired) for c in mine):>8}  {dict(alarms) or ''}")
    print(f"\n{'out of scope (not counted)':<32}{'cases':>7}{'found':>8}")
    for kind in OUT_OF_SCOPE:
        mine = [c for c in oos if c.kind == kind]
        print(f"{kind:<32}{len(mine):>7}{rate(sum(c.expect in c.fired for c in mine), len(mine)):>8.2f}")


def print_failures(missed: list[Case], alarms: list[Case]) -> None:
    print(f"\nmissed positives: {len(missed)} (up to 20 shown)")
    for case in spread(missed, 20):
        print(f"  [{case.kind} {case.fmt} | {case.enc} | {case.pos} | {case.placement}] fired={case.fired}")
        print(f"    {shown(case)}")
    print(f"\nfalse alarms: {len(alarms)} (up to 20 shown)")
    for case in spread(alarms, 20):
        print(f"  [{case.kind} | {case.enc} | {case.pos} | {case.placement}] fired={case.fired}")
        print(f"    {shown(case)}")


def summary(positives: list[Case], lookalikes: list[Case], oos: list[Case]) -> dict:
    found = [c for c in positives if c.expect in c.fired]
    alarms = [c for c in lookalikes if c.fired]
    missed_formats = Counter(f"{c.kind}:{c.fmt}" for c in positives if c.expect not in c.fired)
    cross = Counter(f"{c.kind}->{name}" for c in positives for name in c.fired if name != c.kind)
    alarms_by_kind = {}
    for family in LOOKALIKES:
        mine = [c for c in lookalikes if c.kind == family]
        alarms_by_kind[family] = {"cases": len(mine), "false_alarms": sum(bool(c.fired) for c in mine),
                                  "detectors": dict(Counter(n for c in mine for n in c.fired))}  # fmt: skip
    own = lambda c: c.expect in c.fired  # noqa: E731
    return {
        "recall": rate(len(found), len(positives)),
        "recall_any_detector": rate(sum(bool(c.fired) for c in positives), len(positives)),
        "false_alarm_rate": rate(len(alarms), len(lookalikes)),
        "positives": len(positives),
        "lookalikes": len(lookalikes),
        "recall_by_type": rates_by(positives, lambda c: c.kind, own),
        "recall_by_encoding": rates_by(positives, lambda c: c.enc, own),
        "recall_by_position": rates_by(positives, lambda c: c.pos, own),
        "recall_by_placement": rates_by(positives, lambda c: c.placement, own),
        "missed_by_format": dict(missed_formats.most_common(20)),
        "cross_fires": dict(cross.most_common(20)),
        "false_alarms_by_kind": alarms_by_kind,
        "out_of_scope_cases": len(oos),
        "out_of_scope_recall": rates_by(oos, lambda c: c.kind, own),
    }


# ---------------------------------------------------------------- main


def scan(cases: list[Case]) -> None:
    for i, case in enumerate(cases):
        case.fired = detect(request_text(case.body), NAMES)
        if (i + 1) % 2000 == 0:
            print(f"  scanned {i + 1}/{len(cases)}", file=sys.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="~1,500 positives, ~1,300 look-alikes, 500 timed scans")
    parser.add_argument("--seed", type=int, default=20240115)
    args = parser.parse_args()
    scale, runs = (1, 500) if args.quick else (5, 2000)

    started = time.perf_counter()
    print("privacy: generating cases", file=sys.stderr)
    positives = positive_cases(random.Random(f"{args.seed}-positives"), 250 * scale)
    lookalikes, rejected = lookalike_cases(random.Random(f"{args.seed}-lookalikes"), 57 * scale)
    oos = out_of_scope_cases(random.Random(f"{args.seed}-oos"), 20 * scale)
    print(f"privacy: scanning {len(positives) + len(lookalikes) + len(oos)} requests", file=sys.stderr)
    scan(positives + lookalikes + oos)

    print(f"privacy: timing {runs} scans of each long prompt", file=sys.stderr)
    bodies = timing_bodies(random.Random(f"{args.seed}-timing"))
    timing = {name: time_scan(body, runs) for name, body in bodies.items()}

    print_table(positives, lookalikes, oos)
    print_failures([c for c in positives if c.expect not in c.fired], [c for c in lookalikes if c.fired])
    result = summary(positives, lookalikes, oos)
    p99 = max(timing["english"]["p99"], timing["cjk"]["p99"])
    print(f"\nrecall {result['recall']:.4f}  false alarms {result['false_alarm_rate']:.4f}  "
          f"detect p99 {p99:.0f} us (english {timing['english']['p99']:.0f}, cjk {timing['cjk']['p99']:.0f}; "
          f"english with curly quotes {timing['english-typographic']['p99']:.0f}, not counted)")  # fmt: skip
    cpu, isa = cpu_info()
    goals = {"recall": result["recall"] >= GOALS["recall"],
             "false_alarm_rate": result["false_alarm_rate"] <= GOALS["false_alarm_rate"],
             "detect_us_p99": p99 <= GOALS["detect_us_p99"]}  # fmt: skip
    result |= {
        "detect_us_p99": p99, "detect_us_p99_english": timing["english"]["p99"], "detect_us_p99_cjk": timing["cjk"]["p99"],
        "detect_us_p50_english": timing["english"]["p50"], "detect_us_p50_cjk": timing["cjk"]["p50"],
        "detect_us_p99_english_typographic": timing["english-typographic"]["p99"],
        "detect_us_p50_english_typographic": timing["english-typographic"]["p50"],
        "detect_us_p99_cpu_time": {k: t["cpu_p99"] for k, t in timing.items()},
        "detect_us_p50_cpu_time": {k: t["cpu_p50"] for k, t in timing.items()},
        "timing_prompt_chars": {k: t["chars"] for k, t in timing.items()},
        "timing_prompts_fired": {k: t["fired"] for k, t in timing.items()}, "timing_runs": runs,
        "lookalikes_rejected_as_pii": rejected, "cpu": cpu, "isa": isa, "loadavg": load_average(),
        "seed": args.seed, "quick": args.quick,
        "goals": goals, "goals_met": all(goals.values()), "seconds": round(time.perf_counter() - started, 1),
    }  # fmt: skip
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
