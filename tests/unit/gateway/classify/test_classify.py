import json

import pytest

from gateway.classify.features import DeviceCapability, parse_device_header
from gateway.policy.loader import load_policy, parse_policy
from gateway.privacy import UNKNOWN_TAG, request_tags
from serving.openai.errors import BadRequest
from tests.stack import DEFAULT_POLICY

POLICY = load_policy(DEFAULT_POLICY)
WITH_INTERNAL = parse_policy(
    DEFAULT_POLICY.read_text().replace("  detected_tag: pii", "  detected_tag: pii\n  known_tags: [Internal]"), "test"
)


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
        # as people type them: full-width letters and commas, an ideographic comma, invisible characters, NBSP
        ("ｐｒｉｖａｔｅ", None, {"private"}),
        ("ＰＩＩ，confidential", None, {"pii", "confidential"}),
        (None, "internal、private", {"internal", "private"}),
        ("pri\u200bvate", None, {"private"}),
        ("\u00a0pii\u3000", None, {"pii"}),
        ("\ufeffCONFIDENTIAL", None, {"confidential"}),
        # a Turkish locale's upper case: `İ` lower-cases to `i` and a dot, read again (it was a 400, `pri̇vate`)
        ("PR\u0130VATE", "P\u0130\u0130", {"private", "pii"}),
    ],
)
def test_privacy_tags(metadata, header, expected):
    assert request_tags(WITH_INTERNAL, metadata, header) == frozenset(expected)


@pytest.mark.parametrize("metadata", [3, {"a": 1}, ["pii", 2]])
def test_malformed_privacy_metadata_is_a_400(metadata):
    with pytest.raises(BadRequest, match="metadata.privacy"):
        request_tags(POLICY, metadata, None)


@pytest.mark.parametrize(
    "metadata, header, where, message",
    [
        ("privat", None, "metadata.privacy", "'privat' (did you mean 'private'?)"),
        (["pii", "confidental"], None, "metadata.privacy", "'confidental' (did you mean 'confidential'?)"),
        (None, "pi", "X-Tandem-Privacy", "'pi' (did you mean 'pii'?)"),
        (None, "private,internal", "X-Tandem-Privacy", "'internal';"),  # known only where the policy says so
        ("pri vate", None, "metadata.privacy", "'pri vate' (did you mean 'private'?)"),
        ("public", None, "metadata.privacy", "'public';"),
        ("private\ud800", None, "metadata.privacy", "'private?' (did you mean 'private'?)"),
        ([f"t{i}" for i in range(30)], None, "metadata.privacy", "'t0', 't1', 't10' and 27 more;"),
        ("x" * 64, None, "metadata.privacy", "'xxxxxxxxxxxxxxxxxxxx…'"),
        ("ｐｒｉｖａｔ", "pii", "metadata.privacy", "'privat' (did you mean 'private'?)"),
    ],
)
def test_a_tag_the_policy_does_not_know_is_a_400_naming_where_it_came_from(metadata, header, where, message):
    """A misspelled private tag must not route as an untagged request would (to the cloud)."""
    with pytest.raises(BadRequest) as caught:
        request_tags(POLICY, metadata, header)
    error = caught.value
    assert error.param == where and error.code == UNKNOWN_TAG and error.message.startswith(where)
    advice = "Correct the tag" if "did you mean" in message else "privacy.known_tags"
    assert message in error.message and advice in error.message


def test_an_accent_typed_as_a_separate_mark_reads_as_the_accented_letter():
    """macOS and some keyboards send "é" as "e" and a combining accent (NFD); a policy written elsewhere has the
    one character (NFC). They are the same tag, in the policy and in a request, both ways round."""
    composed = parse_policy(DEFAULT_POLICY.read_text().replace("  detected_tag: pii", "  detected_tag: pii\n"
                                                               "  known_tags: [Données]"), "test")  # fmt: skip
    decomposed = parse_policy(DEFAULT_POLICY.read_text().replace("  detected_tag: pii", "  detected_tag: pii\n"
                                                                 "  known_tags: [Donne\u0301es]"), "test")  # fmt: skip
    for policy in (composed, decomposed):
        assert request_tags(policy, "DONNE\u0301ES", None) == {"donn\u00e9es"}
        assert request_tags(policy, None, "donn\u00e9es, pii") == {"donn\u00e9es", "pii"}


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
        # out of range, or said twice (an adversarial review: each was taken as it came)
        ('{"ram_gb": 1e999}', "ram_gb must be from 0 to"),
        ('{"ram_gb": -1}', "ram_gb must be from 0 to"),
        ('{"battery": 2}', "battery must be from 0 to 1"),
        ('{"battery": true}', "battery must be a number"),
        ('{"cores": 4.5}', "cores must be a whole number"),
        ('{"cores": 0}', "cores must be from 1"),
        ('{"network": ""}', "network must be a short name"),
        ('{"network": 5}', "network must be a short name"),
        ('{"npu": true, "npu": false}', "names 'npu' twice"),
        # text the decision log would have carried whole (a review: a 1 MB header, a card number in a provider)
        ('{"providers": ["CPUExecutionProvider", "card 4111111111111111"]}', "execution providers' names"),
        ('{"providers": ["CPU\\u001b[31m"]}', "execution providers' names"),
        ('{"providers": [' + ",".join(['"P"'] * 33) + "]}", "at most 32"),
        ('{"network": "wifi\\nforged"}', "network must be a short name"),
        ('{"providers": ["' + "P" * 5000 + '"]}', "at most 4,096"),
    ],
)
def test_bad_device_header_is_a_400(header, message):
    with pytest.raises(BadRequest, match=message):
        parse_device_header(header)


def test_an_apps_own_network_words_are_read():
    """The SDK documents `network` as the app's own words: `cellular (5G)` was refused for a moment (a review)."""
    for words in ("cellular (5G)", "wi-fi/metered", "802.11ac", "4G LTE"):
        assert parse_device_header(json.dumps({"network": words})).network == words


def test_a_refused_device_header_is_not_repeated_whole():
    with pytest.raises(BadRequest) as refused:
        parse_device_header('{"' + "k" * 3000 + '": 1, "npu": "' + "v" * 1000 + '"}')
    assert len(refused.value.message) < 300
    with pytest.raises(BadRequest) as refused:
        parse_device_header('{"npu": "' + "v" * 3000 + '"}')
    assert len(refused.value.message) < 300
