"""PII detectors: find personal data in prompt text, with checksums where the format has one.

The SDK on the device and the gateway run this very module on the very same
text (`tandem_sdk.scan`), so the two can never disagree. Every detector:
- reads normalized text (`tandem_sdk.normalize`): full-width digits,
  invisible characters, Unicode dashes and spaces no longer hide a number;
- reads it as UTF-8 bytes with ASCII classes, so PII touching CJK (or any
  non-Latin) text is found: a non-ASCII character is a boundary;
- runs in linear time: candidates are found with C-level scans (bytes.translate
  to a class map, then bytes.find or a bounded regex), and Python looks only
  at the few candidates; numbers are found once and shared by the card,
  phone, ID and SSN detectors;
- decides alone: no detector suppresses another.

Checksums and country tables come from python-stdnum (IBAN registry, Chinese
resident ID; its Luhn is the oracle of the fast one here, in the tests) and
phonenumbers (country calling codes). docs/security.md says what is detected
and what is not promised.
"""

import re
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Callable, Iterator
from datetime import date
from functools import cached_property
from itertools import accumulate, compress, islice, repeat
from operator import ge, sub

import phonenumbers
from phonenumbers.phonenumberutil import COUNTRY_CODE_TO_REGION_CODE
from stdnum import iban as stdnum_iban
from stdnum import isbn, numdb
from stdnum.cn import ric

from tandem_sdk.normalize import lookalike_readings, normalize_utf8, subtitle_reading

_DIGITS = b"0123456789"
_LETTERS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_SEPARATORS = b" \t\r\n./()-"  # what people put between digit groups (a line break: text from two messages)


def _class_map(*classes: tuple[bytes, bytes], other: bytes = b"x") -> bytes:
    """A bytes.translate table: each byte of a class to its symbol, every other byte to `other`."""
    table = bytearray(other * 256)
    for members, symbol in classes:
        for byte in members:
            table[byte] = symbol[0]
    return bytes(table)


# Digits and separators: a run of 8 or more may hold PII (+683 4002, the shortest phone number here).
_NUMERIC = _class_map((_DIGITS + _SEPARATORS, b"1"), other=b"0")
_MIN_RUN = 8
_DIGITS_AND_SPACE = _class_map((_DIGITS, b"d"), other=b" ")
_DIGIT_OR_SEPARATOR = _class_map((_DIGITS, b"d"), (_SEPARATORS, b"s"))
_ALNUM = _class_map((_LETTERS, b"a"), (_DIGITS, b"d"))
_EMAIL_CHARS = _class_map((_LETTERS + _DIGITS + b"._%+-", b"l"), (b"@", b"@"))
_VALUE = _class_map(*((bytes([48 + d]), bytes([d])) for d in range(10)), other=b"\x00")
_DOUBLED = _class_map(*((bytes([48 + d]), bytes([2 * d - 9 if d > 4 else 2 * d])) for d in range(10)), other=b"\x00")

# A cluster: digit groups parted by 1-4 separators; clusters of fewer than 7 digits are no PII here.
_MAX_GAP = 4
_MIN_CLUSTER_DIGITS = 7
_MAX_GROUPS = 8  # a number is never written in more groups than this
_MAX_CARD_GROUPS = 6  # 4-4-4-4-3, or 4-4-4-4 split inside a group across two messages
_GAP = re.compile(rb"[^0-9]+")
# The domain ends where no label follows: x@self.weight.T is code. So is q@k.transpose(), a call, but an address is
# followed by a bracket too (ann@example.com（工作用）, ann@example.com(work)): after a "(" the last label must be a
# top-level domain people have addresses in, a country's two letters or a generic one. `to` is Tonga's, and
# PyTorch's x@w.to(dtype): the call wins.
# The top-level domain ends the address: nothing glued after it, or a phone number (`ann@x.com4155550100`,
# `ann@x.com415-555-0100`: PDF text running an address into the next field; a review)
_EMAIL_DOMAIN = re.compile(
    rb"(?:@|%40)[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.([A-Za-z]{2,24})"
    rb"(?:(?![A-Za-z0-9]|\.[A-Za-z0-9])|(?=\+?\(?[0-9]{2,4}\)?[ .-]?[0-9]{3}))(\()?"
)
_TLDS_BEFORE_A_BRACKET = frozenset(
    b"com org net edu gov mil int info biz name pro mobi asia app dev page tech online site shop store cloud "
    b"email mail me".split()
)
_NOT_TLDS = frozenset(b"png jpg jpeg gif svg webp bmp ico tif tiff heic localhost localdomain".split())  # icon@2x.png
# A domain whose first label is a program's object, three labels or more, after a one-letter local part: code's matrix
# product (`x@self.weight.data`); not `math` or `cs`, which universities' mail is at (`ann@math.berkeley.edu`)
_CODE_OBJECTS = frozenset(b"self this cls torch jnp".split())
# A LAN's names and the system accounts logged into there (`root@server.local`); people's mailboxes at an Active
# Directory's `.local` or `.internal` domain are addresses
_LAN_TLDS = frozenset(b"local internal lan home".split())
_SYSTEM_ACCOUNTS = frozenset(b"root git admin ubuntu pi ec2-user centos debian vagrant www-data postgres".split())
# After a host's colon, a path (`org/repo.git`, `~/notes`, `/srv`, a port's `8080/p`): not a password
# (`ann@gmail.com:Summer2024!`, `ann@gmail.com:12345` are addresses and more)
_A_PATH = re.compile(rb"~|/|[A-Za-z0-9_.-]{1,64}/")
_LOCAL_BEFORE = re.compile(rb"[A-Za-z0-9._%+-]{1,64}\Z")


# A field's name glued after a number, an address or an IBAN, as text copied out of a PDF runs one field into the
# next (`Mobile: 9876543210LinkedIn: …`, `(415) 555-0100Email: …`, `123-45-6789DOB: …`, `ann@gmail.comPhone: …`,
# `… 3000BIC: …`, `…dob:`): a word and a colon, or a field résumés hold (not any capitalised word: `12345678Mbps`);
# and an extension (`ext 12`, `EXT 12`)
_NEXT_FIELD = (
    rb"[A-Za-z][A-Za-z-]{1,15}:|(?:E-?mail|Email|EMAIL|LinkedIn|Linkedin|GitHub|Github|Website|Web|Address|Twitter|"
    rb"Skype|Portfolio|DOB|Date|Name|Phone|Mobile|Fax|Tel|WhatsApp|Telegram)(?![a-z])|(?i:ext|dob)(?![a-z])"
    # (reviews) two to four words in any case, with an apostrophe, a dot or a slash (`Home Address:`, `DATE OF BIRTH:`,
    # `Driver's License:`, `City/State:`), initials (`D.O.B.`), a name with letters beyond ASCII (`Téléphone:`)
    rb"|[A-Z][A-Za-z'.]{0,15}(?:[ /][A-Za-z][A-Za-z'.]{0,15}){1,3}:|[A-Z]\.(?:[A-Z]\.){1,3}"
    rb"|[A-Z][a-z]{0,15}[\x80-\xff][^\s:]{0,30}:"
)  # fmt: skip
_NEXT_FIELD_GLUED = re.compile(_NEXT_FIELD)


def _iban_patterns() -> dict[bytes, re.Pattern[bytes]]:
    """Each country's IBAN shape from the registry (python-stdnum's copy), any case, 0-2 separators between
    characters: DE89 3704 0044 0532 0130 00 is `DE`, two check digits, then 18 digits."""
    classes = {"n": "[0-9]", "a": "[A-Za-z]", "c": "[A-Za-z0-9]"}
    patterns = {}
    for _, country, _, props, _ in numdb.get("iban").prefixes:
        bban = "".join(
            f"(?:[ \\t\\n.\\-]{{0,3}}{classes[kind]}){{{count}}}"
            for count, kind in re.findall(r"([0-9]+)!([nac])", props.get("bban", ""))
        )
        # nothing glued after it, or the next field's name (`BIC COBADEFFXXX`, `SWIFT/BIC:`, `Sort code:`; any
        # capital let one random token of capitals and digits in 100,000 read as an IBAN: a review)
        ends = b"(?:(?![A-Za-z0-9])|(?=" + _NEXT_FIELD + b"|BIC|SWIFT))"
        patterns[country.encode()] = re.compile(f"[A-Za-z]{{2}}[0-9]{{2}}{bban}".encode() + ends)
    return patterns


_IBAN_BY_COUNTRY = _iban_patterns()
# Each country's IBAN length after its two letters (check digits and BBAN), as if all digits: DE 20, NO 13, MT 29
_IBAN_DIGITS = {
    country.encode(): 2 + sum(int(count) for count, _ in re.findall(r"([0-9]+)!([nac])", props.get("bban", "")))
    for _, country, _, props, _ in numdb.get("iban").prefixes
}
_IBAN_LETTER_VALUES = str.maketrans({chr(65 + i): str(10 + i) for i in range(26)})
_WORD_START_AADD = re.compile(rb"xaadd")  # on the letter/digit class map: re's literal search beats bytes.find here
_CN_PROVINCES = frozenset(
    b"11 12 13 14 15 21 22 23 31 32 33 34 35 36 37 41 42 43 44 45 46 50 51 52 53 54 61 62 63 64 65 71 81 82 83".split()
)
_CALLING_CODES = frozenset(str(code).encode() for code in COUNTRY_CODE_TO_REGION_CODE)


def _is_alnum(byte: bytes) -> bool:
    return byte.isalnum()  # bytes.isalnum is ASCII-only; b"" is not


class Cluster:
    """Digit groups with only separators between them: data[start:end] == raw.

    Clusters can be long (a pasted table of numbers), so everything per group is
    computed in C: the digits, the length of each group, where each starts in the
    digits. Only the first _MAX_GROUPS groups and the gaps between them exist as
    Python objects (`head`). Computed once, when the cluster is found: a prompt
    has few clusters, and a CSV of numbers has many small ones.
    """

    __slots__ = ("start", "end", "raw", "digits", "lengths", "offsets", "head")

    def __init__(self, start: int, end: int, raw: bytes) -> None:
        self.start, self.end, self.raw = start, end, raw
        if raw.isdigit():  # one group: the common case
            self.digits, self.offsets, self.head = raw, [0, len(raw)], ((raw,), ())
            self.lengths = bytes((min(len(raw), 255),))
            return
        self.digits = raw.translate(None, _SEPARATORS)
        runs = raw.translate(_DIGITS_AND_SPACE).split()
        try:
            self.lengths = bytes(map(len, runs))  # one byte per group: shapes are found with bytes.find
            self.offsets = [0, *accumulate(self.lengths)]
        except ValueError:  # a group of 256 digits or more
            self.lengths = bytes(map(min, map(len, runs), repeat(255)))
            self.offsets = [0, *accumulate(map(len, runs))]
        groups = tuple(self.group(i) for i in range(min(_MAX_GROUPS, len(self.offsets) - 1)))
        gaps = tuple(m.group() for m in islice(_GAP.finditer(raw), len(groups) - 1))
        self.head = (groups, gaps)  # the first groups and what parts them: where a phone number would start

    @property
    def num_groups(self) -> int:
        return len(self.offsets) - 1

    def group(self, i: int) -> bytes:
        return self.digits[self.offsets[i] : self.offsets[i + 1]]

    def gap(self, i: int) -> bytes:
        """What parts group i from group i + 1 (for groups in `head`)."""
        return self.head[1][i] if i < len(self.head[1]) else b""

    def windows(self, min_digits: int, max_digits: int, max_groups: int = _MAX_GROUPS, from_start: bool = False):
        """(i, j) for each run groups[i:j] of min..max digits in at most max_groups groups: a number in any
        grouping, never cut inside a group. The starts that cannot reach min_digits are dropped in C."""
        if max(self.lengths) * max_groups < min_digits:
            return  # e.g. a table of one- or two-digit numbers: nothing long enough in max_groups groups
        offsets, n = self.offsets, self.num_groups
        if from_start or n == 1:
            starts = range(1)
        else:
            padded = offsets + [offsets[-1]] * max_groups
            reach = map(sub, padded[max_groups : max_groups + n], offsets[:n])
            starts = compress(range(n), map(ge, reach, repeat(min_digits)))
        for i in starts:
            lo = bisect_left(offsets, offsets[i] + min_digits, i + 1, min(n, i + max_groups) + 1)
            hi = bisect_right(offsets, offsets[i] + max_digits, lo, min(n, i + max_groups) + 1)
            for j in range(lo, hi):
                yield i, j


# A date with a four-digit year, in the forms people write one: it is never part of a number (only its
# first digit is a class, so re skips text in C). A two-digit year (75.12.30) may be a phone number's groups.
# A year first is one people write (1800-2199): `4111 1111 1111 6467/12/29` is a card and its expiry.
_DATE = re.compile(
    rb"[0-9](?<![0-9][0-9])(?<![0-9][-./][0-9])"
    rb"(?:[0-9](?<=1[89]|2[01])[0-9]{2}([-./])[01]?[0-9]\1[0-3]?[0-9]|[0-9]?([-./])[01]?[0-9]\2[12][0-9]{3})"
    rb"(?![0-9]|[-./][0-9])"  # 06.12.34.56.78 is a phone number, not a date and two more groups
)


# Three groups of four digits parted by spaces or dashes, right before a date whose year is the fourth (searched in
# the 21 bytes before it): a 16-digit card and its expiry. Not a table's columns (tabs and line breaks part those),
# nor an order number and a date (`order 427970498904 2018-03-23`: a review).
_GROUPS_BEFORE = re.compile(rb"(?<![0-9])[0-9]{4}[ -]{1,3}[0-9]{4}[ -]{1,3}[0-9]{4}[ -]{1,3}\Z")


def _as_boundary(match: re.Match[bytes], found: list[re.Match[bytes]]) -> bytes:
    found.append(match)
    return b"x" * len(match.group())


def _may_hold_pii(raw: bytes, lead: bytes) -> bool:
    """Whether a cluster can be PII at all, decided before it costs a Cluster.

    After a + or a colon (tel:) or an opening parenthesis (an area code) any 7 digits can be a phone
    number; so can a trunk 0 (030 123456). Otherwise: 10 digits or more, and, unbroken, only the
    lengths PII has (an 11-digit Chinese mobile, 13-19 for a card, 17-18 for an ID), so a column
    of 10-digit ids in a CSV is passed over."""
    if lead in (b"+", b":", b"(") or raw[:1] == b"0":
        return len(raw) - len(raw.translate(None, _DIGITS)) >= _MIN_CLUSTER_DIGITS
    if raw.isdigit():
        return len(raw) == 11 or 13 <= len(raw) <= 19
    return len(raw) - len(raw.translate(None, _DIGITS)) >= 10


class Scan:
    """One prompt's normalized text as bytes, and its numbers, found once for every detector."""

    def __init__(self, text: str) -> None:
        self.data = normalize_utf8(text)
        self._before_dates: list[list[bytes]] = []  # found with the clusters (`_clusters_in`)
        self.broken_ssn_look_backs = 0  # has_ssn's, from nine digits a line break parts

    @classmethod
    def normalized(cls, data: bytes) -> "Scan":
        """A scan of text normalized already (one of `lookalike_readings`)."""
        scan = cls("")
        scan.data = data
        return scan

    @cached_property
    def has_ssn_label(self) -> bool:
        """Whether the text holds an SSN label anywhere: every reading of a number by a label needs one, and a CSV of
        9-digit ids has none (looking around each of its numbers for one cost 6x the rest of has_ssn)."""
        return _SSN_ANY_LABEL.search(self.lowered) is not None

    @cached_property
    def lowered(self) -> bytes:
        """The text with ASCII lower-cased, as the SSN labels are read."""
        return self.data.lower()

    @cached_property
    def numeric_runs(self) -> list[tuple[int, int]]:
        """Where the text has runs of _MIN_RUN digits and separators or more, holding 7 digits or more (not a row
        of dots or dashes): every number of 7 digits or more is in one, whatever `_may_hold_pii` makes of it."""
        data, runs = self.data, []
        numeric = data.translate(_NUMERIC)
        pos = 0
        while (hit := numeric.find(b"1" * _MIN_RUN, pos)) != -1:  # a CSV of 7-digit ids never gets here
            start = numeric.rfind(b"0", pos, hit) + 1 or pos
            end = numeric.find(b"0", hit)
            end = len(data) if end == -1 else end
            run = data[start:end]
            if len(run) - len(run.translate(None, _DIGITS)) >= _MIN_CLUSTER_DIGITS:
                runs.append((start, end))
            pos = end
        return runs

    @property
    def before_dates(self) -> list[list[bytes]]:
        """Three groups of four digits right before a date with its year first, and its year: a card, then its
        expiry (`4111 1111 1111 2024/12/29`). Found with the clusters, where the dates are."""
        self.clusters  # noqa: B018 - finds them
        return self._before_dates

    @cached_property
    def clusters(self) -> list[Cluster]:
        data, found = self.data, []
        for start, end in self.numeric_runs:
            run = data[start:end]
            if run.isdigit():  # the common case in a table or a CSV: one number, no separators
                if _may_hold_pii(run, data[start - 1 : start]):
                    found.append(Cluster(start, end, run))
            else:
                found += self._clusters_in(start, end)
        return found

    def _clusters_in(self, start: int, end: int):
        """The clusters of a run: parted by 5 or more separators in a row.

        Most are dropped at once, before they cost a Cluster (`_may_hold_pii`)."""
        run = self.data[start:end]
        kinds = run.translate(_DIGIT_OR_SEPARATOR)
        if (b"-" in run or b"/" in run or b"." in run) and _DATE.search(run):
            found: list[re.Match[bytes]] = []
            masked = _DATE.sub(lambda d: _as_boundary(d, found), run)
            kinds = masked.translate(_DIGIT_OR_SEPARATOR)  # a date joins no number
            for date in found:  # a card whose last group reads as a year, then its expiry: `… 1111 2024/12/29`
                at = date.start()
                if date.group(1) is not None and masked[max(0, at - 4) : at].rstrip(b" -")[-1:].isdigit():
                    if card := _GROUPS_BEFORE.search(masked, max(0, at - 21), at):  # 4+4+4 digits, 3×3 parting
                        self._before_dates.append([*card.group().replace(b"-", b" ").split(), date.group()[:4]])
        pos = kinds.find(b"d")
        while pos != -1:
            stop = kinds.find(b"x", pos)  # first the nearer boundary, so no search runs past it (linear)
            stop = len(kinds) if stop == -1 else stop
            gap = kinds.find(b"s" * (_MAX_GAP + 1), pos, stop)
            boundary = stop if gap == -1 else gap
            last = kinds.rfind(b"d", pos, boundary) + 1
            raw = self.data[start + pos : start + last]
            if _may_hold_pii(raw, self.data[start + pos - 1 : start + pos]):
                yield Cluster(start + pos, start + last, raw)
            pos = kinds.find(b"d", boundary)

    def before(self, cluster: Cluster, n: int = 1) -> bytes:
        return self.data[max(0, cluster.start - n) : cluster.start]

    def after(self, cluster: Cluster, n: int = 1) -> bytes:
        return self.data[cluster.end : cluster.end + n]


# -- e-mail ------------------------------------------------------------------------------------------


def has_email(scan: Scan) -> bool:
    """local@domain.tld, ASCII; the local part is any run of the characters an address may hold."""
    data, after_local = scan.data, -1
    if b"@" in data:
        if b"\xe3\x80\x82" in data or b"\xef\xbd\xa1" in data:  # ann@example。com: a CJK full stop, here only
            data = data.replace(b"\xe3\x80\x82", b".").replace(b"\xef\xbd\xa1", b".")
        classes = data.translate(_EMAIL_CHARS)
        first = classes.find(b"l@l")  # an "@" between address characters
        if first != -1 and _email_after(data, first + 1):
            return True
        # Where a written-out address's "@" may be, at the earliest: after an address character (`ann@example dot
        # com`), or a blank after one (`ann @ example.com`)
        blank_before = b" @" in data or b"\n@" in data or b"\t@" in data
        after_local = classes.find(b"l") if blank_before else classes.find(b"l@")
    if b"%40" in data and _email_after(data, data.find(b"%40")):  # ann%40example.com, in a pasted URL
        return True
    if b"}@" in data:  # a paper's authors: {ann.lee,bob.smith}@cs.stanford.edu
        for locals_ in _GROUPED_LOCAL_PARTS.finditer(data):
            if _email_after(data, locals_.end(), glued=False):
                return True
    return _written_out_email(data, after_local)


# `{ann,bob.smith}@`: local parts grouped before one domain, as papers list their authors' addresses
_GROUPED_LOCAL_PARTS = re.compile(
    rb"\{[A-Za-z0-9._%+-]{1,64}(?:[ \t]{0,2}[,;|][ \t]{0,2}[A-Za-z0-9._%+-]{1,64}){1,30}\}(?=@)"
)


def _email_after(data: bytes, pos: int, glued: bool = True) -> bool:
    """An address's domain from `pos` on; where `glued`, right after a local part's character (else after anything:
    a group of local parts' closing brace)."""
    found = _EMAIL_DOMAIN.finditer(data, pos) if glued else (_EMAIL_DOMAIN.match(data, pos),)
    for match in found:
        if match is None:
            continue
        at = match.start()
        written = match.group(1)
        tld = written.lower()
        if (glued and data[at - 1 : at].translate(_EMAIL_CHARS) != b"l") or tld in _NOT_TLDS:
            continue
        local = _LOCAL_BEFORE.search(data, max(0, at - 64), at)
        local = local.group() if local else b""
        end = match.end(1)
        glued_number = data[end : end + 1].isdigit() or data[end : end + 1] == b"+"
        if glued_number and (len(local) < 2 or not (len(tld) == 2 or tld in _TLDS_BEFORE_A_BRACKET)):
            continue  # `x@self.weight1234567`, `user@host.local1234567`: code's and hosts', not an address and a phone
        if written[:1].islower() and not written.islower():
            if len(local) > 1 and local not in _KOTLIN_LABELS and _tld_then_a_field(data, match.start(1)):
                return True  # `ann.lee@gmail.comPhone: …`: the next field's name glued on, as a PDF's text runs
            continue  # `q@k.mT`, `q@k.isFinite:`: code's attribute, not a domain (`Example.CoM` is one, typed oddly)
        if data[end : end + 1] == b":" and _A_PATH.match(data, end + 1):
            continue  # `git@github.com:org/repo.git`, `scp ann@host.example.com:~/notes`: a login at a host, a path
        labels = match.group().lstrip(b"@%40").split(b".")
        if len(local) == 1 and len(labels) >= 3 and labels[0] in _CODE_OBJECTS:
            continue  # `x@self.weight.data`: a matrix product (`ann@self.employed.com` is an address)
        if tld in _LAN_TLDS and local.lower() in _SYSTEM_ACCOUNTS:
            continue  # `ssh root@server.local`: a login on a LAN's host (`ann.lee@corp.internal` is a mailbox)
        if match.group(2) is None or (len(tld) == 2 and tld != b"to") or tld in _TLDS_BEFORE_A_BRACKET:
            return True
    return False


# Kotlin's labels before a class (`this@MainActivity.isMobile`: no address and no field; a review)
_KOTLIN_LABELS = frozenset((b"this", b"super", b"return", b"break", b"continue", b"it"))


def _tld_then_a_field(data: bytes, at: int) -> bool:
    """A top-level domain in small letters at data[at:] with the next field's name glued after it (`comPhone:`,
    `deLinkedIn`, `designPhone:`): a country's two letters or a common generic one before any field's name, any
    other before a word and a colon (`…comparator:` is one word, no field)."""
    cut = at
    while data[cut : cut + 1].islower():
        cut += 1
    tld = data[at:cut]
    known = (len(tld) == 2 and tld != b"to") or tld in _TLDS_BEFORE_A_BRACKET
    field = _NEXT_FIELD_GLUED.match(data, cut) if data[cut : cut + 1].isupper() else None
    return field is not None and (known or field.group().endswith(b":"))


# An address written out so that scrapers miss it, as web pages, signatures and papers print them (a user pasting one
# did not choose the disguise): `ann (at) example (dot) com`, `ann[at]example.com`, `ann [@] example [.] com`,
# `ann @ example . com`, `ann@example dot com`, `ann AT example DOT com`, `ann at example dot com`. The at: a
# bracketed `at` or `@`, an `@` (with or without blanks) before spelled dots or dots parted by blanks, or the word
# `at` before spelled dots. Not an @ with a blank after it before plain dots: that is code (`q = x @ self.Wq`, `A @
# A.mT`) and notes (`Lunch @ noon. We`) far more often than an address (a review). The last label is a top-level
# domain. Blanks are 0-3 of any kind (a PDF's doubled spaces, a line break from Windows). Each pattern holds the whole
# rule (no candidate reaches Python to be refused there), starts with a byte re skips to, and runs only where a byte
# it needs is in the text.
_E = rb"[A-Za-z0-9._%+-]"  # an address's local part ends in one of these, right before the at or blanks before it
_BRACKET_OPEN, _BRACKET_CLOSE = rb"[\(\[\{<]", rb"[\)\]\}>]"
_WRITTEN_DOT = (
    rb"\s{0,3}" + _BRACKET_OPEN + rb"\s{0,3}(?:dot|DOT|Dot|\.)\s{0,3}" + _BRACKET_CLOSE + rb"\s{0,3}"
    + rb"|\s{1,3}(?:dot|DOT)\s{1,3}"
)  # fmt: skip
_SPACED_DOTS = _WRITTEN_DOT + rb"|\s{1,3}\.\s{1,3}"  # `ann @ example . com`
_ANY_DOT = _WRITTEN_DOT + rb"|\s{0,3}\.\s{0,3}"  # after a bracketed at: `ann (at) example.com`
# Where the domain does not end: a label, an identifier's `_`, another dot and label (a sentence's full stop ends it),
# or a call's bracket where the dots may be code's (`a @ b.to(device)`); after a bracketed at, a bracket is a note
# (`ann(at)example.com(work)`)
_TLD_END_BEFORE_A_BRACKET = rb"(?![A-Za-z0-9_]|\.[A-Za-z0-9]|" + _WRITTEN_DOT + rb")"
_TLD_END = rb"(?!\()" + _TLD_END_BEFORE_A_BRACKET
# The last label: a run of letters in one case (`A @ A.mT` is code), not a file's extension (`logo[at]2x.png`)
_IN_ONE_CASE = (
    rb"(?!(?i:" + b"|".join(sorted(_NOT_TLDS)) + rb")(?![A-Za-z]))(?:[a-z]{2,24}|[A-Z]{2,24}|[A-Z][a-z]{1,23})"
)
_ANY_TLD = _IN_ONE_CASE + _TLD_END
_ANY_TLD_BEFORE_A_BRACKET = _IN_ONE_CASE + _TLD_END_BEFORE_A_BRACKET
# After the word `at`, plain words read as an address only where the last is a country's two letters or a generic
# domain, and no small word (`looked at the dot it made`); in capitals as well (`LOOK AT RED DOT IN CENTER`)
_KNOWN_TLD = (
    rb"(?:[a-z]{2}|[A-Z]{2}|[A-Z][a-z]|(?i:" + b"|".join(sorted(_TLDS_BEFORE_A_BRACKET)) + rb"))" + _TLD_END
)  # fmt: skip
_NOT_A_WORD = rb"(?!(?i:am|an|as|at|be|by|do|go|he|if|in|is|it|me|my|no|of|ok|on|or|so|to|up|us|we|dot)(?![A-Za-z0-9]))"
_NOT_A_DOMAIN = rb"(?!(?i:the|a|an|this|that|these|those|my|your|his|her|its|our|their|one)(?![A-Za-z0-9-]))"
# ... and a word before `at` that makes it a sentence about a site, as transcripts spell them: `visit us at example dot
# com`, `I ordered it at Amazon dot com`, `He worked at Pets dot com`, `good at ASP dot NET`
_NOT_A_LOCAL_PART = (
    rb"(?!(?i:us|it|me|him|her|them|you|we|i|they|one|all|here|there|that|this|work|works|worked|working|met|meet|"
    rb"order|ordered|buy|bought|sell|sold|shop|shopping|available|found|find|visit|visited|see|look|looked|online|"
    rb"live|based|up|out|good|great|expert|better|best|bad|job|jobs|staff|hired|intern|engineer|developer)\s)"
)  # fmt: skip


def _written_domain(dots: bytes, tld: bytes, lead: bytes = rb"\s{0,3}") -> bytes:
    """Labels parted by `dots`, the last a top-level domain; group "more" set where there are three or more."""
    label = rb"[A-Za-z0-9-]{1,63}"
    return lead + label + rb"(?:(?:" + dots + rb")(?P<more>" + label + rb")){0,7}?(?:" + dots + rb")" + tld


def _after_a_local_part(then: bytes) -> bytes:
    """`then` right after a local part's last character and 0-3 blanks (look-behinds are of one width each)."""
    return then + rb"(?:" + b"|".join(rb"(?<=" + _E + rb"\s" * n + then + rb")" for n in range(4)) + rb")"


_WRITTEN_AT_SIGN = re.compile(  # ann@example dot com, ann @ example . com
    _after_a_local_part(b"@") + _written_domain(_SPACED_DOTS, _ANY_TLD_BEFORE_A_BRACKET)
)
_BRACKETED_AT = re.compile(
    _after_a_local_part(_BRACKET_OPEN) + rb"\s{0,3}(?:at|AT|At|@)\s{0,3}" + _BRACKET_CLOSE
    + _written_domain(_ANY_DOT, _ANY_TLD_BEFORE_A_BRACKET)
)  # fmt: skip
_CLOSED_AT = re.compile(  # the hint for _BRACKETED_AT: `at)`, `@ ]` (re skips to the rare closing bracket)
    _BRACKET_CLOSE + rb"(?:" + b"|".join(rb"(?<=[tT@]" + rb"\s" * n + _BRACKET_CLOSE + rb")" for n in range(4)) + rb")"
)
# `ann at example dot com`, searched for from the local part, in a stretch around a `dot` word only. Its last label
# is any run of letters (a country's two letters that are words too: `mario.rossi at libero dot it`) where the local
# part has what no word has (`jane.doe`, `ann93`) or the domain three labels (`ann at cs dot iitb dot ac dot in`);
# any run of letters but a small word where the domain has a hyphen (`museum-berlin dot museum`) or the at is in
# capitals (`ANN AT PROTON DOT ME`); else a known one
_WORD_AT = re.compile(
    rb"(?<![A-Za-z0-9._%+-])" + _NOT_A_LOCAL_PART
    + rb"(?:(?P<marked>(?=[A-Za-z0-9._%+-]{0,63}[._%+0-9])[A-Za-z0-9._%+-]{1,64})|[A-Za-z0-9._%+-]{1,64})"
    + rb"\s{1,3}(?:(?P<upper>AT)|at)(?=\s)\s{0,2}" + _NOT_A_DOMAIN
    + rb"(?=(?P<hyphen>[A-Za-z0-9]{1,62}-[A-Za-z0-9-]{1,62})?)"
    + _written_domain(_WRITTEN_DOT, b"", lead=b"")
    + rb"(?(marked)" + _ANY_TLD + rb"|(?(more)" + _ANY_TLD + rb"|" + _NOT_A_WORD + rb"(?(hyphen)" + _ANY_TLD
    + rb"|(?(upper)" + _ANY_TLD + b"|" + _KNOWN_TLD + rb"))))"
)  # fmt: skip


# Three more disguises, each with a domain of plain dots that ends in a top-level domain addresses use (code's
# attributes are rarely one: `x @ self.fc`, `A @ B.mT`, `q @ k.T`; nor is one before a bracket: `W.at[idx]`), and a
# local part that starts with a letter and has two: `john.smith @ gmail.com` (blanks on both sides of the @) and
# `john.smith AT example.com` (a capital AT after a small letter or digit: not a sentence in capitals), where the local
# part has what no word has (a flyer's `Tickets @ eventbrite.com`, an ad's `Shop now AT Target.com`), and
# `ann(a)example.com` (not `section 5(a)…`)
_ADDRESS_TLD = (
    rb"(?:(?:com|org|net|edu|gov|mil|info|biz|io|co|ai|app|dev|me|us|uk|de|fr|jp|cn|ru|br|in|it|es|nl|ca|au|ch|se|"
    rb"no|dk|fi|pl|at|be|kr|tw|hk|sg|mx|ar|za|il|ie|nz|pt|gr|cz|tr|ua|eu)|(?:COM|ORG|NET|EDU|GOV|DE|UK))(?!\[)"
    + _TLD_END
)  # fmt: skip
_PLAIN_DOMAIN = rb"(?:[A-Za-z0-9-]{1,63}\.){1,7}?" + _ADDRESS_TLD
_SPACED_AT = re.compile(  # a domain not an object's attribute; the local part is read back from the @ (_marked_local)
    rb"@(?:" + b"|".join(rb"(?<=" + _E + rb"[ \t]" * n + rb"@)" for n in (1, 2)) + rb")[ \t]{1,2}"
    + rb"(?!(?:self|this|cls|np|torch|tf|jnp|nn|math|os|sys)\.[A-Za-z0-9_-]+(?![A-Za-z0-9_.-]))" + _PLAIN_DOMAIN
)  # fmt: skip
_ASCII_LETTERS = bytes(range(ord("A"), ord("Z") + 1)) + bytes(range(ord("a"), ord("z") + 1))
_LOCAL_BEFORE_BLANKS = re.compile(rb"(?<![A-Za-z0-9._%+-])[A-Za-z0-9._%+-]{1,64}[ \t]{0,2}\Z")
_MARKED = re.compile(rb"[A-Za-z0-9]+(?:[._%+-][A-Za-z0-9]+)*")  # `john.smith`, `ann93`, `j_doe`: checked fully
_CAPITAL_AT = re.compile(rb"AT(?:(?<=[a-z0-9][ \t]AT)|(?<=[a-z0-9][ \t]{2}AT))[ \t]{1,2}" + _PLAIN_DOMAIN)
_LETTER_A_AT = re.compile(rb"\(a\)(?<=" + _E + rb"\(a\))" + _PLAIN_DOMAIN)


# The providers most people's addresses are at: after one of them, a blank-parted @ or a capital AT takes any local
# part (`ann @ gmail.com`, `ann AT gmail.com`; no flyer points at a mailbox provider) and a small `at` a marked one
# (`ann.lee at gmail.com`; not `sign up at gmail.com`, `log in at outlook.com`).
_WEBMAIL = (
    rb"(?:gmail|googlemail|yahoo|ymail|hotmail|outlook|live|msn|icloud|me|aol|protonmail|proton|pm|gmx|web|yandex|"
    rb"mail|qq|163|126|naver|hanmail|zoho|fastmail)\.(?:com|net|me|de|ru|fr|co\.uk|co\.jp)(?![A-Za-z0-9-]|\.[A-Za-z])"
)  # fmt: skip
# The at first, then what is before it: a pattern that starts with look-behinds has no first byte for re to skip to,
# and tried them at every byte of every prompt (8 of has_email's 12 µs on a short one); a group around the at's
# forms would cost that skip too. A small `at` is the match's first byte.
_AT_A_MAILBOX_PROVIDER = re.compile(
    # `@` with blanks on one side or both (`ann.lee@ gmail.com`, `ann.lee @gmail.com`: a phone's keyboard), a
    # word's `AT` or `at` with blanks on both
    rb"(?:@(?:(?<=[A-Za-z0-9]@)[ \t]{1,2}|(?:(?<=[A-Za-z0-9][ \t]@)|(?<=[A-Za-z0-9][ \t]{2}@))[ \t]{0,2})"
    + b"".join(
        rb"|%s(?:(?<=[A-Za-z0-9][ \t]%s)|(?<=[A-Za-z0-9][ \t]{2}%s))[ \t]{1,2}" % (at, at, at) for at in (b"AT", b"at")
    )
    + rb")(?i:" + _WEBMAIL + rb")"
)  # fmt: skip


def _local_part(data: bytes, at: int, marked: bool = True) -> bool:
    """Before the at at `at`, past its blanks: a local part that starts with a letter and has two (not a price, a
    time or `x2`); where `marked`, with what no word has, a dot, `_`, `%`, `+` or a digit between letters or digits
    (`john.smith`, `ann93`): a word alone is a flyer's or a note's (`Tickets @ eventbrite.com`)."""
    found = _LOCAL_BEFORE_BLANKS.search(data, max(0, at - 67), at)
    if found is None:
        return False
    local = found.group().rstrip(b" \t")
    letters = len(local) - len(local.translate(None, _ASCII_LETTERS))
    if not local[:1].isalpha() or letters < 2:
        return False
    return not marked or (_MARKED.fullmatch(local) is not None and not local.isalpha())


def _written_out_email(data: bytes, after_local: int) -> bool:
    """`after_local`: where to look for an @ from (an address character before it), -1 for nowhere."""
    if after_local != -1 and _WRITTEN_AT_SIGN.search(data, after_local):
        return True
    if after_local != -1 and any(_local_part(data, at.start()) for at in _SPACED_AT.finditer(data, after_local)):
        return True
    if b" AT" in data and any(_local_part(data, at.start()) for at in _CAPITAL_AT.finditer(data)):
        return True
    if b"(a)" in data and any(_local_part(data, at.start(), marked=False) for at in _LETTER_A_AT.finditer(data)):
        return True
    for at in _AT_A_MAILBOX_PROVIDER.finditer(data):  # a small `at` needs a marked local part; `@` and `AT` any
        if _local_part(data, at.start(), marked=at.group().startswith(b"at")):
            return True
    closes = b")" in data or b"]" in data or b"}" in data or b">" in data
    if closes and _CLOSED_AT.search(data) and _BRACKETED_AT.search(data):
        return True
    # The word `at`: searched for only around a `dot` word (rare in text; `at` is not), each stretch once, and a match
    # may run past its stretch's end (an address the end cut was missed: a review)
    for dot in (b"dot", b"DOT"):
        start = end = -1  # the stretch to search: from a local part before a dot to 8 labels after it, merged
        pos = data.find(dot)
        while pos != -1:
            if pos - 150 > end:  # past the stretch: search it, start another
                if end != -1 and _WORD_AT.search(data, start, end + 1_000):
                    return True
                start = max(end, pos - 150, 0)
            end = pos + 640
            pos = data.find(dot, pos + 3)
        if end != -1 and _WORD_AT.search(data, start, end + 1_000):
            return True
    return False


# -- payment cards -----------------------------------------------------------------------------------


def luhn_ok(digits: bytes) -> bool:
    """The Luhn check over ASCII digits, summed in C (python-stdnum's `luhn` is the test's oracle)."""
    total = sum(digits[-1::-2].translate(_VALUE)) + sum(digits[-2::-2].translate(_DOUBLED))
    return total % 10 == 0


_ANY_LENGTH = range(13, 20)
# (first digits from, to, lengths): the issuer ranges and number lengths of the card networks. They keep
# random Luhn-valid numbers out (an order number 111-2405177-4823152 is on Mastercard's range, but 14 long).
_CARD_SCHEMES = (
    (4, 4, (13, 16, 19)),  # Visa
    (51, 55, (16,)), (2221, 2720, (16,)),  # Mastercard
    (34, 34, (15,)), (37, 37, (15,)),  # Amex
    (36, 36, range(14, 20)), (300, 305, range(14, 20)), (3095, 3095, range(14, 20)), (38, 39, range(14, 20)),  # Diners
    (3528, 3589, _ANY_LENGTH),  # JCB
    (50, 50, _ANY_LENGTH), (56, 69, _ANY_LENGTH),  # Maestro; Discover 60/64/65, UnionPay 62, RuPay 60/65 within
    (2200, 2204, _ANY_LENGTH),  # Mir
    (81, 82, _ANY_LENGTH),  # UnionPay, RuPay
    (9792, 9792, (16,)),  # Troy
    (8600, 8600, (16,)), (9860, 9860, (16,)),  # Uzcard, Humo
)  # fmt: skip


def _schemes_by_two_digits() -> dict[bytes, list[tuple[int, int, range | tuple[int, ...]]]]:
    """The schemes each first two digits can belong to, so most numbers are refused by one dict lookup."""
    by_two: dict[bytes, list] = {}
    for lo, hi, lengths in _CARD_SCHEMES:
        width = len(str(lo))
        if width == 1:
            prefixes = range(lo * 10, hi * 10 + 10)
        else:
            prefixes = range(lo // 10 ** (width - 2), hi // 10 ** (width - 2) + 1)
        for two in prefixes:
            by_two.setdefault(str(two).encode(), []).append((lo, hi, lengths))
    return by_two


_SCHEMES_BY_TWO_DIGITS = _schemes_by_two_digits()


def card_scheme_ok(digits: bytes) -> bool:
    """On a card network's issuer range, with a length that network issues."""
    for lo, hi, lengths in _SCHEMES_BY_TWO_DIGITS.get(digits[:2], ()):
        if len(digits) in lengths and lo <= int(digits[: len(str(lo))]) <= hi:
            return True
    return False


def has_credit_card(scan: Scan) -> bool:
    """13-19 digits in any grouping, on an issuer's range and length, with a valid Luhn check digit."""
    for groups in scan.before_dates:  # three groups right before a year-first date, and its year (`_clusters_in`)
        number = b"".join(groups)
        if luhn_ok(number) and card_scheme_ok(number):
            return True
    for cluster in scan.clusters:
        if _after_country_code(scan, cluster):
            continue  # an IBAN's groups (DE89 3704 …), valid or mistyped, are not a card
        digits, offsets = cluster.digits, cluster.offsets
        for i, j in cluster.windows(13, 19, _MAX_CARD_GROUPS):
            number = digits[offsets[i] : offsets[j]]
            if luhn_ok(number) and card_scheme_ok(number) and not _decimal(cluster, i, j):
                return True
    return False


def _decimal(cluster: Cluster, i: int, j: int) -> bool:
    """A decimal number (9.391491627785106), or its fraction alone, is not a card."""
    if j - i == 2 and cluster.gap(i) == b".":
        return True
    return j - i == 1 and i > 0 and cluster.gap(i - 1) == b"." and cluster.offsets[i] - cluster.offsets[i - 1] <= 3


def _after_country_code(scan: Scan, cluster: Cluster) -> bool:
    """The cluster follows two letters at a word start, as an IBAN's digits follow its country code: a country with
    IBANs, and about as many digits as its IBANs have (two more or fewer: a mistyped one). Any two letters refused
    a card glued to a word (`№4111…`, read `No4111…`; `MC5555…`, `cc4111…`), as many forms and chats write one."""
    before = scan.before(cluster, 3)
    if not (len(before) >= 2 and before[-2:].isalpha() and not before[-3:-2].isalnum() and cluster.offsets[1] >= 2):
        return False
    length = _IBAN_DIGITS.get(before[-2:].upper())
    return length is not None and abs(len(cluster.digits) - length) <= 2


# -- phone numbers -----------------------------------------------------------------------------------


def _possible_number(digits: bytes) -> bool:
    """+ and these digits: a country's calling code and a length its numbers have."""
    if not _calling_code_ok(digits):
        return False
    try:
        number = phonenumbers.parse("+" + digits.decode())
    except phonenumbers.NumberParseException:
        return False
    reason = phonenumbers.is_possible_number_with_reason(number)
    return reason in (phonenumbers.ValidationResult.IS_POSSIBLE, phonenumbers.ValidationResult.IS_POSSIBLE_LOCAL_ONLY)


def _calling_code_ok(digits: bytes) -> bool:
    """Country calling codes are prefix-free: at most one of the first 1-3 digits is one."""
    return digits[:1] in _CALLING_CODES or digits[:2] in _CALLING_CODES or digits[:3] in _CALLING_CODES


def _international(scan: Scan, cluster: Cluster) -> bool:
    """+CC …, 00CC …, or a tel: URI."""
    lead = scan.before(cluster, 7).rstrip(b" ").lower()
    if lead.endswith((b"tel:", b"tel:+")) and not lead[: lead.rfind(b"tel:")][-1:].isalnum():  # not hotel:
        return True
    digits = cluster.digits
    if lead.endswith(b"+") and (not _is_alnum(lead[-2:-1]) or _labelled(scan.before(cluster, 11)[:-1])):
        # A length that country's numbers have (phonenumbers knows): +67822111 is Vanuatu's, +1048576 no one's.
        return any(_possible_number(digits[: cluster.offsets[j]]) for _, j in cluster.windows(7, 17, from_start=True))
    first = cluster.group(0)
    decimal_or_time = cluster.gap(0) == b"." or (lead[-1:] == b":" and lead[-2:-1].isdigit())  # 12:50:00.574205
    if first.startswith(b"00") and not first.startswith(b"000") and not decimal_or_time:
        if len(first) > 5 and cluster.num_groups > 1:
            return False
        return any(True for _ in cluster.windows(9, 17, from_start=True)) and _calling_code_ok(digits[2:])
    return False


def _chinese_mobile(cluster: Cluster) -> bool:
    """1[3-9]x xxxx xxxx: one group of 11 digits, or groups of 3, 4 and 4 (found in C on the group lengths)."""
    for shape in (b"\x0b", b"\x03\x04\x04"):
        pos = 0
        while (i := cluster.lengths.find(shape, pos)) != -1:
            first = cluster.offsets[i]
            if cluster.digits[first : first + 1] == b"1" and cluster.digits[first + 1 : first + 2] in b"3456789":
                return True
            pos = i + 1
    return False


def _looks_like_date(groups: tuple[bytes, ...], gaps: tuple[bytes, ...]) -> bool:
    """2024-01-15, 15.01.2024 or 01/15/24, possibly followed by a time."""
    if len(groups) < 3 or gaps[0] != gaps[1] or gaps[0] not in (b"-", b"/", b"."):
        return False
    a, b, c = (int(g) for g in groups[:3])
    if len(groups[0]) == 4:
        return 1 <= b <= 12 and 1 <= c <= 31
    year_ok = len(groups[2]) == 4 or (len(groups[2]) == 2 and len(groups) == 3)
    return year_ok and len(groups[0]) <= 2 and len(groups[1]) <= 2 and 1 <= a <= 31 and 1 <= b <= 31


def _parenthesized_area(scan: Scan, cluster: Cluster) -> bool:
    """(555) 123-4567, (2) 2123 4567, (06 1) 234 5678, (0-612) 34567, 8 (912) 345-67-89: an area code of
    one or two groups (1-5 digits) in parentheses, possibly after a one-digit prefix, then the number."""
    groups, gaps = cluster.head
    lead = (scan.before(cluster), *gaps)  # lead[i]: what comes before group i
    for k in (0, 1):
        if k + 1 >= len(groups) or not lead[k].endswith(b"(") or (k == 1 and len(groups[0]) != 1):
            continue
        for last in (k, k + 1):  # the area code is groups[k : last + 1]
            area = groups[k : last + 1]
            closed = last + 1 < len(groups) and gaps[last].startswith(b")")
            if closed and b")" not in b"".join(gaps[k:last]) and 1 <= sum(map(len, area)) <= 5:
                if 8 <= sum(map(len, groups[k:])) <= 13:
                    return True
    return False


def _national(scan: Scan, cluster: Cluster) -> bool:
    """Area code in parentheses, a trunk prefix 0 (or 8 / 1), or the 3-3-4 (NANP and alike) shape."""
    groups, gaps = cluster.head
    if _glued(scan, cluster) or _after_country_code(scan, cluster) or not cluster.digits.strip(b"01"):
        return False  # (only 0s and 1s: binary, 0110 1001 0101 1100)
    if len(groups) == 1:
        return _unbroken_trunk_number(groups[0])
    if _looks_like_date(groups, gaps) or _dotted_quad(groups, gaps):
        return False
    if _parenthesized_area(scan, cluster):
        return True
    # not a range or an amount (60000-80000, 12 90000-1234): no group ends in 000
    if len(groups) == 2 and len(groups[0]) == len(groups[1]) == 5 and groups[0][:1] in b"6789" and gaps[0] == b" ":
        return not any(g.endswith(b"000") for g in groups)  # an Indian mobile: 98765 43210
    if [len(g) for g in groups[:3]] == [2, 5, 4] and groups[1][:1] == b"9" and gaps[:2] == (b" ", b"-"):
        return not any(g.endswith(b"000") for g in groups[:3])  # a Brazilian mobile after its area code: 11 98765-4321
    first = groups[0]
    # trunk prefix: 020 7946 0958, 0912 345 678, 030 123456, 090-1234-5678, 081234 56789
    if first[:1] == b"0" and first[:2] != b"00" and 2 <= len(first) <= 6 and all(len(g) >= 2 for g in groups[1:]):
        if cluster.offsets[-1] >= 9 and any(True for _ in cluster.windows(9, 12, from_start=True)):
            return True
    if first in (b"8", b"1") and len(groups) >= 3 and gaps[0].strip() in (b"", b"-", b".") and len(groups[1]) == 3:
        groups, gaps = groups[1:], gaps[1:]  # 8 912 345-67-89, 1-800-555-0199
    # 3-3-4: 201-555-0123, 201.555.0123, 312 345 6789 (and whatever follows it in the cluster)
    total = len(groups[0])
    for k in range(1, len(groups)):
        total += len(groups[k])
        if total > 11:
            break
        if total >= 10 and k >= 2 and _three_x_x(groups[: k + 1], gaps[:k]):
            return True
    return False


# Words that say a phone number comes next (`phone: `, `my mobile number is `, `call me back at `, `Мой телефон `):
# then 7 to 15 digits are taken for one, however they are grouped. Matched on the text with ASCII lower-cased. The
# ASCII words are whole (`tel`, not `hotel` or `tell`; `cell`, not `cell_id`), but may start a camelCase or
# snake_case word's part (`userMobile`, `customer_phone`) and run into `number` or `no` (`mobileNumber`, `telNo`).
# The others as written: non-ASCII upper case is not lowered here (Cyrillic in both cases, `MÓVIL` read `mÓvil`).
_PHONE_WORDS_WHOLE = (
    "tel tlf tfn fax ph mob mobil mobile cel cell cellular cellulare celular whatsapp handy handynummer mobilnummer "
    "mobilephone homephone workphone officephone businessphone "  # HubSpot's and Outlook's property names
    "rufnummer telefonnummer movil móvil mÓvil phone phones telephone cellphone smartphone iphone handphone telefon "
    "telefono teléfono telÉfono telefone contact call calling called callback dial dialed dialled dialing dialling "
    "sms txt texted texting phoned rang telp hubungi mobiel telefoonnummer gsm telefonu mobilfunknummer viber "
    "wechat wsp msisdn callto facetime llámame llamame chiamami ligue"
).split() + [
    "call me", "call us", "text me", "text to", "reach me", "ring me", "msg me", "message me", "hit me up",
    "give me a ring", "whatsapp me", "caller id", "call or text", "call/text", "text or call", "my number",
    "our number", "mi numero", "mi número", "mi nÚmero", "mon numéro", "mon numero", "meine nummer", "mein nummer", "meu número", "meu numero", "mijn nummer", "il mio numero",
    "llama al", "marca el", "liga para", "me liga", "ruf mich an", "erreichbar unter", "appelle-moi", "appelez-moi",
]  # fmt: skip
_PHONE_WORDS_ANY = (
    "телефон Телефон ТЕЛЕФОН тел. Тел. ТЕЛ. тел: Тел: ТЕЛ: мобильн Мобильн МОБИЛЬН моб. Моб. МОБ. 電話 电话 手机 手機 "
    "携帯 전화 휴대폰 핸드폰 फ़ोन फोन هاتف جوال טלפון tél tÉl téléphone tÉlÉphone ☎ ☏ 📞 📱 📲 ✆ wa.me/ "
    "позвони Позвони звоните Звоните звонить сотовый Сотовый моб: Моб: МОБ: 拨打 致电 打给我 联系我 联系方式 座机 "
    "我的号码 연락주세요 연락처 कॉल komórka sđt sĐt τηλ. Τηλ. ΤΗΛ. τηλ: Τηλ: ΤΗΛ: κινητό Κινητό เบอร์โทร נייד واتساب "
    # (a review) the whole Greek word, Polish `komórkowy`, Turkish `numaram` (my number), Hindi `मोबाइल` (mobile)
    "τηλέφωνο Τηλέφωνο ΤΗΛΈΦΩΝΟ ΤΗΛΕΦΩΝΟ τηλεφώνου Τηλεφώνου komórkowy komórkowego komórkowym numaram Numaram "
    "NUMARAM मोबाइल"
).split() + ["тел ", "Тел ", "ТЕЛ ", "내 번호", "мой номер", "Мой номер", "मेरा नंबर", "τηλ ", "Τηλ ", "ΤΗΛ ",
             "mój numer", "Mój numer", "MÓJ NUMER", "cep telefonu", "Cep telefonu", "CEP TELEFONU"]  # fmt: skip
# Between a label and its number: punctuation, spaces, line breaks, anything not ASCII (a full-width colon, 号码是),
# and these words, at most 32 of them in all (a character not ASCII is one): `Phone number: `, `mobile no. `,
# `call me back at `, `contact me on `.
# Any other ASCII word ends it (`cell count was 12000000`, `iPhone sales: 231 800 000`).
_FILLER_WORDS = (
    "number numbers num no nr nbr is are me us at on to my our your his her the a an back directly or and of de di del "
    "la el du der die das here below home work office main personal direct primary landline alt other preferred h w m "
    # the 'is' of other languages (`mi teléfono es`, `mein Telefon ist`, `c'est le`, `my phone's`) and their `at`
    "es est ist lautet c s le al au unter para op it its "
    # what people put between a verb and the number (`call me tomorrow at`, `call him on`, `call or text`)
    "tomorrow today tonight anytime now asap him her them this that please pls mom dad "
    # an answer's first words in a transcript (`Customer: sure, 4155550100`)
    "sure yes yeah yep ok okay "
    # HTML around a label (`<b>Phone:</b> `, `<td>Phone</td><td>`)
    "b i td th tr span strong em div p br li dt dd"
).split()
# The second of several: `Phone 2: `, `Tel (1): `, `phone #2) `, `Phone [2]: `, `Téléphone 2 : `; not after the labels
# whose `<label> 2:` is something else (`_NO_ORDINAL`)
_ORDINAL = "[\\(\\[]?#?[0-9]{1,2} ?(?:[:)\\]]|-(?![0-9]))"
_NO_ORDINAL = frozenset(b"cell cel contact ph iphone smartphone cellphone".split())  # a sheet's cell, a CRM id, a model
_MOST_LISTED_DIGITS = 40  # what is read after a label: a number, or the first two of a list (`_first_listed`)
_LEADER = " \t\r\n._-"  # blanks, and what forms fill a column with (`Phone: ______`, `Phone ........`)
_LEADER_BYTES = _LEADER.encode()
_NUMBER_SEPARATORS = "[ \\t./()-]"  # no line break inside a labelled number: a column of them reads one by one


def _trie(words: set[str]) -> str:
    """One alternation of the words (as UTF-8 bytes) shaped as a trie: at each byte one branch, the longer words
    tried first (`telephone` before `tel`), as the sorted list of them was. A list of 200 words costs re a try of
    each at every place whose byte starts one (most letters: English text paid twice for the labels added in
    other languages); the trie costs a few steps there."""
    tree: dict = {}
    for word in words:
        node = tree
        for byte in word.encode():
            node = node.setdefault(byte, {})
        node[None] = {}  # a word ends here

    def pattern(node: dict) -> str:
        branches = [
            _byte_pattern(b) + pattern(child)
            for b, child in sorted(node.items(), key=lambda kv: kv[0] or 0)
            if b is not None
        ]
        if not branches:
            return ""
        inner = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        if None in node:  # a word may end here: the longer ones first
            return "(?:" + inner + ")?" if len(branches) == 1 else inner + "?"
        return inner

    return pattern(tree)


def _byte_pattern(byte: int) -> str:
    return re.escape(chr(byte)) if byte < 0x80 else f"\\x{byte:02x}"


_LABEL_TRIE = _trie({*_PHONE_WORDS_WHOLE, *_PHONE_WORDS_ANY})


# A transcript's turn: the line's end (a blank line may follow), then at the start of the next line (indented, after
# a time, in bold) the speaker who answers and a colon. Right after a question's `?`, any speaker of one or two words
# (`Customer:`, `[10:02] Caller:`, `**Speaker 2:**`, `Q:`/`A:`); after a statement (`Please confirm your SSN.`), or
# the question's last words before its `?` (`What's the best phone number to reach you?`, `Your SSN and phone?`), one
# of a transcript's roles: a line that asks nothing over `key: number` is a YAML's or a form's (`platform: mobile`
# over `build: 12345678` stays quiet), and so is a comment's question (`# Which mobile builds get the flag?` over
# `min_build: 24051201`).
_TURN_START = "[ \\t]*(?:\\r?\\n[ \\t]*){1,2}(?:\\[[0-9:.apm ]{1,12}\\][ \\t]*)?(?:\\*\\*)?"
_ROLES = (
    "agent|customer|caller|callee|user|assistant|rep|representative|client|patient|doctor|dr|nurse|operator|support|"
    "speaker(?: [0-9]{1,2})?|interviewer|interviewee|host|guest|bot|human|ai|me|you|q|a"
)
_SPEAKER_ENDS = "(?![a-z0-9_'-])(?:\\*\\*)?[ \\t]*:"
_QUESTION_TURN = (
    "(?:\\?" + _TURN_START + "[a-z][a-z0-9_.'-]{0,19}(?: [a-z0-9][a-z0-9_.'-]{0,19})?"
    "|[.!]?" + _TURN_START + "(?:" + _ROLES + "))" + _SPEAKER_ENDS
)
# A question's words between the label and its `?` (80 characters at most), then a transcript's role answering, or
# the answer alone on the next line: the user's message after the assistant's question, as a chat's turns are joined
# (`What's the best phone number to reach you?` then `4155550100`; `\\Z`: a look-back's window ends where the number
# starts). Tried last among the steps: where a filler or punctuation is one, the words are not read again.
_QUESTION_ANSWERED = (
    "[a-z' ,\\xe2\\x80\\x99-]{1,80}\\?(?:"  # `\\xe2\\x80\\x99`: U+2019, a typed apostrophe (`you’d`)
    + _TURN_START
    + "(?:"
    + _ROLES
    + ")"
    + _SPEAKER_ENDS
    + "|(?=[ \\t]*(?:\\r?\\n[ \\t]*){1,2}(?:[0-9+(]|\\Z)))"
)
# A vCard property's parameters between `TEL` and its colon (`TEL;TYPE=CELL;TYPE=pref:`, vCard 2.1's `TEL;WORK;VOICE:`)
_VCARD_PARAMETER = ';[a-z0-9-]{1,16}(?:=[a-z0-9,"-]{1,32})?'


def _labelled_number() -> tuple[re.Pattern[bytes], re.Pattern[bytes]]:
    """A label, what may stand between (_FILLER_WORDS, an ordinal, blanks), then 7 digits or more in groups
    parted by 1-2 separators; and the label with what may follow it, at the end of what is searched.

    Every branch of the label is a literal, so re skips in C to where one starts; and the quantifiers are
    possessive (Python 3.11; the same matches either way, as digits and what is between them are disjoint), so a
    label with no number after it is given up at once."""
    label = "(" + _LABEL_TRIE + ")"
    fillers = _trie(set(_FILLER_WORDS))
    for more in ("+", ""):  # possessive where re has it (3.11), else plain
        # a run of blanks, or of a form's leader dots, underscores or dashes, is one step: a form's columns
        # (`Phone:` and its number far to the right, `Phone ........ 4155550100`)
        # a short note in brackets is one step (`Phone (9am-5pm): `, `Mobile (private): `), unless it is a
        # number (`Phone (4155550100)`: the number itself)
        note = "\\((?![0-9+ ./-]+\\))[^()\\n]{1,32}\\)|\\[(?![0-9+ ./-]+\\])[^\\[\\]\\n]{1,32}\\]"
        between = (
            # a question's turn and the vCard parameters before the one character `[^0-9a-z]` would take their `?`
            # and `;` (each step is possessive)
            f"(?:{_QUESTION_TURN}|{_VCARD_PARAMETER}|[{_LEADER}]+{more}|{note}|[\\xc0-\\xff][\\x80-\\xbf]{{0,3}}{more}|"
            f"[^0-9a-z]|(?:{fillers})(?![a-z])|{_ORDINAL}|{_QUESTION_ANSWERED}){{0,32}}{more}"
        )
        number = f"([0-9](?:{_NUMBER_SEPARATORS}{{0,2}}{more}[0-9]){{6,{_MOST_LISTED_DIGITS - 1}}}{more})"
        try:
            whole = re.compile(f"{label}{between}{number}".encode())
        except re.error:
            continue
        return whole, re.compile(f"{label}{between}\\Z".encode())
    raise AssertionError("unreachable")


_LABELLED_NUMBER, _LABEL_BEFORE = _labelled_number()
# A table's header cell that names a phone (lowered; `_` and `-` read as spaces): `Phone`, `Mobile Phone`,
# `Phone 1 - Value`, `Tel.`, `电话号码`. Not the label words that head other columns (`Text`, `Calls`, `iPhone`).
_HEADER_WORD = re.compile(  # no look-behind first: re skips in C to where a word starts (`_header_words` checks)
    "(?:(?:phones?|telephone|tel|mobile|mob|cell|cellphone|fax|whatsapp|handy|telefon|telefono|teléfono|"
    "telefone|móvil|movil|celular|msisdn|gsm)(?:numbers?|no|nr|num)?|contact ?(?:number|no|nr|num|#))(?![a-z])|"
    "电话|電話|手机|手機|携帯|전화|휴대폰|телефон|мобильн".encode()
)


def _header_words(lowered: bytes, start: int = 0, end: int | None = None):
    """_HEADER_WORD's matches in lowered text that start a word."""
    for hit in _HEADER_WORD.finditer(lowered, start, len(lowered) if end is None else end):
        if hit.start() == 0 or not lowered[hit.start() - 1 : hit.start()].isalpha():
            yield hit


_DELIMITERS = (b",", b"\t", b"|", b";")
_MOST_TABLE_ROWS = 200
_TABLE_SEARCH = 256 * 1024
# Bytes from a label to its number, but for the blanks or leader right before the number; where a question's `?`
# stands between them, more (its 80 characters and the answer's turn). Looking 128 back from every number cost a
# tenth more on prose.
_LOOK_BACK = 80
_LOOK_BACK_OVER_A_QUESTION = 128


def _near(data: bytes, label: int, lead: int) -> bool:
    """The label at data[label] is near enough the number whose leader starts at data[lead] (`_LOOK_BACK`)."""
    return lead - label <= _LOOK_BACK or (lead - label <= _LOOK_BACK_OVER_A_QUESTION and b"?" in data[label:lead])


# A run's first number: its digits in groups parted by 1-2 separators, as many as `_first_listed` reads
_FIRST_NUMBER = re.compile(  # an ordinal, a dash and a space before it are not its digits (`Phone 2 - 4155550100`)
    f"[^0-9]*(?:[0-9]{{1,2}} ?-[ \\t]+(?=[0-9]))?([0-9](?:{_NUMBER_SEPARATORS}{{0,2}}[0-9]){{0,{_MOST_LISTED_DIGITS - 1}}})".encode()
)
_MOST_LOOK_BACKS = 200  # then one pass over the rest of the text for the labels: a table of numbers stays cheap
_WHOLE_WORDS = frozenset(word.encode() for word in _PHONE_WORDS_WHOLE)
_COMPOUND = re.compile(rb"(?:number|no|nr|num)(?![a-z])")  # mobileNumber, telNo (`phone_numbers: 1482736` counts)
_COMPOUND_ENDS = frozenset(b"telefon handy".split())  # labels that end German compounds
_GLUED_NUMBER = re.compile(rb"[0-9]{10}")  # `tel4155550100`: a number glued to its label
_GLUED_LABELS = frozenset(b"tel phone fax mobile mob cell call".split())
_FILE_TAIL = re.compile(rb":? *[0-9]")
_GLUED_ORDINAL = re.compile(_ORDINAL.encode())


# Words that label a phone number, written glued to it in signatures and on cards (TEL03-1234-5678, FAX+81-…).
_PHONE_LABELS = frozenset(b"tel tell fax phone mobile mob cell tfn tlf telefon telephone telefono call".split())
_TRAILING_WORD = re.compile(rb"(?<![A-Za-z0-9])[A-Za-z]{3,9}\Z")


def _labelled(lead: bytes) -> bool:
    """The letters glued before a number (or its +) are a phone label, not part of a code (UUID, hash)."""
    word = _TRAILING_WORD.search(lead)
    return word is not None and word.group().lower() in _PHONE_LABELS


def _glued(scan: Scan, cluster: Cluster, labelled: bool = False) -> bool:
    """Digits glued to a letter (a534-4977-83f5 in a UUID) or part of a time (08:49:05.375892): no national
    number. A label's colon is fine (Tel:020 7946 0958), and so is a label glued on (TEL03-1234-5678); after a
    label or a number in groups, so is the next field's name glued after (`_NEXT_FIELD`: `(415) 555-0100Email:`;
    not `08012345678Date:` with no label, an id as likely as a number)."""
    before, after = scan.before(cluster, 2), scan.after(cluster, 2)
    # a time's minutes or seconds are two digits (`Phone2:4155550100` is an ordinal's colon)
    minutes = (
        before[-1:] == b":" and before[:1].isdigit() and not scan.data[cluster.start + 2 : cluster.start + 3].isdigit()
    )
    time = minutes or after[:1] == b":" and after[1:].isdigit()
    extension = after[:1] in (b"x", b"X") and after[1:].isdigit()  # 201-555-0123x45
    glued_before = before[-1:].isalpha() and not _labelled(scan.before(cluster, 10))
    grouped = labelled or len(cluster.head[0]) > 1
    extension = extension or grouped and _NEXT_FIELD_GLUED.match(scan.data, cluster.end) is not None
    return glued_before or (after[:1].isalpha() and not extension) or time


def _after_a_label(scan: Scan) -> bool:
    """7 to 15 digits right after a phone label, in any grouping (`phone: 4155550100`, `mobile 98765 43210`), unless
    they are a date, an IP address or a decimal, or glued to a letter.

    Numbers are rarer than the letters labels start with: each of the first 200 numbers of 7-15 digits (the first
    of each run the clusters were found in: no digit stands between a label and its number) is looked back from,
    and after that one pass over the rest of the text finds its labels and what follows them."""
    data = scan.data
    looked = 0
    for run_start, run_end in scan.numeric_runs:
        run = _FIRST_NUMBER.match(data, run_start, run_end)
        raw = _first_listed(whole := run.group(1))
        if raw is None:
            continue
        if (looked := looked + 1) > _MOST_LOOK_BACKS:
            return _labelled_from(scan, run_start)
        start = run.start(1)
        lead = _before_leader(data, start)
        before = max(0, lead - _LOOK_BACK)
        if data.find(b"?", max(0, lead - _LOOK_BACK_OVER_A_QUESTION), lead) != -1:
            before = max(0, lead - _LOOK_BACK_OVER_A_QUESTION)
        window = data[before:start].lower()
        pos = 0
        while (label := _LABEL_BEFORE.search(window, pos)) is not None:
            pos = label.start() + 1  # a label refused (`tel` in `hotel`) may hide one inside it
            if not _near(data, before + label.start(1), lead):
                continue
            if _whole(data, before + label.start(1), before + label.end(1)):
                if _sheet_like(label.group(1), window[label.end(1) :], raw is not whole) or not _asked_of_the_reader(
                    window, label.start(1), label.end(1)
                ):
                    pos = label.end(1)  # a later label may name it (`cell phone number?` over `Speaker 2: …`)
                    continue
                if _a_phone_number(scan, start, start + len(raw), raw, label.group(1) in _VERBS):
                    return True
                break
    return False


# A question's words after its label ask the reader for their number when they speak to them: `What's the best phone
# number to reach you?`, `… your …`; `How many mobile users signed up last month?` over a tool's count does not
_QUESTION_SENTENCE = 300  # bytes before a label its question's sentence is read back over
_SECOND_PERSON = re.compile(rb"(?<![a-z])(?:you|your|yours|yourself|ur|u)(?![a-z])")
_WORD = re.compile(rb"[a-z']+")
_FILLER_BYTES = frozenset(word.encode() for word in _FILLER_WORDS)


def _asked_of_the_reader(lowered: bytes, label_start: int, label_end: int, end: int | None = None) -> bool:
    """Where a question's `?` stands between the label at lowered[label_start:label_end] and `end` (the number; the
    end of `lowered` by default) with words of its own between (not only fillers: `phone number?`), the question
    speaks to the reader (`_SECOND_PERSON`, in its sentence from its start)."""
    asked = lowered.find(b"?", label_end, len(lowered) if end is None else end)
    if asked == -1 or all(word in _FILLER_BYTES for word in _WORD.findall(lowered, label_end, asked)):
        return True
    if lowered[asked - 3 : asked] in _TOWARDS:  # `What mobile number should we send the OTP to?`: a destination
        return True
    back = max(0, label_start - _QUESTION_SENTENCE)
    sentence = max(back - 1, *(lowered.rfind(mark, back, label_start) for mark in (b".", b"!", b"?", b"\n"))) + 1
    return _SECOND_PERSON.search(lowered, sentence, asked) is not None


_TOWARDS = frozenset((b" to", b" at"))  # a question that ends so asks where to send or call: the number is the answer


def _in_a_phone_column(scan: Scan) -> bool:
    """A number in a table pasted as text whose header names a phone column (`Name,Phone` then
    `Ann Lee,4155550100`; TSV, `;`, Markdown's `| Ann | 4155550100 |`; Outlook's `Mobile Phone`, `电话号码`): the
    label and its number are rows apart, too far for the look-back. From each of the first 200 numbers (as the
    look-back reads them), up over the lines with as many delimiters as its own (prose stops there: its lines
    differ) to the first, or the second where a line of prose above happens to match; after them, one pass over
    the rest of the text for header cells, and the rows under each."""
    data = scan.data
    delimiters = [d for d in _DELIMITERS if d in data]
    if not delimiters:
        return False
    tops: dict[tuple[bytes, int, int], int] = {}  # (delimiter, width, a row's start) -> its table's first line
    for looked, (run_start, run_end) in enumerate(scan.numeric_runs):
        if looked == _MOST_LOOK_BACKS:
            top = min(tops.values(), default=run_start)
            return _phone_columns_from(scan, min(top, data.rfind(b"\n", 0, run_start) + 1))
        run_start = _FIRST_NUMBER.match(data, run_start, run_end).start(1)  # past a tab or a line break before it
        line_start = data.rfind(b"\n", 0, run_start) + 1
        if line_start == 0:
            continue  # on the first line: no header above it
        line_end = _line_end(data, run_end)
        above = data.rfind(b"\n", 0, line_start - 1) + 1
        if above and _RULE.fullmatch(data, above, line_start - 1):  # psql's `------+------` under its header
            above = data.rfind(b"\n", 0, above - 1) + 1
        if line_end - above > 2 * _LONGEST_ROW:
            continue  # no table row: read no further along it
        for delimiter in delimiters:
            width = _width(data, line_start, line_end, delimiter)
            if not width or _width(data, above, _line_end(data, above), delimiter) != width:
                continue  # no table row here, or not one under another (prose: its lines differ)
            top = _table_top(data, delimiter, width, above, tops)
            if top is None:
                continue  # walked far enough: the rest is `_phone_columns_from`'s
            column = _width(data, line_start, run_start, delimiter)
            second = _line_end(data, top) + 1
            header = top if _phone_header(data, top, delimiter, column) else None
            if header is None and second < line_start and _phone_header(data, second, delimiter, column):
                header = second
            if header is not None and _phone_cell(scan, line_start, delimiter, column):
                return True
    return False


def _table_top(data: bytes, delimiter: bytes, width: int, row: int, tops: dict) -> int | None:
    """The first line of the block of lines with `width` delimiters that holds the one at `row`; each line is
    walked over once for all the numbers under it (`tops`, which holds every line walked), 10,000 in all (then
    None)."""
    walked = []
    top = row
    while top > 0:
        if len(tops) + len(walked) > _MOST_TABLE_ROWS * 50:
            return None
        if (known := tops.get((delimiter, width, top))) is not None:
            top = known
            break
        higher = data.rfind(b"\n", 0, top - 1) + 1
        if higher and _RULE.fullmatch(data, higher, top - 1):  # a rule under a header (psql): part of the table
            higher = data.rfind(b"\n", 0, higher - 1) + 1
        if _width(data, higher, _line_end(data, higher), delimiter) != width:
            break
        walked.append(top)
        top = higher
    for line in walked:
        tops[(delimiter, width, line)] = top
    tops[(delimiter, width, row)] = top
    return top


def _phone_columns_from(scan: Scan, start: int) -> bool:
    """`_in_a_phone_column` from `start` on: one pass for header cells (`_HEADER_WORD`), and the rows under each
    whose next line is a row of the same width, each row read once (`scanned`), _MOST_TABLE_ROWS x 5 in all;
    headers in the next _TABLE_SEARCH bytes (a pass of re over 1 MB of delimiters or line breaks takes 60 ms). Each
    header line is laid out once per delimiter and each of its columns judged once, whatever number of header words
    it holds: a sheet of 24 lines of 511 `tel` cells each read its 4 KB line ~5 times a word (5 s for 200 KB)."""
    data = scan.data
    lowered = data.lower()
    budget = _MOST_TABLE_ROWS * 5
    scanned: dict[tuple[bytes, int, int], int] = {}  # (delimiter, width, column) -> where its rows were read to
    layouts: dict[tuple[int, bytes], list[int] | None] = {}  # (line start, delimiter) -> its cells' delimiters
    judged: set[tuple[int, bytes, int]] = set()  # (line start, delimiter, column) already read as a header cell
    lines: dict[int, tuple[int, bool]] = {}  # a header line's start -> its first row, and whether blanks align it

    def layout(line_start: int, delimiter: bytes) -> list[int] | None:
        """Where the line's delimiters outside quotes are (offsets in the line); None for a line too long."""
        key = (line_start, delimiter)
        if key not in layouts:
            line_end = _line_end(data, line_start)
            layouts[key] = _delimiters_at(data, line_start, line_end, delimiter)
        return layouts[key]

    for hit in _header_words(lowered, start, start + _TABLE_SEARCH):
        line_start = lowered.rfind(b"\n", 0, hit.start()) + 1
        line_end = _line_end(lowered, hit.end())
        if (known := lines.get(line_start)) is None:  # each header line read once, whatever words it holds
            first_row = line_end + 1
            if _RULE.fullmatch(data, first_row, _line_end(data, first_row)):  # psql's rule under its header
                first_row = _line_end(data, first_row) + 1
            known = lines[line_start] = (first_row, bool(_aligned_header_words(data, line_start, line_end)))
        first_row, aligned = known
        if aligned:  # a table aligned with blanks
            columns = frozenset(range(hit.start() - line_start, hit.end() - line_start))
            found, budget = _aligned_phone_rows(scan, columns, first_row, budget)
            if found:
                return True
        for delimiter in _DELIMITERS:
            cuts = layout(line_start, delimiter)
            if not cuts:
                continue
            row = first_row
            below = layout(row, delimiter) if row < len(data) else None
            if below is None or len(below) != len(cuts):
                continue
            column = bisect_left(cuts, hit.start() - line_start)
            if (line_start, delimiter, column) in judged:
                continue
            judged.add((line_start, delimiter, column))
            if not _phone_header(data, line_start, delimiter, column):
                continue
            width = len(cuts)
            row = max(row, scanned.get((delimiter, width, column), 0))
            while row < len(data):
                if (budget := budget - 1) < 0:
                    return False
                row_end = _line_end(data, row)
                if _width(data, row, row_end, delimiter) != width:
                    break
                if _phone_cell(scan, row, delimiter, column):
                    return True
                row = row_end + 1
            scanned[(delimiter, width, column)] = row
    return False


def _phone_header(data: bytes, line_start: int, delimiter: bytes, column: int) -> bool:
    """The line's cell in that column names a phone (`Phone`, `Mobile Phone`, `Phone_Number`, `电话号码`), and the line
    is no table of devices (`Month,Desktop,Mobile,Tablet`)."""
    line = data[line_start : _line_end(data, line_start)].lower()
    cell = _cell(data, line_start, delimiter, column)
    if cell is None or b"desktop" in line or b"tablet" in line:
        return False
    return next(_header_words(cell[1].lower().replace(b"_", b" ").replace(b"-", b" ")), None) is not None


_QUOTED = re.compile(rb'"[^"\n]*"')
_LONGEST_ROW = 4096


def _width(data: bytes, start: int, end: int, delimiter: bytes) -> int:
    """Delimiters in data[start:end] outside a CSV's quotes (`"Lee, Ann",4155550100` is two cells); -1 for a line
    too long to be a table's row."""
    if end - start > _LONGEST_ROW:
        return -1
    if data.find(b'"', start, end) < 0:
        return data.count(delimiter, start, end)
    return _QUOTED.sub(b"", data[start:end]).count(delimiter)


def _delimiters_at(data: bytes, start: int, end: int, delimiter: bytes) -> list[int] | None:
    """Offsets from `start` of the delimiters in data[start:end] outside a CSV's quotes (as `_width` counts them);
    None for a line too long to be a table's row."""
    if end - start > _LONGEST_ROW:
        return None
    line = data[start:end]
    grid = _QUOTED.sub(lambda m: b"x" * len(m.group()), line) if b'"' in line else line  # the same length
    cuts, at = [], grid.find(delimiter)
    while at != -1:
        cuts.append(at)
        at = grid.find(delimiter, at + 1)
    return cuts


def _cell(data: bytes, line_start: int, delimiter: bytes, column: int) -> tuple[int, bytes] | None:
    """(where it starts, its bytes) of the line's cell in that column, a quoted cell's delimiters not splitting it."""
    line = data[line_start : _line_end(data, line_start)]
    grid = _QUOTED.sub(lambda m: b"x" * len(m.group()), line) if b'"' in line else line  # the same length
    cells = grid.split(delimiter)
    if column >= len(cells):
        return None
    offset = sum(len(c) + 1 for c in cells[:column])
    return line_start + offset, line[offset : offset + len(cells[column])]


def _phone_cell(scan: Scan, line_start: int, delimiter: bytes, column: int) -> bool:
    """The row's cell in that column holds one number of 7-15 digits that reads as a phone number."""
    found = _cell(scan.data, line_start, delimiter, column)
    if found is None:
        return False
    offset, cell = found
    raw = cell.strip(b" \t\r+()'\"*")
    digits = len(raw) - len(raw.translate(None, _DIGITS))
    if not (_MIN_CLUSTER_DIGITS <= digits <= 15 and _NUMBER_CELL.fullmatch(raw)):
        return False
    first = offset + cell.index(raw[:1])
    return _a_phone_number(scan, first, first + len(raw), raw)


_NUMBER_CELL = re.compile(rb"[0-9](?:[ ./()-]{0,2}[0-9])*")
_RULE = re.compile(rb"[-=+| \t]*[-=][-=+| \t]*\r?")  # a table's rule: `------+------`, `====  ====`, `|---|`
_ALIGNED_LOOK_UP = 50  # lines above a row to look for its aligned table's header


def _aligned_phone_rows(scan: Scan, header: frozenset[int], row: int, budget: int) -> tuple[bool, int]:
    """Under a header word of a table aligned with blanks (the columns it covers in its line), up to 50 unbroken
    rows: a number whose columns overlap the word's that reads as a phone number; and the budget left."""
    data = scan.data
    for _ in range(_ALIGNED_LOOK_UP):
        row_end = _line_end(data, row)
        if row >= len(data) or not data[row:row_end].strip() or (budget := budget - 1) < 0:
            break
        if _aligned_line(data, row, row_end):
            for number in _ALIGNED_NUMBER.finditer(data, row, row_end):
                if _a_cell_number(number) and not header.isdisjoint(_columns(number, row)):
                    if _a_phone_number(scan, number.start(), number.end(), number.group()):
                        return True, budget
        row = row_end + 1
    return False, budget


def _a_cell_number(number: re.Match[bytes]) -> bool:
    """A table cell's number that may be a phone number: 7-15 digits."""
    return _MIN_CLUSTER_DIGITS <= len(number.group().translate(None, _SEPARATORS)) <= 15


def _columns(match: re.Match[bytes], line_start: int) -> range:
    """The columns a match spans in its line (an aligned table's: ASCII, so a column is a byte)."""
    return range(match.start() - line_start, match.end() - line_start)


def _in_an_aligned_phone_column(scan: Scan) -> bool:
    """One of the first 200 numbers of 7-15 digits in rows of a table aligned with blanks (a printed DataFrame, a
    fixed-width report: `   name       phone` over `0   Ann  4155550100`), under a header word whose columns overlap
    its own, within 50 unbroken lines above, that reads as a phone number (as a cell under a delimited table's header
    does). Each line above is read once, into the columns its header words cover; a grid of numbers is one numeric
    run, so the numbers are counted, not the runs (a 195 KB grid under lines of `phone` took 17 s)."""
    data = scan.data
    headers: dict[int, frozenset[int]] = {}  # a line's start -> the columns its header words cover (none: no header)
    rows: dict[int, bool] = {}  # a line's start -> whether it is a row of an aligned table
    examined = 0
    for run_start, run_end in scan.numeric_runs:
        for number in _ALIGNED_NUMBER.finditer(data, run_start, run_end):  # `0   1001  4155550100`: each cell
            if not _a_cell_number(number):
                continue
            line_start = data.rfind(b"\n", 0, number.start()) + 1  # a run may start with the line break before it
            if line_start == 0:
                continue  # on the first line: no header above it
            if (row := rows.get(line_start)) is None:
                row = rows[line_start] = _aligned_line(data, line_start, _line_end(data, number.end()))
            if not row:
                continue
            if (examined := examined + 1) > _MOST_LOOK_BACKS:
                return False
            columns = _columns(number, line_start)
            top = line_start
            for _ in range(_ALIGNED_LOOK_UP):
                if top == 0:
                    break  # the text's first line was the last above
                higher = data.rfind(b"\n", 0, top - 1) + 1
                if higher == top - 1 or not data[higher : top - 1].strip():
                    break  # a blank line ends the table
                if (covered := headers.get(higher)) is None:
                    spans = _aligned_header_words(data, higher, top - 1)
                    covered = headers[higher] = frozenset(c for h0, h1 in spans for c in range(h0, h1))
                if not covered.isdisjoint(columns):
                    if _a_phone_number(scan, number.start(), number.end(), number.group()):
                        return True
                    break
                top = higher
    return False


_ALIGNED_NUMBER = re.compile(rb"[0-9](?:[ ./()-]?[0-9])*")  # a cell's number: one separator at most between digits


def _aligned_line(data: bytes, start: int, end: int) -> bool:
    """A row of a table aligned with blanks: ASCII, no tab, not too long, cells parted by two blanks or more."""
    if end - start > _LONGEST_ROW or data.find(b"  ", start, end) == -1 or data.find(b"\t", start, end) != -1:
        return False  # (bytes.find first: re tried each byte of a CJK line)
    return data[start:end].isascii() and _ALIGNED_CELLS.search(data, start, end) is not None


def _aligned_header_words(data: bytes, start: int, end: int) -> list[tuple[int, int]]:
    """The columns (from the line's start) of the header words of an aligned table's header line; none for a line
    that is no such header (a rule, a table of devices: `Channel  Mobile  Desktop`)."""
    if not _aligned_line(data, start, end) or _RULE.fullmatch(data, start, end):
        return []
    line = data[start:end].lower()
    if b"desktop" in line or b"tablet" in line:
        return []
    return [hit.span() for hit in _header_words(line)]


def _line_end(data: bytes, pos: int) -> int:
    end = data.find(b"\n", pos)
    return len(data) if end < 0 else end


def _sheet_like(label: bytes, between: bytes, listed: bool) -> bool:
    """A label whose `<label> 2:`, `<label> = ` or `<label>: <numbers>` is something else (`Cell 3: 1048576 rows`,
    `iPhone 15: 5234567 units`, `cell = 12345678`, `cell: 1234567 2345678 3456789`), with an ordinal, an assignment
    or a list after it."""
    return label in _NO_ORDINAL and (listed or b"=" in between or between.translate(None, _DIGITS) != between)


def _before_leader(data: bytes, end: int) -> int:
    """Where the blanks and leader dots, underscores or dashes before data[end] start; a dot on a word's end is the
    word's (`Tel.`, `Тел.`), not the leader's."""
    while end > 0:  # in C, a page at a time: a leader may run for 100 KB (a review: 40 KB of it took 10 s)
        start = max(0, end - 4096)
        kept = len(data[start:end].rstrip(_LEADER_BYTES))
        end = start + kept
        if kept:
            break
    if data[end : end + 1] == b"." and end > 0 and (data[end - 1] >= 0x80 or data[end - 1 : end].isalpha()):
        end += 1
    return end


def _first_listed(raw: bytes) -> bytes | None:
    """The number to read after a label: all of it (7-15 digits), or the first of a list of them parted by blanks
    or a slash (`phones: 4155550100 4155550101`, `415 555 0100 415 555 0101`, `4155550100/4155550101`) where the
    first is 7-15 digits and the second 7 or more (`phone: 4155550100 4111111111111111`: a card after it); else
    None. `raw` holds at most _MOST_LISTED_DIGITS digits: enough for two."""
    digits = len(raw) - len(raw.translate(None, _DIGITS))
    if digits <= 15:
        return raw if digits >= _MIN_CLUSTER_DIGITS else None
    first, count, pos = b"", 0, 0
    for run in _DIGIT_RUN.finditer(raw):
        gap = raw[pos : run.start()]
        if count >= _MIN_CLUSTER_DIGITS and (b" " in gap or b"\t" in gap or b"/" in gap):
            if count > 15 or first:
                break
            first, count = raw[:pos], 0
        count += run.end() - run.start()
        pos = run.end()
    return first if first and count >= _MIN_CLUSTER_DIGITS else None


def _labelled_from(scan: Scan, start: int) -> bool:
    """`_after_a_label` from `start` on, one pass over the text for the labels."""
    data = scan.data
    lowered = data.lower()
    pos = max(0, start - _LOOK_BACK_OVER_A_QUESTION)
    while (found := _LABELLED_NUMBER.search(lowered, pos)) is not None:
        pos = found.start() + 1  # a label refused (`tel` in `hotel`) may hide one inside it
        number_start = found.start(2)
        raw = _first_listed(whole := found.group(2))
        if raw is None or not _whole(data, found.start(1), found.end(1)):
            continue
        if _sheet_like(found.group(1), lowered[found.end(1) : number_start], raw is not whole) or not (
            _asked_of_the_reader(lowered, found.start(1), found.end(1), number_start)
        ):
            pos = found.end(1)  # nor `phone` inside `iPhone 15:`: the look-back reads the first label only
            continue
        if (
            _near(data, found.start(1), _before_leader(data, number_start))  # both paths find the same
            and _in_a_run(data, number_start, number_start + len(raw))
            and _a_phone_number(scan, number_start, number_start + len(raw), raw, found.group(1) in _VERBS)
        ):
            return True
    return False


_NUMERIC_BYTES = frozenset(_DIGITS + _SEPARATORS)


def _in_a_run(data: bytes, start: int, end: int) -> bool:
    """The number is in a run of _MIN_RUN digits and separators, as every number the look-back reads (`phone:5550100`
    is found by neither)."""
    size = end - start
    while size < _MIN_RUN and start > 0 and data[start - 1] in _NUMERIC_BYTES:
        start, size = start - 1, size + 1
    while size < _MIN_RUN and end < len(data) and data[end] in _NUMERIC_BYTES:
        end, size = end + 1, size + 1
    return size >= _MIN_RUN


def _whole(data: bytes, start: int, end: int) -> bool:
    """The label at data[start:end] is a word of its own where it must be: `tel`, not `hotel` or `tell`; `cell`,
    not `cell_id`; but `userMobile`, `customer_phone`, `mobile_number`, `mobileNumber`, `telNo`. A Cyrillic one is
    no part of a longer word either (`тел ` in `хотел `, `мобильн` in `автомобильный`)."""
    if data[start:end] == b"pH":  # acidity, not a phone
        return False
    word = data[start:end].lower()
    if data[start:end] == b"txt" and data[start - 1 : start] == b"." and _FILE_TAIL.match(data, end):
        return False  # a file's extension, the number right after it: `out.txt: 12345678 lines`
    if word[:1] >= b"\xd0" and word[:1] <= b"\xd4":  # Cyrillic: a letter before it makes it part of a word
        return not data[max(0, start - 2) : start].decode(errors="ignore").isalpha()
    if word not in _WHOLE_WORDS:
        return True
    left = data[start - 1 : start] if start else b""
    if left.isalnum() and not (left.islower() and data[start : start + 1].isupper()):  # camelCase starts a part
        # but a German compound ends in one (`Mobiltelefon`, `Diensthandy`, `Kontakttelefon`)
        if not (left.isalpha() and word in _COMPOUND_ENDS):
            return False
    after = data[end : end + 1]
    if after.isdigit():  # an ordinal glued on (`Phone2:`, `tel1)`), or the number itself (`tel4155550100`)
        glued = word in _GLUED_LABELS and not left.isalnum() and _GLUED_NUMBER.match(data, end) is not None
        return glued or _GLUED_ORDINAL.match(data, end) is not None
    if after == b"_":
        return _COMPOUND.match(data[end + 1 : end + 9].lower()) is not None
    return not after.isalnum() or _COMPOUND.match(data[end : end + 8].lower()) is not None


# What a count is of: after a label's number, it was no phone number (`the function was called 12345678 times`).
_COUNTED = re.compile(
    rb" ?(?:times|rows|tokens|bytes|lines|items|units|records|entries|users|numbers|seconds|secs|calls|"
    rb"requests|words|chars|characters|pages|files|points|steps|samples)(?![A-Za-z:.])"
)
# Labels that are verbs: what follows them may be a count (`the function was called 12345678 times`).
_VERBS = frozenset(
    b"call calling called callback dial dialed dialled dialing dialling sms txt texted texting phoned rang".split()
)


def _a_phone_number(scan: Scan, start: int, end: int, raw: bytes, after_a_verb: bool = False) -> bool:
    """What follows a label is a phone number: not a date, an address, a decimal, a version, a year range, a list
    (`11/12/13/14`), an amount (`1 200 000`, `10000000`), digits one by one, or digits glued to a letter."""
    groups, gaps = tuple(_DIGIT_RUN.findall(raw)), tuple(_GAP.findall(raw))
    years = len(groups) == 2 and all(len(g) == 4 and g[:2] in (b"19", b"20") for g in groups)
    version = gaps[0] == b"." and len(groups[0]) == 1 and len(groups) >= 3 if gaps else False
    amount = raw.endswith(b"00000") or (len(groups) > 2 and groups[-1] == b"000" and len(set(gaps)) == 1)
    listed = sum(gap == b"/" for gap in gaps) >= 2 or sum(len(g) == 1 for g in groups) >= 5
    decimal = len(groups) == 2 and gaps[0] == b"."
    counted = after_a_verb and _COUNTED.match(scan.data, end) is not None  # `called 12345678 times`
    return not (
        counted
        or years
        or version
        or amount
        or listed
        or decimal
        or _glued(scan, _Span(start, end), labelled=True)
        or _looks_like_date(groups, gaps)
        or _dotted_quad(groups, gaps)
    )


class _Span:
    """Where a number is, as `Scan.before` and `Scan.after` read it."""

    __slots__ = ("start", "end")

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end


def _three_x_x(groups: tuple[bytes, ...], gaps: tuple[bytes, ...]) -> bool:
    if len(groups[0]) != 3 or groups[0][:1] == b"0" or not all(2 <= len(g) <= 4 for g in groups[1:]):
        return False
    if not all(len(gap.strip(b" ")) <= 1 for gap in gaps):
        return False
    return not (all(len(g) == 3 for g in groups) and groups[-1] == groups[-2] == b"000")  # 250 000 000


def _dotted_quad(groups: tuple[bytes, ...], gaps: tuple[bytes, ...]) -> bool:
    """An IPv4 address: 172.16.254.10 (no leading zeros: 06.12.34.56 is a French phone number)."""
    octets_ok = all(len(g) <= 3 and int(g) <= 255 and (g == b"0" or g[:1] != b"0") for g in groups[:4])
    return len(groups) >= 4 and gaps[:3] == (b".", b".", b".") and octets_ok and gaps[3:4] != (b".",)


def _unbroken_trunk_number(digits: bytes) -> bool:
    """0612345678, 07700900123: a trunk 0, then 9-10 digits, written without a break (an ISBN-10 is not one); an
    Indonesian mobile runs to 12-13 (081234567890)."""
    if len(digits) in (12, 13):
        return digits[:2] == b"08" and digits[2:3] != b"0"
    return 10 <= len(digits) <= 11 and digits[:1] == b"0" and digits[1:2] != b"0" and not isbn.is_valid(digits.decode())


def _tails(scan: Scan, cluster: Cluster) -> Iterator[Cluster]:
    """The cluster from a later group on, where a phone number may start after another number: after a line
    break (the end of one message or prompt and the start of the next), after a space where the number's own
    groups are parted otherwise (`94105 415-555-0100`, `Step 3. 020 7946 0958`), or after a short lead where
    they are parted by the same space (`Suite 100 212 555 0100`). Not inside one number grouped evenly
    (`4548 0361 7856 6448`: a lead of four digits, or an identifier's, `DE15 0653 …`, glued to letters)."""
    groups, gaps = cluster.head
    if not gaps:
        return
    glued = scan.before(cluster).isalpha()  # an identifier's digits (DE15 0653 …, v1.2.3): no short lead
    runs = list(islice(_DIGIT_RUN.finditer(cluster.raw), len(groups)))
    starts, end = [run.start() for run in runs], runs[-1].end()  # the head only: a long cluster is not copied
    lead = 0
    for i, gap in enumerate(gaps, start=1):
        lead += len(groups[i - 1])
        spaced = b" " in gap or b"\t" in gap
        even = i < len(gaps) and gaps[i] == gap
        if b"\n" in gap or b"\r" in gap or (spaced and (not even or (lead <= _MAX_LEAD_DIGITS_EVEN and not glued))):
            yield Cluster(cluster.start + starts[i], cluster.start + end, cluster.raw[starts[i] : end])


_MAX_LEAD_DIGITS_EVEN = 3  # a room, a step, a suite before a number parted by the same spaces as its groups
_DIGIT_RUN = re.compile(rb"[0-9]+")


def has_phone(scan: Scan) -> bool:
    """International (+CC, 00CC, tel:), Chinese mobiles, and national numbers in an unambiguous shape, also
    after another number."""
    return (
        any(
            _international(scan, c)
            or _chinese_mobile(c)
            or _national(scan, c)
            or any(_national(scan, t) or _international(scan, t) for t in _tails(scan, c))
            for c in scan.clusters
        )
        or _after_a_label(scan)
        or _in_a_phone_column(scan)
        or _in_an_aligned_phone_column(scan)
    )


# -- Chinese resident ID -----------------------------------------------------------------------------


def cn_id_ok(number: str | bytes) -> bool:
    """Mainland China resident ID (GB 11643): a province, a real birth date and the MOD 11-2 check character.

    The county is not looked up: python-stdnum's table would refuse IDs of counties renamed since.
    """
    number = (number.decode() if isinstance(number, bytes) else number).upper()
    if len(number) != 18 or not number[:17].isdigit() or number[:2].encode() not in _CN_PROVINCES:
        return False
    if not ("01" <= number[10:12] <= "12" and "01" <= number[12:14] <= "31"):
        return False  # cheap refusals first; python-stdnum checks the calendar below
    if ric.calc_check_digit(number) != number[17]:
        return False
    try:
        born = ric.get_birth_date(number)
    except Exception:  # noqa: BLE001 - stdnum raises its own ValidationError subclasses
        return False
    return 1900 <= born.year <= date.today().year


def has_cn_id(scan: Scan) -> bool:
    for cluster in scan.clusters:
        if len(cluster.digits) < 17:
            continue
        tail = scan.after(cluster, 2)
        check_x = tail[:1] in (b"X", b"x") and (
            not _is_alnum(tail[1:2]) or _NEXT_FIELD_GLUED.match(scan.data, cluster.end + 1) is not None  # `…002XName:`
        )
        digits, offsets = cluster.digits, cluster.offsets
        for i, j in cluster.windows(17, 18):
            number = digits[offsets[i] : offsets[j]]
            if len(number) == 17 and not (check_x and j == cluster.num_groups):
                continue
            if cn_id_ok(number if len(number) == 18 else number + b"X"):
                return True
    return False


# -- IBAN --------------------------------------------------------------------------------------------


def iban_ok(candidate: str | bytes) -> bool:
    """The registry's structure and the IBAN's own mod-97 check. A bank's national check digits (Belgium,
    Spain, Norway, ...) are not checked: a mistyped account number is still someone's account."""
    compact = (candidate.decode() if isinstance(candidate, bytes) else candidate).upper()
    compact = "".join(compact.split()).replace("-", "").replace(".", "")
    if not compact.isalnum() or int((compact[4:] + compact[:4]).translate(_IBAN_LETTER_VALUES)) % 97 != 1:
        return False  # the cheap check first: python-stdnum's costs 30 times more
    try:
        stdnum_iban.validate(compact, check_country=False)
    except Exception:  # noqa: BLE001 - stdnum raises its own ValidationError subclasses
        return False
    return True


def has_iban(scan: Scan) -> bool:
    """Any country of the IBAN registry, any case, spaces, dashes or dots between characters."""
    data = scan.data
    for hit in _WORD_START_AADD.finditer(b"x" + data.translate(_ALNUM)):  # x: a word boundary before the text
        start = hit.start()  # where the word starts in data (the x before it is one byte ahead)
        pattern = _IBAN_BY_COUNTRY.get(data[start : start + 2].upper())
        match = pattern.match(data, start) if pattern is not None else None
        if match is not None and iban_ok(match.group()):
            return True
    return False


# -- US Social Security numbers ----------------------------------------------------------------------

# A number the SSA could have issued: no area 000, 666 or 900-999 (where ITINs are), no group 00, no serial 0000.
# Each part is refused by a look-behind once its digits are read, so a pattern starts with a class re skips to in C.
_SSN_AREA = rb"[0-8][0-9]{2}(?<!000)(?<!666)"
_SSN_GROUP = rb"[0-9]{2}(?<!00)"
_SSN_SERIAL = rb"[0-9]{4}(?<!0000)"
_SSN_END = rb"(?![0-9A-Za-z]|[-./][0-9])"  # no letter or digit after it, nor another group (`…-6789-01`, `….6789.5`)
# 3-2-4 parted alike twice by a dash, ` - ` or a space: an SSN with no label. The first byte is the one before the
# number: neither a letter nor a digit, nor a dash, dot or slash glued to one (`ID-123-45-6789`, `1.123-45-6789`).
# Parted by spaces, it is no part of a row of space-parted numbers (`1 2 123 45 6789`, `123 45 6789 10`), but may
# follow a lone number of 1-3 digits, as a phone number may (`Room 12 123 45 6789`): not one of 4 digits or more,
# one glued to a letter (`a12`), or one after another number and its gap.
_SSN_SPACED = rb"[0-9]{3} [0-9]{2} [0-9]{4}"
_SSN_IN_A_ROW = rb"(?<![0-9]{4} %s)" % _SSN_SPACED + b"".join(
    rb"(?<!%s[0-9]{%d} %s)" % (before, lead, _SSN_SPACED)
    for lead in (1, 2, 3)
    for before in (b"[A-Za-z]", b"[0-9][ ./-]")
)
_SSN_GROUPED = re.compile(
    rb"[^0-9A-Za-z](?<![0-9A-Za-z][-./])" + _SSN_AREA + rb"(?:(?P<dash> - |-)|(?P<space> ))" + _SSN_GROUP
    + rb"(?(dash)(?P=dash)| )" + _SSN_SERIAL + rb"(?:" + _SSN_END + rb"|(?=[A-Za-z]))" + rb"(?(space)"
    + _SSN_IN_A_ROW + rb"(?! [0-9]))"
)  # fmt: skip  # a letter after it: the next field's name only (`_grouped_ssn_in`)
# The SSN a label makes plain: 9 digits unbroken, or 3-2-4 parted alike twice by one separator (`123.45.6789`). The
# first byte is the one before it, no digit: a label may be glued on (`SSN123456789`, `SSN-123-45-6789`). Every SSN
# _SSN_GROUPED finds is one of these too.
# A letter may follow it where it is the next field's name, glued on as text copied out of a PDF runs fields together
# (`SSN: 123-45-6789DOB: …`): the byte after the number is all the search sees, and `_field_glued_after` reads on.
_SSN_DIGITS = _SSN_AREA + rb"(?P<gap> - |[ ./-]|)" + _SSN_GROUP + rb"(?P=gap)" + _SSN_SERIAL
_SSN_NUMBER = _SSN_DIGITS + rb"(?:" + _SSN_END + rb"|(?=[A-Za-z]))"  # a letter after it: `_field_glued_after` then
_SSN_SHAPED = re.compile(rb"[^0-9]" + _SSN_NUMBER)
_SSN_GAPS = frozenset((b"-", b" - ", b" "))  # _SSN_GROUPED's


def _either_case(words: str) -> str:
    """A regex for `words` (lower case) on text with only ASCII lower-cased: each non-ASCII letter read in either case
    (`s(?:é|É)curit(?:é|É) sociale` reads `SÉCURITÉ SOCIALE`). Lowering every non-ASCII letter of a text instead
    cost ~0.1 s a megabyte of Cyrillic."""
    return "".join(
        f"(?:{c}|{c.upper()})" if not c.isascii() and len(c.upper()) == 1 and c.upper() != c else re.escape(c)
        for c in words
    )


# The labels, on text with ASCII lower-cased: `SSN`, `S.S.N.`, `SS#`, `social security`, `soc. sec.`, a possessive
# `social` said as the number (`my social is`, `her social:`; not `my social media`), Spanish forms'
# `seguro social`, the German, French, Russian and Arabic words for it (in either case), and Chinese, Japanese and
# Korean names of the US number. Then up to 12 of: a transcript's turn (_QUESTION_TURN), a run of punctuation and
# blanks (`: `, ` #: `, `": "`, a form's leader dots), an HTML tag (`</td><td>`), `number`, `no`, `is`, an answer's
# `sure`, `it's`, or a few non-ASCII characters (a full-width colon, `码：`, `是`); or, in one sentence (no `.`,
# `;` or line break), up to 24 of those and words (_SSN_WORD: `SSN on file is`, `als SSN ist`, `SSN on my W-2 is`),
# within _SSN_LOOK bytes. Each run and word is taken whole, so a label with no number after it is given up in linear
# time.
_SSN_LABEL = (
    "(?:ssns?|s\\.s\\.n\\.?|ss ?#|ss (?:no\\.?|number)(?![a-z])|social[\\s_-]{0,3}sec(?:urity)?\\.?|"
    "(?<![a-z])(?:my|his|her|your|their|our) social(?=[ \\t]*(?:[:#=]|(?:is|was|number|no)(?![a-z])))|"
    "soc\\.?[\\s_-]{0,3}(?:sec\\.?(?![a-z])|security[\\s_-]{0,3}(?:number|num|no|#)(?![a-z]))|"
    "seguro social|sozialversicherungsnummer|"
    + _either_case("s\u00e9curit\u00e9 sociale")
    + "|"
    + _either_case("социального страхования")
    + "|"
    "رقم الضمان الاجتماعي|社会安全号|社會安全號|社会安全码|社會安全碼|社会保障号|社會保障號|社保号|社保號|社会保障番号|"
    "ソ-シャル(?:\\.|・)?セキュリティ-?(?:\\.|・)?(?:番号|ナンバ-?)|사회 ?보장 ?번호)"
).encode()
_SSN_LOOK = 120  # bytes from a label to its number (or from the number to a label after it), but for a leader
_SSN_FILLER = rb"[\s:#=._\"'>/|*()\[\]{}`,;?!&-]"  # `SSN? 123456789` (a bot's question), `SSN,123456789` (CSV)
_SSN_FILLER_IN_A_SENTENCE = rb"[ \t:#=_\"'<>/|*()\[\]{}`,?!&-]"
# In a sentence: a whole word of letters, digits and hyphens with a letter in it (`W-2`), not the end of one glued to
# a label (`ssnfoo`) nor one that takes in a number of 5 digits or more (`US-123456789`: the number is read); a number
# of 1-4 digits, not a group of one (`(9 digits)`, `1099`, not the `123` of `123/45/6789`); an abbreviation's dot
# (`Mr.`, `Jr.`, `No.`)
_SSN_WORD = (
    rb"(?<![a-z0-9])(?:(?:mr|mrs|ms|dr|jr|sr|st|no|nr|inc|co|ltd|vs|jan|feb|mar|apr|jun|jul|aug|sep|sept|oct|nov|dec)\."
    rb"|(?=[a-z0-9-]{0,23}[a-z])(?:(?![0-9]{5})[a-z0-9-]){1,24}|[0-9]{1,4}(?![./-][0-9]))(?![a-z0-9])"
)  # fmt: skip
_SSN_NON_ASCII = rb"[\x80-\xff]{1,36}(?![\x80-\xff])"  # up to 12 CJK characters (`，我记得是`), taken whole
# `ssn count was 123456789`, `SSN total: 123456789`: a number of SSNs, not one
_SSN_COUNTED = (
    rb"(?!" + _SSN_FILLER_IN_A_SENTENCE + rb"*(?:counts?|totals?|sum|length|digits|rows|records|entries)(?![a-z]))"
)
# A number that is something else's: an id noun right before it (`ticket 123456789`, `Employee ID: …`, `ZIP code …`,
# `EIN is …`, `user_id = …`) but for one an SSN label names a moment before (`SSN on the account: …`, `SSN/EIN: …`,
# `SSN or Member ID: …`, `ssn_id: …`); or a unit or count right after it (`123456789 rows`, `… ms`, `… beneficiaries`;
# `Ms. Doe` is a name)
_ANOTHER_NUMBER_BEFORE = re.compile(
    rb"(?<![a-z0-9])(?:ticket|invoice|order|case|ein(?:[ \t]+(?:is|was))?|zip|zip code|postal code|account|acct|phone|"
    rb"tel|fax|ref|reference|issue|bug|pr|build|job|tracking|claim|serial|sku|part|item|version|port|pid|uid|routing|"
    rb"user|application|commit|mrn|[a-z]+_id|(?:employee|user|customer|member|order|account|student|record|row|"
    rb"request|session|transaction|medicare|patient)[ _-]?id)(?:[ \t]*(?:#|no\.?|nr\.?|number|num|=|:|-))*[ \t]*\Z"
)  # fmt: skip
_NAMED_BY_A_LABEL = re.compile(
    _SSN_LABEL + rb"(?:[ \t/_()&,-]|(?<![a-z])(?:or|and|for|on|of|the|this|that|your|my|his|her|their|our|a|an|its|"
    rb"number|num|no)(?![a-z]))*\Z"
)  # fmt: skip
_ANOTHER_NUMBER_AFTER = re.compile(
    rb"[ \t]*(?:(?i:rows|bytes|seconds|records|entries|values|items|users|people|times|accounts|beneficiaries|"
    rb"distinct|dollars|usd|euros?|eur|calls|requests|hits|visits|lookups|ns)(?![A-Za-z])|ms(?![A-Za-z])|\xe2\x82\xac)"
)  # fmt: skip
# Each branch's items are taken atomically (a look-ahead's match, then a back-reference to it: Python 3.10 has no
# possessive quantifiers), so a label before many words gives them up in one pass, not once per count of them
_SSN_BETWEEN = (
    rb"(?:(?=(?P<tight>(?:" + _QUESTION_TURN.encode() + rb"|" + _SSN_FILLER + rb"+(?!" + _SSN_FILLER + rb")|"
    rb"</?[a-z]{1,6}>|(?:number|num|nr|no|is|es|el|it's|it|its|s|sure|yes|yeah|ok|okay|please|pls|uh|um|of course)"
    rb"(?![a-z])|" + _SSN_NON_ASCII + rb"|" + _QUESTION_ANSWERED.encode() + rb"){0,12}))(?P=tight)|" + _SSN_COUNTED
    + rb"(?=(?P<words>(?:" + _SSN_FILLER_IN_A_SENTENCE + rb"+(?!" + _SSN_FILLER_IN_A_SENTENCE + rb")|" + _SSN_WORD
    + rb"|" + _SSN_NON_ASCII + rb"){0,24}))(?P=words)[.]?)"
)  # fmt: skip
_SSN_LABEL_BEFORE = re.compile(_SSN_LABEL + _SSN_BETWEEN + rb"\Z")
# The one pass after many numbers: what _ssn_label_before finds, a leader before the number included (up to 200)
_SSN_LABELLED = re.compile(_SSN_LABEL + _SSN_BETWEEN + rb"[\s._-]{0,200}(?P<number>" + _SSN_NUMBER + rb")")
# A label after the number, in the same sentence: `123456789 is my SSN`, `… (the social security number from the
# form)`, `…是我的社会安全号码`, or `123456789` then `that is my SSN` in the next message (a line break right after the
# number). Words, blanks and punctuation but a sentence's end (`.`, `;`) between, within _SSN_LOOK bytes; a
# non-ASCII run before the label is read at any length up to 36 bytes (`是我的`). Not after a decimal's or a time's
# dot (`0.123456789 ssn`, `12:00:00.123456789 INFO ssn-validator`).
# Each item taken atomically, as in _SSN_BETWEEN: a hyphen is a word's or a gap, and reading each both ways before a
# label that never comes doubled the time with each one (a review: 26 of `a-` after a number took 5.7 s)
_SSN_AFTER = (
    rb"(?:[ \t]*\r?\n(?![ \t]*\r?\n))?(?:(?=(?P<item>" + _SSN_FILLER_IN_A_SENTENCE + rb"+(?!"
    + _SSN_FILLER_IN_A_SENTENCE + rb")|" + _SSN_WORD + rb"|" + _SSN_NON_ASCII + rb"))(?P=item)){0,24}?"
    rb"[\x80-\xff]{0,36}?"
)  # fmt: skip
_SSN_LABEL_AFTER = re.compile(_SSN_AFTER + rb"(?P<label>" + _SSN_LABEL + rb")")
_NOT_A_FRACTION = rb"(?<![0-9][.,:])"
_SSN_FOLLOWED = re.compile(
    rb"(?<![0-9])" + _NOT_A_FRACTION + rb"(?P<number>" + _SSN_DIGITS + _SSN_END + rb")" + _SSN_AFTER + rb"(?P<label>"
    + _SSN_LABEL + rb")"
)  # fmt: skip
_SSN_ANY_LABEL = re.compile(_SSN_LABEL)


# An SSN split over two messages or lines (request_text joins messages with a line break, which parts digit groups as
# a space does): `123-45-` then `6789`, `123-45` then `6789`, `123` then `45-6789`. A line break stands for a gap where
# the other gap is a dash (three lines of 3, 2 and 4 digits are a column of numbers); beside a space, or in nine
# digits broken once, near a label (`SSN: 123 45` then `6789`, `SSN: 12345` then `6789`: `100 10` then `1000` with
# none is a coding problem's sample input). A label glued on (`SSN123-45` then `6789`) is read too.
_SSN_BROKEN_GAP = rb"(?P<%s>(?: ?-)? ?\r?\n ?(?:- ?)?| - |-| )"
_SSN_BROKEN = re.compile(
    rb"[^0-9]" + _SSN_AREA + _SSN_BROKEN_GAP % b"first" + _SSN_GROUP
    + _SSN_BROKEN_GAP % b"second" + _SSN_SERIAL + _SSN_END
)  # fmt: skip
_GLUED_BEFORE = re.compile(rb"[\x00-\xff]?[A-Za-z]\Z|[0-9A-Za-z][-./]\Z")  # letter, or one and `-./`, right before
_SSN_BROKEN_PLAIN = re.compile(rb"[^0-9](?P<head>[0-9]{1,8})\r?\n(?P<tail>[0-9]{1,8})(?![0-9A-Za-z])")
_SSN_PLAIN = re.compile(_SSN_AREA + _SSN_GROUP + _SSN_SERIAL)


def _ssn_broken(scan: Scan, padded: bytes, start: int, end: int) -> bool:
    """An SSN in run [start, end) of `padded` broken by a line break (positions as in has_ssn). Labels are looked
    back for from the first _MOST_LOOK_BACKS nine digits broken so (a numeric table's rows end and start so)."""
    for found in _SSN_BROKEN.finditer(padded, start, end + 2):
        gaps = found["first"] + found["second"]
        if b"\n" not in gaps:  # the forms has_ssn reads without a line break
            continue
        glued = _GLUED_BEFORE.match(padded, max(0, found.start() - 1), found.start() + 1)  # `SSN123-45`, `No.123-45`
        if (not glued and b"-" in gaps) or _ssn_broken_labelled(scan, found.start(), found.end() - 1):
            return True
    for found in _SSN_BROKEN_PLAIN.finditer(padded, start, end + 2):
        if len(found["head"]) + len(found["tail"]) == 9 and _SSN_PLAIN.fullmatch(found["head"] + found["tail"]):
            if _ssn_broken_labelled(scan, found.start(), found.end() - 1):
                return True
            if scan.broken_ssn_look_backs >= _MOST_LOOK_BACKS:
                return False
    return False


def _ssn_broken_labelled(scan: Scan, at: int, end: int) -> bool:
    """A label before the number at [at, end) in the text ([at + 1, end + 1) in has_ssn's padded copy) or after it,
    for the first _MOST_LOOK_BACKS numbers a line break parts."""
    if scan.broken_ssn_look_backs >= _MOST_LOOK_BACKS:
        return False
    scan.broken_ssn_look_backs += 1
    return _ssn_labelled(scan, at, end)


def _field_glued_after(data: bytes, start: int, end: int) -> bool:
    """Nothing glued after the number at data[start:end], or the next field's name (`_NEXT_FIELD`) with no letter,
    digit or `_` before the number (`tok_123456789XyZ8kQ`, a hash's `b123456789AbQ9…` are no SSN)."""
    if not data[end : end + 1].isalpha():
        return True
    before = data[start - 1 : start]
    return not (before.isalnum() or before == b"_") and _NEXT_FIELD_GLUED.match(data, end) is not None


def _grouped_ssn_in(padded: bytes, start: int, end: int) -> bool:
    """An SSN with no label (`_SSN_GROUPED`) in the run at padded[start + 1 : end + 1], with nothing glued after it
    but the next field's name."""
    return any(
        _field_glued_after(padded, m.start() + 1, m.end()) for m in _SSN_GROUPED.finditer(padded, start, end + 2)
    )


def has_ssn(scan: Scan) -> bool:
    """A US Social Security number the SSA could have issued: 3-2-4 with or without a label (`123-45-6789`,
    `123 45 6789`), or 9 digits in any grouping near an SSN label (`SSN: 123456789`, `SS# 123.45.6789`, `my SSN on
    file is 123456789`, `123456789 is my SSN`).

    Labels are looked back for from each of the first 200 numbers that are an SSN but for a label; after them, the
    rest of the runs are searched for the 3-2-4 form alone, and one pass over the rest of the text finds its labels
    and what follows them (a table of 9-digit ids stays cheap)."""
    if not scan.numeric_runs:  # every SSN is in one: 9 digits
        return False
    padded = b"\n" + scan.data  # each pattern reads the byte before the number: the text's first has one too
    runs = iter(scan.numeric_runs)  # padded[start]: the byte before a run; padded[end + 1]: the one after it
    looked = 0
    for start, end in runs:
        if padded.find(b"\n", start + 1, end + 1) != -1 and _ssn_broken(scan, padded, start, end):
            return True
        if _SSN_SHAPED.search(padded, start, end + 2) is None:  # most runs: dates, versions, amounts
            continue
        for number in _SSN_SHAPED.finditer(padded, start, end + 2):
            if not _field_glued_after(padded, number.start() + 1, number.end()):
                continue  # letters glued on both sides, or after it and no field's name: a token, a hash
            if number["gap"] in _SSN_GAPS and _SSN_GROUPED.match(padded, number.start(), end + 2):
                return True
            if (looked := looked + 1) > _MOST_LOOK_BACKS:
                rest = [(number.end(), end), *runs]
                if any(_grouped_ssn_in(padded, s, e) for s, e in rest):
                    return True
                broken = any(
                    padded.find(b"\n", s + 1, e + 1) != -1 and _ssn_broken(scan, padded, s, e) for s, e in rest
                )
                return broken or _ssn_labelled_from(scan, start)
            if _ssn_labelled(scan, number.start(), number.end() - 1):  # the number in data: [+ 1, ...) in padded
                return True
    return False


def _ssn_labelled(scan: Scan, start: int, end: int) -> bool:
    """The number at data[start:end] is an SSN by a label near it, or the label heads its table column, and it is not
    another thing's number."""
    data = scan.data
    if not scan.has_ssn_label or _another_number(data, start, end):
        return False
    if _ssn_label_before(data, start):
        return True
    fraction = start >= 2 and data[start - 1] in b".,:" and data[start - 2 : start - 1].isdigit()  # `0.123456789`
    return (not fraction and _ssn_label_after(data, end)) or _in_an_ssn_column(scan, start, end)


_HEADER_LOOK_BACK = 8192  # bytes above a row to look for its table's header


def _in_an_ssn_column(scan: Scan, start: int, end: int) -> bool:
    """The number is a cell of a table (CSV, TSV, `;`, Markdown) whose nearest line above with an SSN label has that
    label in the same column and as many cells: `Name,SSN` over `Ann,123456789` (a spreadsheet drops the dashes); or
    of a table aligned with blanks, the label above the number (`_aligned_under`).
    Cells are counted as the phone detector's tables count them (`_width`: a quoted cell's delimiters split none)."""
    data = scan.data
    line_start = data.rfind(b"\n", 0, start) + 1
    if line_start == 0:
        return False  # on the first line: no header above it
    above = deque(_SSN_ANY_LABEL.finditer(scan.lowered, max(0, line_start - _HEADER_LOOK_BACK), line_start - 1), 1)
    label = above[0] if above else None  # the last one: the nearest above
    if label is None or not _ssn_label_starts_a_word(data, label.start()):
        return False
    line_end, header_start = _line_end(data, end), data.rfind(b"\n", 0, label.start()) + 1
    header_end = _line_end(data, label.start())
    return any(
        (width := _width(data, line_start, line_end, d)) > 0
        and _width(data, header_start, header_end, d) == width
        and _width(data, header_start, label.start(), d) == _width(data, line_start, start, d)
        for d in _DELIMITERS
    ) or _aligned_under(data, (header_start, label.start(), label.end()), (line_start, start, end))


_ALIGNED_CELLS = re.compile(rb"[^ \t] {2,}[^ \t]")  # two cells of a table aligned with blanks


def _aligned_under(data: bytes, header: tuple[int, int, int], row: tuple[int, int, int]) -> bool:
    """A table aligned with blanks (a printed pandas DataFrame, a fixed-width report): the label's columns and the
    number's overlap (`   name        ssn` over `0   Ann  123456789`, `Name        SSN` over `Ann Lee     123456789`),
    and the header's line and the row's are each an aligned table's line (`_aligned_line`). (Each line's (start,
    cell start, cell end).)"""
    (header_start, label_start, label_end), (line_start, start, end) = header, row
    if not (
        _aligned_line(data, header_start, _line_end(data, label_end))
        and _aligned_line(data, line_start, _line_end(data, end))
    ):
        return False
    return max(label_start - header_start, start - line_start) < min(label_end - header_start, end - line_start)


def _another_number(data: bytes, start: int, end: int) -> bool:
    """An id noun right before the number (`ticket 123456789`) that no SSN label names, or a unit right after it
    (`123456789 rows`)."""
    if _ANOTHER_NUMBER_AFTER.match(data, end, end + 24):
        return True
    before = data[max(0, start - 80) : start].lower()
    noun = _ANOTHER_NUMBER_BEFORE.search(before, max(0, len(before) - 48))
    if noun is None:
        return False
    named = _SSN_ANY_LABEL.match(before, noun.start()) or _NAMED_BY_A_LABEL.search(before, 0, noun.start())
    answering = _USER_SPEAKING.fullmatch(noun.group()) and _A_QUESTIONS_TURN_ENDS.search(before, 0, noun.start())
    return named is None and not answering


# `User:` answering the line before's question (`Assistant: What's your SSN?`), a transcript's speaker, not an id noun
_USER_SPEAKING = re.compile(rb"user[ \t]*:[ \t]*")  # `User:`, not `user_id:`, `User ID:`
_A_QUESTIONS_TURN_ENDS = re.compile(("\\?" + _TURN_START + "\\Z").encode())


def _ssn_label_before(data: bytes, number_start: int) -> bool:
    """An SSN label ends within _SSN_LOOK bytes of the number, but for the blanks or leader right before it."""
    end = _before_leader(data, number_start)
    window_start = max(0, end - _SSN_LOOK)
    window = data[window_start:end].lower()
    pos = 0
    while (label := _SSN_LABEL_BEFORE.search(window, pos)) is not None:
        label_end = _SSN_ANY_LABEL.match(window, label.start()).end()
        if _ssn_label_starts_a_word(data, window_start + label.start()) and _asked_of_the_reader(
            window, label.start(), label_end
        ):
            return True
        pos = label.start() + 1  # a label refused (`ssn` in `classname`) may hide one after it
    return False


def _ssn_label_after(data: bytes, number_end: int) -> bool:
    """An SSN label starts within _SSN_LOOK bytes after the number, in its sentence."""
    found = _SSN_LABEL_AFTER.match(data[number_end : number_end + _SSN_LOOK].lower())
    return found is not None and _ssn_label_starts_a_word(data, number_end + found.start("label"))


def _ssn_labelled_from(scan: Scan, start: int) -> bool:
    """The labelled SSNs from `start` on, in one pass over the text for the labels: what `_ssn_label_before` finds,
    then, where a label is left at all, one for the numbers a label follows: what `_ssn_label_after` finds."""
    if not scan.has_ssn_label:
        return False
    data, lowered = scan.data, scan.lowered
    pos = max(0, start - _SSN_LOOK)
    while (found := _SSN_LABELLED.search(lowered, pos)) is not None:
        pos = found.start() + 1
        number_start, number_end = found.span("number")
        near = _before_leader(data, number_start) - found.start() <= _SSN_LOOK
        if (
            near
            and _field_glued_after(data, number_start, number_end)
            and _ssn_label_starts_a_word(data, found.start())
            and _asked_of_the_reader(
                lowered, found.start(), _SSN_ANY_LABEL.match(lowered, found.start()).end(), number_start
            )
            and not _another_number(data, number_start, number_end)
        ):
            return True
    if _SSN_ANY_LABEL.search(lowered, start) is None:  # a table of 9-digit ids and no label: no second pass
        return False
    if _ssn_columns_from(scan, start):
        return True
    pos = start
    while (found := _SSN_FOLLOWED.search(lowered, pos)) is not None:
        pos = found.start() + 1
        near = found.start("label") - found.end("number") <= _SSN_LOOK
        if (
            near
            and _ssn_label_starts_a_word(data, found.start("label"))
            and not _another_number(data, *found.span("number"))
        ):
            return True
    return False


def _ssn_columns_from(scan: Scan, start: int) -> bool:
    """From `start` on, what _in_an_ssn_column finds: the numbers below each label in a table's header, each looked up
    as a number is, _MOST_LOOK_BACKS of them at most, and each stretch of text searched once (a text of nothing but
    header lines searched 8 KB below each: 27 s a megabyte)."""
    data, budget, searched_to = scan.data, _MOST_LOOK_BACKS, 0
    for label in _SSN_ANY_LABEL.finditer(scan.lowered, max(0, start - _HEADER_LOOK_BACK)):
        line_end = data.find(b"\n", label.end())
        if line_end == -1 or line_end + _HEADER_LOOK_BACK <= searched_to:
            continue
        header = data[data.rfind(b"\n", 0, label.start()) + 1 : line_end]
        if not any(d in header for d in _DELIMITERS) and not _ALIGNED_CELLS.search(header):
            continue
        for number in _SSN_SHAPED.finditer(data, max(line_end, searched_to), line_end + _HEADER_LOOK_BACK):
            number_start, number_end = number.start() + 1, number.end()
            if not _field_glued_after(data, number_start, number_end):
                continue  # a token's or a hash's cell (`tok_a1b2…`, `734829164xQz9`): not counted either
            if (budget := budget - 1) < 0:
                return False
            if number_end > start and not _another_number(data, number_start, number_end):
                if _in_an_ssn_column(scan, number_start, number_end):
                    return True
        searched_to = line_end + _HEADER_LOOK_BACK
    return False


def _ssn_label_starts_a_word(data: bytes, start: int) -> bool:
    """`ssn`, not the letters in `classname`; but a camelCase word's part (`userSSN`) or after `_` (`customer_ssn`)."""
    left = data[start - 1 : start] if start else b""
    if not (left.isalnum() and data[start : start + 1].isalpha()):
        return True
    return left.islower() and data[start : start + 1].isupper()


DETECTORS: dict[str, Callable[[Scan], bool]] = {
    "email": has_email,
    "phone": has_phone,
    "credit-card": has_credit_card,
    "cn-id": has_cn_id,
    "iban": has_iban,
    "ssn": has_ssn,
}


def detect(text: str | Scan, names: list[str] | tuple[str, ...]) -> list[str]:
    """The names of the detectors that fire on text, in the order given. Where Latin, Greek or Cyrillic letters meet
    in a word, the text is also read with its lookalikes drawn as Latin letters (`ЅЅN: …`, `рhone: …`) and as the
    word's own script (`Teлефон: …`); subtitles (SRT, WebVTT) are also read without their cues' numbers and times,
    a voice tag as a speaker (`subtitle_reading`); and what fires on any reading fires."""
    scan = text if isinstance(text, Scan) else Scan(text)
    fired = [name for name in names if DETECTORS[name](scan)]
    if len(fired) < len(names):
        for variant in (*lookalike_readings(scan.data), subtitle_reading(scan.data)):
            if variant is None:
                continue
            other = Scan.normalized(variant)
            fired = [name for name in names if name in fired or DETECTORS[name](other)]
            if len(fired) == len(names):
                break
    return fired
