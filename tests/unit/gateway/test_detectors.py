"""PII detectors: true positives and the near-misses that must not fire."""

import pytest
from tandem_sdk.detectors import DETECTORS, cn_id_ok, detect, iban_ok, luhn_ok

CASES = {
    "email": (
        ["write to ann.lee+work@example.co.uk today", "ANN@EXAMPLE.COM", "x: bob_99@mail-server.example.org."],
        ["user at example dot com", "@handle on social", "a@b", "version 1.2@latest", "email@localhost"],
    ),
    "phone": (
        [
            "call +44 20 7946 0958",
            "(555) 123-4567 ext",
            "my number is 555-123-4567",
            "手机 13812345678",
            "+1-202-555-0143",
            "+33 1 42 68 53 00",
        ],
        [
            "on 2026-11-30 we met",
            "IP 192.168.100.200",
            "order 12345",
            "pi is 3.14159265",
            "card 4111 1111 1111 1111",
            "year 2026 and 2027",
            "version 10.2.3",
        ],
    ),
    "credit-card": (
        ["4111 1111 1111 1111", "card: 5555-5555-5555-4444", "amex 378282246310005", "4012888888881881"],
        ["4111 1111 1111 1112", "1234 5678 9012 3456", "tracking 9400111899223100001234", "0000 0000 0000 0000"],
    ),
    "cn-id": (
        ["身份证 11010519491231002X", "id 440524198001010013 ok", "310115199307071238"],
        ["11010519491231002Y", "110105194913310021", "123456789012345678", "11010519491231002", "440524188001010019"],
    ),
    "iban": (
        ["IBAN DE89 3704 0044 0532 0130 00", "GB82WEST12345698765432", "pay to FR1420041010050500013M02606"],
        ["DE89 3704 0044 0532 0130 01", "GB82WEST1234569876543", "XX00 1234", "the ABCD1234 code"],
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_true_positives(name):
    for text in CASES[name][0]:
        assert DETECTORS[name](text), f"{name} missed: {text!r}"


@pytest.mark.parametrize("name", sorted(CASES))
def test_false_positives(name):
    for text in CASES[name][1]:
        assert not DETECTORS[name](text), f"{name} fired on: {text!r}"


def test_checksums():
    assert luhn_ok("4111111111111111") and not luhn_ok("4111111111111112")
    assert cn_id_ok("11010519491231002X") and not cn_id_ok("110105194912310021")
    assert iban_ok("DE89370400440532013000") and not iban_ok("DE89370400440532013001")


def test_detect_returns_only_the_requested_detectors_that_fire():
    text = "mail ann@example.com, card 4111 1111 1111 1111"
    assert detect(text, ["email", "phone", "credit-card"]) == ["email", "credit-card"]
    assert detect(text, ["iban"]) == []
