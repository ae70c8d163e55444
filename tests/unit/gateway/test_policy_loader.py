"""Bad policy files are refused with the file and the field named."""

import pytest

from gateway.policy.loader import PolicyError, load_policy

GOOD_POOLS = "pools: {cloud: {kind: cloud, endpoints: ['grpc://127.0.0.1:50051']}}\n"
CASES = [
    ("not yaml", "version: 1\npools: [unclosed\n", r"line 3.*not valid YAML"),
    ("a list, not a mapping", "- 1\n- 2\n", "must be a YAML mapping"),
    ("wrong version", "version: 2\n" + GOOD_POOLS + "rules: [{name: d, route: cloud}]\n", "version"),
    (
        "typo in a key",
        "version: 1\n" + GOOD_POOLS + "rules: [{name: d, route: cloud, fallbak: []}]\n",
        r"rules\.0\.fallbak",
    ),
    ("unknown pool", "version: 1\n" + GOOD_POOLS + "rules: [{name: d, route: gpu}]\n", "unknown pool 'gpu'"),
    (
        "bad endpoint",
        "version: 1\npools: {c: {kind: cloud, endpoints: ['http://x']}}\nrules: [{name: d, route: c}]\n",
        r"pools\.c\.endpoints.*grpc://host:port",
    ),
    (
        "unknown scorer",
        "version: 1\npools: {c: {kind: cloud, endpoints: ['grpc://h:1'], profile: {scorers: [{type: magic}]}}}\n"
        "rules: [{name: d, route: c}]\n",
        "unknown scorer 'magic'",
    ),
    (
        "duplicate rule names",
        "version: 1\n" + GOOD_POOLS + "rules: [{name: d, route: cloud}, {name: d, route: cloud}]\n",
        "repeated: \\['d'\\]",
    ),
    ("no rules", "version: 1\n" + GOOD_POOLS + "rules: []\n", "rules"),
    (
        "bad kind",
        "version: 1\npools: {c: {kind: gpu, endpoints: ['grpc://h:1']}}\nrules: [{name: d, route: c}]\n",
        r"pools\.c\.kind",
    ),
]


@pytest.mark.parametrize("name, text, message", CASES, ids=[c[0] for c in CASES])
def test_bad_policy_is_refused_with_a_precise_error(tmp_path, name, text, message):
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError, match=message) as err:
        load_policy(path)
    assert str(path) in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "absent.yaml")
