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
  phone and ID detectors;
- decides alone: no detector suppresses another.

Checksums and country tables come from python-stdnum (IBAN registry, Chinese
resident ID; its Luhn is the oracle of the fast one here, in the tests) and
phonenumbers (country calling codes). docs/security.md says what is detected
and what is not promised.
"""

import re
from bisect import bisect_left, bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date
from functools import cached_property
from itertools import accumulate, compress, islice, repeat
from operator import ge, sub

from phonenumbers.phonenumberutil import COUNTRY_CODE_TO_REGION_CODE
from stdnum import iban as stdnum_iban
from stdnum import numdb
from stdnum.cn import ric

from tandem_sdk.normalize import normalize

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


_NUMERIC = _class_map((_DIGITS + _SEPARATORS, b"1"), other=b"0")
_DIGITS_AND_SPACE = _class_map((_DIGITS, b"d"), other=b" ")
_DIGIT_OR_SEPARATOR = _class_map((_DIGITS, b"d"), other=b"s")
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
_EMAIL_DOMAIN = re.compile(rb"@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.([A-Za-z]{2,24})(?![A-Za-z0-9-])")
_NOT_TLDS = frozenset(b"png jpg jpeg gif svg webp bmp ico tif tiff heic".split())  # icon@2x.png


def _iban_patterns() -> dict[bytes, re.Pattern[bytes]]:
    """Each country's IBAN shape from the registry (python-stdnum's copy), any case, 0-2 separators between
    characters: DE89 3704 0044 0532 0130 00 is `DE`, two check digits, then 18 digits."""
    classes = {"n": "[0-9]", "a": "[A-Za-z]", "c": "[A-Za-z0-9]"}
    patterns = {}
    for _, country, _, props, _ in numdb.get("iban").prefixes:
        bban = "".join(
            f"(?:[ .\\-]{{0,2}}{classes[kind]}){{{count}}}"
            for count, kind in re.findall(r"([0-9]+)!([nac])", props.get("bban", ""))
        )
        patterns[country.encode()] = re.compile(f"[A-Za-z]{{2}}[0-9]{{2}}{bban}(?![A-Za-z0-9])".encode())
    return patterns


_IBAN_BY_COUNTRY = _iban_patterns()
_CN_PROVINCES = frozenset(
    b"11 12 13 14 15 21 22 23 31 32 33 34 35 36 37 41 42 43 44 45 46 50 51 52 53 54 61 62 63 64 65 71 81 82 83".split()
)
_CALLING_CODES = frozenset(str(code).encode() for code in COUNTRY_CODE_TO_REGION_CODE)


def _is_alnum(byte: bytes) -> bool:
    return byte.isalnum()  # bytes.isalnum is ASCII-only; b"" is not


@dataclass(frozen=True)
class Cluster:
    """Digit groups with only separators between them: data[start:end] == raw.

    Clusters can be long (a pasted table of numbers), so everything per group is
    computed in C: the digits, the offset of each group in them. Only the first
    _MAX_GROUPS groups and the gaps between them exist as Python objects (`head`).
    """

    start: int
    end: int
    raw: bytes

    @cached_property
    def digits(self) -> bytes:
        return self.raw.translate(None, _SEPARATORS)

    @cached_property
    def offsets(self) -> list[int]:
        """offsets[i]: where group i starts in `digits`; offsets[-1] == len(digits)."""
        if max(self.lengths) < 255:
            return [0, *accumulate(self.lengths)]
        return [0, *accumulate(map(len, self.raw.translate(_DIGITS_AND_SPACE).split()))]

    @cached_property
    def lengths(self) -> bytes:
        """The length of each group, capped at 255, one byte each: shapes are found with bytes.find."""
        runs = self.raw.translate(_DIGITS_AND_SPACE).split()
        try:
            return bytes(map(len, runs))
        except ValueError:  # a group of 256 digits or more
            return bytes(map(min, map(len, runs), repeat(255)))

    @property
    def num_groups(self) -> int:
        return len(self.offsets) - 1

    def group(self, i: int) -> bytes:
        return self.digits[self.offsets[i] : self.offsets[i + 1]]

    @cached_property
    def head(self) -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
        """The first groups (at most _MAX_GROUPS) and the gaps between them: where a phone number would start."""
        groups = tuple(self.group(i) for i in range(min(_MAX_GROUPS, self.num_groups)))
        gaps = tuple(m.group() for m in islice(_GAP.finditer(self.raw), len(groups) - 1))
        return groups, gaps

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


class Scan:
    """One prompt's normalized text as bytes, and its numbers, found once for every detector."""

    def __init__(self, text: str) -> None:
        self.data = normalize(text).encode()

    @cached_property
    def clusters(self) -> list[Cluster]:
        data, found = self.data, []
        numeric = data.translate(_NUMERIC)
        pos = 0
        while (hit := numeric.find(b"1111111", pos)) != -1:  # 7 digits or separators in a row: maybe a number
            start = numeric.rfind(b"0", pos, hit) + 1 or pos
            end = numeric.find(b"0", hit)
            end = len(data) if end == -1 else end
            found += self._clusters_in(start, end)
            pos = end
        return found

    def _clusters_in(self, start: int, end: int):
        """The clusters of a run of digits and separators: parted by 5 or more separators in a row."""
        kinds = self.data[start:end].translate(_DIGIT_OR_SEPARATOR)
        pos = kinds.find(b"d")
        while pos != -1:
            gap = kinds.find(b"s" * (_MAX_GAP + 1), pos)
            last = kinds.rfind(b"d", pos, len(kinds) if gap == -1 else gap) + 1
            raw = self.data[start + pos : start + last]
            if len(raw) >= _MIN_CLUSTER_DIGITS and len(raw.translate(None, _SEPARATORS)) >= _MIN_CLUSTER_DIGITS:
                yield Cluster(start + pos, start + last, raw)
            pos = -1 if gap == -1 else kinds.find(b"d", gap)

    def before(self, cluster: Cluster, n: int = 1) -> bytes:
        return self.data[max(0, cluster.start - n) : cluster.start]

    def after(self, cluster: Cluster, n: int = 1) -> bytes:
        return self.data[cluster.end : cluster.end + n]


# -- e-mail ------------------------------------------------------------------------------------------


def has_email(scan: Scan) -> bool:
    """local@domain.tld, ASCII; the local part is any run of the characters an address may hold."""
    data = scan.data
    first = data.translate(_EMAIL_CHARS).find(b"l@l")  # an "@" between address characters
    if first == -1:
        return False
    for match in _EMAIL_DOMAIN.finditer(data, first + 1):
        at = match.start()
        if data[at - 1 : at].translate(_EMAIL_CHARS) == b"l" and match.group(1).lower() not in _NOT_TLDS:
            return True
    return False


# -- payment cards -----------------------------------------------------------------------------------


def luhn_ok(digits: bytes) -> bool:
    """The Luhn check over ASCII digits, summed in C (python-stdnum's `luhn` is the test's oracle)."""
    total = sum(digits[-1::-2].translate(_VALUE)) + sum(digits[-2::-2].translate(_DOUBLED))
    return total % 10 == 0


def card_prefix_ok(digits: bytes) -> bool:
    """Issuer ranges of the card networks (Visa, Mastercard, Amex, Discover, JCB, UnionPay, Diners,
    Maestro, Mir, RuPay, Troy), which keep random Luhn-valid numbers out."""
    two, four = int(digits[:2]), int(digits[:4])
    return (
        digits[:1] == b"4"
        or 50 <= two <= 69  # Mastercard 51-55, Maestro 50/56-69, Discover 60/64/65, UnionPay 62, RuPay 60
        or 2200 <= four <= 2204 or 2221 <= four <= 2720  # Mir, Mastercard 2-series
        or two in (30, 34, 35, 36, 37, 38, 39)  # Diners, JCB, Amex
        or two in (81, 82) or four == 9792  # UnionPay / RuPay 8-series, Troy
    )  # fmt: skip


def has_credit_card(scan: Scan) -> bool:
    """13-19 digits in any grouping, on an issuer's range, with a valid Luhn check digit."""
    for cluster in scan.clusters:
        digits, offsets = cluster.digits, cluster.offsets
        for i, j in cluster.windows(13, 19, _MAX_CARD_GROUPS):
            number = digits[offsets[i] : offsets[j]]
            if card_prefix_ok(number) and luhn_ok(number):
                return True
    return False


# -- phone numbers -----------------------------------------------------------------------------------


def _calling_code_ok(digits: bytes) -> bool:
    """Country calling codes are prefix-free: at most one of the first 1-3 digits is one."""
    return digits[:1] in _CALLING_CODES or digits[:2] in _CALLING_CODES or digits[:3] in _CALLING_CODES


def _international(scan: Scan, cluster: Cluster) -> bool:
    """+CC …, 00CC …, or a tel: URI."""
    lead = scan.before(cluster, 6).rstrip(b" ")
    if lead.lower().endswith((b"tel:", b"tel:+")):
        return True
    digits = cluster.digits
    if lead.endswith(b"+") and not _is_alnum(lead[-2:-1]):
        return any(True for _ in cluster.windows(7, 16, from_start=True)) and _calling_code_ok(digits)
    if digits.startswith(b"00") and not digits.startswith(b"000") and cluster.offsets[1] <= 5:
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
    """(555) 123-4567, (02) 1234 5678, 8 (912) 345-67-89: an area code in parentheses."""
    groups, gaps = cluster.head
    total = cluster.offsets[len(groups)]
    for k in (0, 1):
        opened = scan.before(cluster).endswith(b"(") if k == 0 else gaps[0].endswith(b"(")
        if k + 1 < len(groups) and opened and gaps[k].startswith(b")") and 2 <= len(groups[k]) <= 5:
            if (k == 0 or len(groups[0]) == 1) and 8 <= total - k <= 13:
                return True
    return False


def _national(scan: Scan, cluster: Cluster) -> bool:
    """Area code in parentheses, a trunk prefix 0 (or 8 / 1), or the 3-3-4 (NANP and alike) shape."""
    groups, gaps = cluster.head
    if len(groups) < 2 or _looks_like_date(groups, gaps) or _dotted_quad(groups, gaps):
        return False
    if _parenthesized_area(scan, cluster):
        return True
    first = groups[0]
    # trunk prefix: 020 7946 0958, 0912 345 678, 030 123456, 090-1234-5678
    if first[:1] == b"0" and first[:2] != b"00" and 2 <= len(first) <= 5 and all(len(g) >= 2 for g in groups[1:]):
        if cluster.offsets[-1] >= 9 and any(True for _ in cluster.windows(9, 12, from_start=True)):
            return True
    if first in (b"8", b"1") and len(groups) >= 3 and gaps[0].strip() in (b"", b"-") and len(groups[1]) == 3:
        groups, gaps = groups[1:], gaps[1:]  # 8 912 345-67-89, 1-800-555-0199
    # 3-x-x: 201-555-0123, 201.555.0123, 312 345 6789, 612 34 56 78 (and what follows it in the cluster)
    total = len(groups[0])
    for k in range(1, len(groups)):
        total += len(groups[k])
        if total > 11:
            break
        if total >= 9 and k >= 2 and _three_x_x(groups[: k + 1], gaps[:k]):
            return True
    return False


def _three_x_x(groups: tuple[bytes, ...], gaps: tuple[bytes, ...]) -> bool:
    if len(groups[0]) != 3 or groups[0][:1] == b"0" or not all(2 <= len(g) <= 4 for g in groups[1:]):
        return False
    if not all(len(gap.strip(b" ")) <= 1 for gap in gaps):
        return False
    return not (all(len(g) == 3 for g in groups) and groups[-1] == groups[-2] == b"000")  # 250 000 000


def _dotted_quad(groups: tuple[bytes, ...], gaps: tuple[bytes, ...]) -> bool:
    """An IPv4 address: 172.16.254.10."""
    return (
        len(groups) >= 4 and gaps[:3] == (b".", b".", b".") and all(len(g) <= 3 and int(g) <= 255 for g in groups[:4])
    )


def has_phone(scan: Scan) -> bool:
    """International (+CC, 00CC, tel:), Chinese mobiles, and national numbers in an unambiguous shape."""
    return any(_international(scan, c) or _chinese_mobile(c) or _national(scan, c) for c in scan.clusters)


# -- Chinese resident ID -----------------------------------------------------------------------------


def cn_id_ok(number: str | bytes) -> bool:
    """Mainland China resident ID (GB 11643): a province, a real birth date and the MOD 11-2 check character.

    The county is not looked up: python-stdnum's table would refuse IDs of counties renamed since.
    """
    number = (number.decode() if isinstance(number, bytes) else number).upper()
    if len(number) != 18 or not number[:17].isdigit() or number[:2].encode() not in _CN_PROVINCES:
        return False
    try:
        born = ric.get_birth_date(number)
    except Exception:  # noqa: BLE001 - stdnum raises its own ValidationError subclasses
        return False
    return 1900 <= born.year <= date.today().year and ric.calc_check_digit(number) == number[17]


def has_cn_id(scan: Scan) -> bool:
    for cluster in scan.clusters:
        if len(cluster.digits) < 17:
            continue
        tail = scan.after(cluster, 2)
        check_x = tail[:1] in (b"X", b"x") and not _is_alnum(tail[1:2])
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
    return stdnum_iban.is_valid(candidate.decode() if isinstance(candidate, bytes) else candidate)


def has_iban(scan: Scan) -> bool:
    """Any country of the IBAN registry, any case, spaces, dashes or dots between characters."""
    data = scan.data
    classes = data.translate(_ALNUM)
    pos = 0
    while (hit := classes.find(b"aadd", pos)) != -1:  # country code and check digits
        pattern = _IBAN_BY_COUNTRY.get(data[hit : hit + 2].upper())
        if pattern is not None and (hit == 0 or classes[hit - 1] == ord("x")):
            match = pattern.match(data, hit)
            if match is not None and iban_ok(match.group()):
                return True
        pos = hit + 1
    return False


DETECTORS: dict[str, Callable[[Scan], bool]] = {
    "email": has_email,
    "phone": has_phone,
    "credit-card": has_credit_card,
    "cn-id": has_cn_id,
    "iban": has_iban,
}


def detect(text: str | Scan, names: list[str] | tuple[str, ...]) -> list[str]:
    """The names of the detectors that fire on text, in the order given."""
    scan = text if isinstance(text, Scan) else Scan(text)
    return [name for name in names if DETECTORS[name](scan)]
