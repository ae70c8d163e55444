"""PII detectors: find personal data in prompt text, with checksums where the format has one.

Pure Python with no dependencies beyond `re`, so the client SDK can run the
very same module on the device. Each detector has a stable name used in
policy (`privacy.detectors`) and returns whether its kind of data occurs.
"""

import re
from collections.abc import Callable
from datetime import date

_EMAIL = re.compile(r"(?<![\w.+-])[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,24}(?![\w-])")
# A run of digits with the separators people write numbers with; checked further below.
_DIGIT_RUN = re.compile(r"(?<![\w+])\+?\(?\d[\d \t().-]{5,}\d(?![\w])")
_CN_MOBILE = re.compile(r"(?<!\d)1[3-9]\d{9}(?!\d)")
_DATE = re.compile(r"^\d{4}[-/.]\d{1,2}[-/.]\d{1,2}$|^\d{1,2}[-/.]\d{1,2}[-/.]\d{4}$")
_DOTTED_QUAD = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_CARD = re.compile(r"(?<![\d-])\d(?:[ -]?\d){12,18}(?![\d-])")
_CN_ID = re.compile(r"(?<![\dA-Za-z])\d{17}[\dXx](?![\dA-Za-z])")
_IBAN = re.compile(r"(?<![A-Za-z0-9])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![A-Za-z0-9])")
_CN_ID_WEIGHTS = (7, 9, 10, 5, 8, 4, 2, 1, 6, 3, 7, 9, 10, 5, 8, 4, 2)
_CN_ID_CHECK = "10X98765432"
# Lengths of IBANs by country (ISO 13616 registry, the common ones); others: 15 to 34.
_IBAN_LENGTHS = {
    "AT": 20, "BE": 16, "CH": 21, "CZ": 24, "DE": 22, "DK": 18, "ES": 24, "FI": 18, "FR": 27, "GB": 22,
    "IE": 22, "IT": 27, "LU": 20, "NL": 18, "NO": 15, "PL": 28, "PT": 25, "SE": 24,
}  # fmt: skip


def luhn_ok(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch)
        if i % 2 == 1:
            d = d * 2 - 9 if d > 4 else d * 2
        total += d
    return total % 10 == 0


def _card_prefix_ok(digits: str) -> bool:
    """Issuer ranges of the major networks, which keep random Luhn-valid numbers out."""
    two, four = int(digits[:2]), int(digits[:4])
    return (
        digits[0] == "4"  # Visa
        or 51 <= two <= 55 or 2221 <= four <= 2720  # Mastercard
        or two in (34, 37)  # Amex
        or digits.startswith(("6011", "65", "644", "645", "646", "647", "648", "649"))  # Discover
        or 3528 <= four <= 3589  # JCB
        or two == 62  # UnionPay
        or two in (36, 38, 30)  # Diners
    )  # fmt: skip


def has_email(text: str) -> bool:
    return _EMAIL.search(text) is not None


def has_phone(text: str) -> bool:
    if _CN_MOBILE.search(text):
        return True
    for match in _DIGIT_RUN.finditer(text):
        candidate = match.group().strip()
        digits = re.sub(r"\D", "", candidate)
        if not 8 <= len(digits) <= 15 or _DATE.match(candidate) or _DOTTED_QUAD.match(candidate):
            continue
        has_separator_groups = len(re.findall(r"\d+", candidate)) >= 3
        if candidate.startswith(("+", "(")) or has_separator_groups:
            if not (13 <= len(digits) <= 19 and luhn_ok(digits) and _card_prefix_ok(digits)):
                return True
    return False


def has_credit_card(text: str) -> bool:
    for match in _CARD.finditer(text):
        digits = re.sub(r"\D", "", match.group())
        if 13 <= len(digits) <= 19 and _card_prefix_ok(digits) and luhn_ok(digits):
            return True
    return False


def cn_id_ok(number: str) -> bool:
    """Mainland China resident ID (GB 11643): a valid birth date and the ISO 7064 MOD 11-2 check character."""
    number = number.upper()
    try:
        born = date(int(number[6:10]), int(number[10:12]), int(number[12:14]))
    except ValueError:
        return False
    if not 1900 <= born.year <= date.today().year:
        return False
    total = sum(int(d) * w for d, w in zip(number[:17], _CN_ID_WEIGHTS, strict=True))
    return _CN_ID_CHECK[total % 11] == number[17]


def has_cn_id(text: str) -> bool:
    return any(cn_id_ok(m.group()) for m in _CN_ID.finditer(text))


def iban_ok(iban: str) -> bool:
    iban = iban.replace(" ", "")
    if len(iban) != _IBAN_LENGTHS.get(iban[:2], len(iban)) or not 15 <= len(iban) <= 34:
        return False
    rearranged = iban[4:] + iban[:4]
    return int("".join(str(int(ch, 36)) for ch in rearranged)) % 97 == 1


def has_iban(text: str) -> bool:
    return any(iban_ok(m.group()) for m in _IBAN.finditer(text))


DETECTORS: dict[str, Callable[[str], bool]] = {
    "email": has_email,
    "phone": has_phone,
    "credit-card": has_credit_card,
    "cn-id": has_cn_id,
    "iban": has_iban,
}


def detect(text: str, names: list[str] | tuple[str, ...]) -> list[str]:
    """The names of the detectors that fire on text, in the order given."""
    return [name for name in names if DETECTORS[name](text)]
