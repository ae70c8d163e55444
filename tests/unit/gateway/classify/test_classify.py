import pytest

from gateway.classify.features import DeviceCapability, parse_device_header
from gateway.privacy import request_tags
from serving.openai.errors import BadRequest


@pytest.mark.parametrize(
    "metadata, header, expected",
    [
        (None, None, set()),
        ("PII", None, {"pii"}),
        (["pii", "Confidential"], None, {"pii", "confidential"}),
        (None, "pii, private", {"pii", "private"}),
        ("pii", "confidential", {"pii", "confidential"}),
        ("private,PII", None, {"private", "pii"}),
        (["PII, Confidential", " private "], "Internal", {"pii", "confidential", "private", "internal"}),
        ("", " , ", set()),
    ],
)
def test_privacy_tags(metadata, header, expected):
    assert request_tags(metadata, header) == frozenset(expected)


@pytest.mark.parametrize("metadata", [3, {"a": 1}, ["pii", 2]])
def test_malformed_privacy_metadata_is_a_400(metadata):
    with pytest.raises(BadRequest, match="metadata.privacy"):
        request_tags(metadata, None)


def test_device_header():
    assert parse_device_header('{"npu": true, "ram_gb": 8, "battery": 0.5, "network": "wifi"}') == DeviceCapability(
        True, 8.0, 0.5, "wifi"
    )
    assert parse_device_header(None) is None


@pytest.mark.parametrize(
    "header, message",
    [
        ("{npu", "JSON object"),
        ("[1]", "JSON object"),
        ('{"tpu": true}', "unknown field"),
        ('{"gpu": 1}', "gpu must be true or false"),
        ('{"providers": "CPU"}', "providers must be a list"),
        ('{"npu": "yes"}', "true or false"),
        ('{"ram_gb": "lots"}', "X-Tandem-Device"),
    ],
)
def test_bad_device_header_is_a_400(header, message):
    with pytest.raises(BadRequest, match=message):
        parse_device_header(header)
