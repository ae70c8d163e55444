"""Bad policy files are refused with the file, the line and the field named."""

import os
import re

import pytest

from gateway.policy.loader import PolicyError, load_policy, parse_policy

POOLS = "pools:\n  edge: {kind: edge, endpoints: ['grpc://127.0.0.1:1']}\n  cloud: {kind: cloud, endpoints: ['grpc://h:2']}\n"
PRIVATE_FIRST = "  - {name: private, match: {privacy: [private, pii, confidential]}, route: edge}\n"
CASES = [
    (
        "grpc endpoint without a port",
        "version: 1\npools:\n  c: {kind: edge, endpoints: ['grpc://x'], plaintext_grpc: true}\nrules: [{name: d, route: c}]\n",
        "endpoint 'grpc://x' needs a port",
        3,
    ),
    # (name, text, expected message, expected line)
    ("not yaml", "version: 1\npools: [unclosed\n", "not valid YAML", 3),
    ("a list, not a mapping", "- 1\n- 2\n", "must be a YAML mapping", None),
    ("wrong version", "version: 2\n" + POOLS + "rules: [{name: d, route: edge}]\n", "version: Input should be 1", 1),
    (
        "typo in a key",
        "version: 1\n" + POOLS + "rules:\n" + PRIVATE_FIRST + "  - name: d\n    route: cloud\n    fallbak: []\n",
        "rules.1.fallbak: Extra inputs are not permitted",
        9,
    ),
    (
        "unknown pool",
        "version: 1\n" + POOLS + "rules:\n  - name: d\n    route: gpu\n",
        "rules.0.route: rule 'd' routes to unknown pool 'gpu'",
        7,
    ),
    (
        "bad endpoint",
        "version: 1\npools:\n  c: {kind: edge, endpoints: ['ftp://x']}\nrules: [{name: d, route: c}]\n",
        "pools.c.endpoints: Value error, endpoint 'ftp://x' must look like grpc://host:port, dns://name:port or http(s)://host[:port]",
        3,
    ),
    (
        "unknown scorer",
        "version: 1\npools:\n  c:\n    kind: edge\n    endpoints: ['grpc://127.0.0.1:1']\n    profile: {scorers: [{type: magic}]}\n"
        "rules: [{name: d, route: c}]\n",
        "unknown scorer 'magic'",
        6,
    ),
    (
        "unknown detector",
        "version: 1\nprivacy: {detectors: [email, dna]}\n" + POOLS + "rules: [{name: d, route: edge}]\n",
        "privacy.detectors: Value error, unknown detector(s) ['dna']",
        2,
    ),
    (
        "duplicate rule names",
        "version: 1\n" + POOLS + "rules:\n  - {name: d, route: edge}\n  - {name: d, route: edge}\n",
        "rules.1.name: rule name 'd' is used twice",
        7,
    ),
    ("no rules", "version: 1\n" + POOLS + "rules: []\n", "rules: List should have at least 1 item", 5),
    (
        "bad kind",
        "version: 1\npools:\n  c: {kind: gpu, endpoints: ['grpc://h:1']}\nrules: [{name: d, route: c}]\n",
        "pools.c.kind: Input should be 'edge' or 'cloud'",
        3,
    ),
    (
        "one endpoint, two kinds",
        "version: 1\npools:\n  e: {kind: edge, endpoints: ['grpc://h:1'], plaintext_grpc: true}\n  c: {kind: cloud, endpoints: ['grpc://h:1']}\n"
        "rules:\n" + PRIVATE_FIRST.replace("edge}", "e}") + "  - {name: d, route: c}\n",
        "pools.c.endpoints.0: grpc://h:1 is in edge pool 'e' and cloud pool 'c'",
        4,
    ),
    (
        "catch-all to cloud with no private rule before it",
        "version: 1\n" + POOLS + "rules:\n  - {name: default, route: cloud}\n",
        "rules.0: rule 'default' could receive requests tagged ['confidential', 'pii', 'private']",
        6,
    ),
    (
        "private rule falls back to cloud",
        "version: 1\n" + POOLS + "rules:\n  - {name: p, match: {privacy: [pii]}, route: edge, fallback: [cloud]}\n",
        "rules.0: rule 'p' could receive requests tagged ['pii'] (privacy.never_leave_device) and names cloud pool(s) ['cloud']",
        6,
    ),
    (
        "private rule with extra conditions does not catch every tagged request",
        "version: 1\n"
        + POOLS
        + "rules:\n  - {name: p, match: {privacy: [private, pii, confidential], tenant: [acme]}, route: edge}\n"
        "  - {name: default, route: cloud}\n",
        "rules.1: rule 'default' could receive requests tagged",
        7,
    ),
    (
        "a tag with a comma can never match (a request's tags are split at commas)",
        "version: 1\n" + POOLS + "rules:\n  - {name: p, match: {privacy: ['pii,private']}, route: edge}\n",
        "privacy tag 'pii,private' must be one non-empty tag, without commas",
        6,
    ),
    (
        "a known tag that reads like a never-leave tag: a typo of 'private' would be accepted as it",
        "version: 1\nprivacy: {known_tags: [internal, privat]}\n" + POOLS + "rules: [{name: d, route: edge}]\n",
        "privacy.known_tags.1: tag 'privat' reads like never-leave tag 'private'",
        2,
    ),
    (
        "a rule to the cloud on a tag that reads like a never-leave tag",
        "version: 1\n" + POOLS + "rules:\n" + PRIVATE_FIRST + "  - {name: c, match: {privacy: [phi]}, route: cloud}\n",
        "rules.1.match.privacy.0: tag 'phi' reads like never-leave tag 'pii'",
        7,
    ),
    (
        "an empty tag",
        "version: 1\nprivacy: {known_tags: [' ']}\n" + POOLS + "rules: [{name: d, route: edge}]\n",
        "privacy.known_tags.0: Value error, privacy tag ' ' must be one non-empty tag",
        2,
    ),
    *(
        (
            f"one server in an edge and a cloud pool, spelt {edge} and {cloud}",
            f"version: 1\npools:\n  edge: {{kind: edge, endpoints: ['{edge}'], plaintext_grpc: true}}\n"
            f"  cloud: {{kind: cloud, endpoints: ['{cloud}']}}\nrules:\n"
            + PRIVATE_FIRST
            + "  - {name: d, route: cloud}\n",
            f"pools.cloud.endpoints.0: {cloud} is in edge pool 'edge' (as {edge}) and cloud pool 'cloud'",
            4,
        )
        for edge, cloud in [
            ("http://localhost:8000/v1", "http://127.0.0.1:8000"),
            ("http://LOCALHOST:80/", "https://127.0.0.2:80"),
            ("grpc://[::1]:50051", "grpc://localhost:50051"),
            ("grpc://10.0.0.7:80", "http://10.0.0.7"),
        ]
    ),
    (
        "an HTTP server on another host in an edge pool, not said to be trusted",
        "version: 1\npools:\n  edge: {kind: edge, endpoints: ['https://api.openai.com']}\n"
        "  cloud: {kind: cloud, endpoints: ['grpc://h:2']}\nrules:\n" + PRIVATE_FIRST + "  - {name: d, route: cloud}\n",
        "pools.edge.endpoints.0: https://api.openai.com is an HTTP server on another host in an edge pool",
        3,
    ),
    (
        "a rule on another tag that names a cloud pool, before the private rule",
        "version: 1\n"
        + POOLS
        + "rules:\n  - {name: vip, match: {privacy: [vip]}, route: cloud}\n"
        + PRIVATE_FIRST
        + "  - {name: d, route: cloud}\n",
        "rules.0: rule 'vip' could receive requests tagged ['vip'] and ['confidential', 'pii', 'private'] at once",
        6,
    ),
    *(
        (
            f"an address spelt otherwise: {host}",
            f"version: 1\npools:\n  c: {{kind: cloud, endpoints: ['http://{host}:8000']}}\nrules: [{{name: d, route: c}}]\n",
            said,
            3,
        )
        for host, said in [
            ("127.1", "write the address as 127.0.0.1"),
            ("0x7f.0.0.1", "write the address as 127.0.0.1"),
            ("2130706433", "write the address as 127.0.0.1"),
            ("0177.0.0.1", "write the address as 127.0.0.1"),
            ("10.7", "write the address as 10.0.0.7"),
            ("[::ffff:127.0.0.1]", "write the address as 127.0.0.1"),
            ("[::0:1]", "write the address as ::1"),
            ("0.0.0.0", "no address to dial"),
            ("0", "no address to dial"),
            ("[::]", "no address to dial"),
            ("127\u30020\u30020\u30021", "write it in ASCII"),
        ]
    ),
    (
        "a name under .localhost in an edge pool is no loopback (a resolver may send it to DNS)",
        "version: 1\npools:\n  edge: {kind: edge, endpoints: ['http://evil.localhost:8000']}\n"
        "  cloud: {kind: cloud, endpoints: ['grpc://h:2']}\nrules:\n" + PRIVATE_FIRST + "  - {name: d, route: cloud}\n",
        "is an HTTP server on another host in an edge pool",
        3,
    ),
    (
        "a number past a float's range",
        "version: 1\npools:\n  c:\n    kind: edge\n    endpoints: ['grpc://127.0.0.1:1']\n"
        "    profile: {scorers: [{type: queue-depth, weight: 1.0e+400}]}\nrules: [{name: d, route: c}]\n",
        "pools.c.profile.scorers.0.weight: not a finite number",
        6,
    ),
    (
        "a number YAML 1.1 reads as text (no point in it)",
        "version: 1\npools:\n  c:\n    kind: edge\n    endpoints: ['grpc://127.0.0.1:1']\n"
        "    profile: {scorers: [{type: queue-depth, weight: 1e400}]}\nrules: [{name: d, route: c}]\n",
        "pools.c.profile.scorers.0.weight: write a number: YAML 1.1 reads 1e400 as text (write 1.0e-3",
        6,
    ),
    (
        "credentials in an endpoint",
        "version: 1\npools:\n  c: {kind: cloud, endpoints: ['http://svc:S3cret@10.0.0.7:8000']}\n"
        "rules: [{name: d, route: c}]\n",
        "credentials in an endpoint would be shown",
        3,
    ),
    *(
        (
            f"a picker's type that is no name: {value or 'empty'}",
            "version: 1\npools:\n  c:\n    kind: edge\n    endpoints: ['grpc://127.0.0.1:1']\n"
            f"    profile: {{picker: {{type: {value}}}}}\nrules: [{{name: d, route: c}}]\n",
            "pools.c.profile.picker.type: a picker's `type` is one name of ['cache-affinity', 'max-score']",
            6,
        )
        for value in ("", "5", "{a: 1}")
    ),
    (
        "a scorer's type that is a list",
        "version: 1\npools:\n  c:\n    kind: edge\n    endpoints: ['grpc://127.0.0.1:1']\n"
        "    profile: {scorers: [{type: [queue-depth]}]}\nrules: [{name: d, route: c}]\n",
        "pools.c.profile.scorers.0.type: a scorer's `type` is one name of",
        6,
    ),
    (
        "a value PyYAML's constructor fails on",
        "version: !!timestamp 1\n" + POOLS + "rules: [{name: d, route: edge}]\n",
        "not valid YAML (column 10): cannot read '1' as !!timestamp",
        1,
    ),
    (
        "a number of more digits than Python reads",
        "version: 1\n"
        + POOLS
        + "rules:\n"
        + PRIVATE_FIRST
        + f"  - {{name: d, match: {{priority: {{min: {'9' * 5000}}}}}, route: edge}}\n",
        "a number of 5000 digits; no setting takes one of over 100",
        7,
    ),
    (
        "a quoted number of more digits than Python reads",
        "version: 1\n"
        + POOLS
        + "rules:\n"
        + PRIVATE_FIRST
        + f"  - {{name: d, match: {{priority: {{min: '{'9' * 5000}'}}}}, route: edge}}\n",
        "rules.1.match.priority.min: write a whole number, without quotes (got '9999",
        7,
    ),
    *(
        (
            f"only true and false are truths: {field}: {value}",
            "version: 1\npools:\n"
            f"  edge: {{kind: edge, endpoints: ['grpc://h:1'], {field}: {value}}}\n"
            "  cloud: {kind: cloud, endpoints: ['grpc://h:2']}\nrules:\n"
            + PRIVATE_FIRST
            + "  - {name: d, route: cloud}\n",
            f"pools.edge.{field}: write true or false, without quotes (got {said})",
            3,
        )
        for field, value, said in [
            ("trust_remote_http", "'yes'", "'yes'"),
            ("trust_remote_http", '"1"', "'1'"),
            ("trust_remote_http", "1", "1"),
            ("send_cache_salt", "'true'", "'true'"),
        ]
    ),
    *(
        (
            f"a match written loosely: {match}",
            "version: 1\n" + POOLS + "rules:\n" + PRIVATE_FIRST + f"  - {{name: d, match: {match}, route: edge}}\n",
            said,
            7,
        )
        for match, said in [
            ("{device: {npu: 'off'}}", "rules.1.match.device.npu: write true or false, without quotes (got 'off')"),
            ("{device: {npu: 1}}", "rules.1.match.device.npu: write true or false, without quotes (got 1)"),
            ("{device: {min_battery: true}}", "rules.1.match.device.min_battery: write a number, without quotes"),
            (
                "{device: {min_ram_gb: '8'}}",
                "rules.1.match.device.min_ram_gb: write a number, without quotes (got '8')",
            ),
            ("{prompt_tokens: {min: '5'}}", "rules.1.match.prompt_tokens.min: write a whole number, without quotes"),
            ("{prompt_tokens: {max: 512.0}}", "rules.1.match.prompt_tokens.max: write a whole number, without quotes"),
            ("{prompt_tokens: {min: 600, max: 512}}", "rules.1.match.prompt_tokens.min: min 600 is above max 512"),
            ("{max_tokens: {min: 2, max: 1}}", "rules.1.match.max_tokens.min: min 2 is above max 1"),
        ]
    ),
    *(
        (
            f"version: {value}",
            f"version: {value}\n" + POOLS + "rules: [{name: d, route: edge}]\n",
            f"version: write the number 1, the only version (got {said})",
            1,
        )
        for value, said in [("true", "True"), ("1.0", "1.0")]
    ),
    (
        "a plugin's setting written loosely",
        "version: 1\npools:\n  c:\n    kind: edge\n    endpoints: ['grpc://127.0.0.1:1']\n"
        "    profile: {scorers: [{type: prefix-hit, min_blocks: '2'}]}\nrules: [{name: d, route: c}]\n",
        "pools.c.profile.scorers.0.min_blocks: write a whole number, without quotes (got '2')",
        6,
    ),
    *(
        (
            f"one server listed twice in a pool: {first} and {again}",
            f"version: 1\npools:\n  c: {{kind: cloud, endpoints: ['{first}', 'grpc://h:2', '{again}']}}\n"
            "rules: [{name: d, route: c}]\n",
            f"pools.c.endpoints.2: {again} is listed twice in this pool{said}",
            3,
        )
        for first, again, said in [
            ("grpc://h:1", "grpc://h:1", ";"),
            ("http://localhost:8000/v1", "http://127.0.0.1:8000", " (as http://localhost:8000/v1)"),
        ]
    ),
    (
        "a port out of range",
        "version: 1\npools:\n  c: {kind: cloud, endpoints: ['grpc://h:99999']}\nrules: [{name: d, route: c}]\n",
        "Port out of range",
        3,
    ),
    # settings and matches that loaded and did nothing (a review): each is named now
    (
        "an http setting on a pool of gRPC workers",
        "version: 1\npools:\n  c: {kind: cloud, endpoints: ['grpc://h:1'], upstream_model: llama}\nrules: [{name: d, route: c}]\n",
        "pools.c.upstream_model: upstream_model is for a pool's http(s) endpoints, and this one has none",
        3,
    ),
    (
        "text prompts for a pool of gRPC workers",
        "version: 1\npools:\n  c: {kind: cloud, endpoints: ['grpc://h:1'], prompt_format: text}\nrules: [{name: d, route: c}]\n",
        "pools.c.prompt_format: prompt_format is for a pool's http(s) endpoints",
        3,
    ),
    (
        "a gRPC endpoint with a path",
        "version: 1\npools:\n  c: {kind: cloud, endpoints: ['grpc://h:1/v1?x=1']}\nrules: [{name: d, route: c}]\n",
        "endpoint 'grpc://h:1/v1?x=1': a worker is dialled at host:port alone; the rest would be dropped",
        3,
    ),
    (
        "an empty list of tenants",
        "version: 1\n" + POOLS + "rules:\n" + PRIVATE_FIRST + "  - {name: d, match: {tenant: []}, route: cloud}\n",
        "rules.1.match.tenant: an empty list matches no request, so the rule never matches",
        7,
    ),
    (
        "an empty list of networks",
        "version: 1\n"
        + POOLS
        + "rules:\n"
        + PRIVATE_FIRST
        + "  - {name: d, match: {device: {network: []}}, route: cloud}\n",
        "rules.1.match.device.network: an empty list matches no request",
        7,
    ),
    (
        "fewer than 0 tokens",
        "version: 1\n"
        + POOLS
        + "rules:\n"
        + PRIVATE_FIRST
        + "  - {name: d, match: {prompt_tokens: {max: -1}}, route: cloud}\n",
        "rules.1.match.prompt_tokens.max: max -1: no request has fewer than 0 tokens",
        7,
    ),
    (
        "a tag no request can carry",
        "version: 1\nprivacy: {known_tags: ["
        + "t" * 65
        + "]}\n"
        + POOLS
        + "rules:\n"
        + PRIVATE_FIRST
        + "  - {name: d, route: cloud}\n",
        "is 65 characters; a request's tags have at most 64",
        2,
    ),
]


@pytest.mark.parametrize("name, text, message, line", CASES, ids=[c[0] for c in CASES])
def test_bad_policy_is_refused_with_a_precise_error(tmp_path, name, text, message, line):
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    with pytest.raises(PolicyError) as err:
        load_policy(path)
    assert message in str(err.value)
    prefix = f"{path}:{line}:" if line else f"{path}:"
    assert str(err.value).startswith(prefix), str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(PolicyError, match="cannot read"):
        load_policy(tmp_path / "absent.yaml")


def test_private_rule_first_then_cloud_is_accepted(tmp_path):
    path = tmp_path / "policy.yaml"
    path.write_text("version: 1\n" + POOLS + "rules:\n" + PRIVATE_FIRST + "  - {name: default, route: cloud}\n")
    assert [r.name for r in load_policy(path).rules] == ["private", "default"]


def test_policy_tags_read_as_request_tags_do(tmp_path):
    """`PII` in the file is the tag a request sends as `pii` (or `ＰＩＩ`): it stays private, and the load-time check
    sees the same set."""
    from gateway import privacy

    path = tmp_path / "policy.yaml"
    path.write_text(
        "version: 1\nprivacy: {never_leave_device: [PII, ' Private'], detected_tag: ＰＩＩ, known_tags: [Internal]}\n"
        + POOLS
        + "rules:\n  - {name: p, match: {privacy: [Private, PII]}, route: edge}\n  - {name: d, route: cloud}\n"
    )
    policy = load_policy(path)
    assert policy.privacy.never_leave_device == ["pii", "private"] and policy.privacy.detected_tag == "pii"
    assert policy.known_privacy_tags == {"pii", "private", "internal"}
    assert privacy.is_private(policy, privacy.request_tags(policy, "pii", None))
    assert not privacy.is_private(policy, privacy.request_tags(policy, None, "INTERNAL"))


def test_an_http_server_in_an_edge_pool_is_on_this_host_or_trusted_in_so_many_words(tmp_path):
    path = tmp_path / "policy.yaml"
    rules = "rules:\n" + PRIVATE_FIRST + "  - {name: d, route: cloud}\n"
    for edge in (
        "kind: edge, endpoints: ['http://127.0.0.1:11434']",  # Ollama on the device
        "kind: edge, endpoints: ['http://10.0.0.9:8000'], trust_remote_http: true",
    ):
        path.write_text(f"version: 1\npools:\n  edge: {{{edge}}}\n  cloud: {{kind: cloud, endpoints: ['grpc://h:2']}}\n"
                        + rules)  # fmt: skip
        assert load_policy(path).pools["edge"].kind == "edge"
    with pytest.raises(PolicyError, match="credentials"):  # never written to the error either
        path.write_text(
            "version: 1\npools:\n  c: {kind: cloud, endpoints: ['http://u:pw@h:1']}\nrules: [{name: d, route: c}]\n"
        )
        load_policy(path)
    try:
        load_policy(path)
    except PolicyError as exc:
        assert "pw" not in str(exc)


def _edge_pool_policy(tmp_path, edge: str, cloud: str = "{kind: cloud, endpoints: ['grpc://h:2']}"):
    path = tmp_path / "policy.yaml"
    path.write_text(f"version: 1\npools:\n  edge: {edge}\n  cloud: {cloud}\nrules:\n{PRIVATE_FIRST}"
                    "  - {name: d, route: cloud}\n")  # fmt: skip
    return load_policy(path)


def test_an_edge_pool_on_another_host_is_reached_over_tls_or_plaintext_in_so_many_words(tmp_path):
    """Private prompts go to an edge pool's workers: over the network, unencrypted only where the policy says so."""
    from tests.certs import Authority

    authority = Authority(tmp_path / "pki")
    pem, client, other = authority.ca, authority.issue("gateway", client=True), authority.issue("other")
    junk, fifo = tmp_path / "junk.pem", tmp_path / "fifo"
    junk.write_text("-----BEGIN CERTIFICATE-----\nxx\n-----END CERTIFICATE-----\n")
    os.mkfifo(fifo)
    for edge in (
        "{kind: edge, endpoints: ['grpc://127.0.0.1:1', 'grpc://localhost:2', 'grpc://[::1]:3', 'dns://localhost:4']}",
        "{kind: edge, endpoints: ['grpc://10.0.0.9:50061'], plaintext_grpc: true}",
        f"{{kind: edge, endpoints: ['grpc://10.0.0.9:50061'], tls: {{ca_file: '{pem}'}}}}",
        "{kind: edge, endpoints: ['grpc://agent.lan:50061'], tls: {}}",  # the system's roots
        f"{{kind: edge, endpoints: ['dns://agents:50061'], tls: {{ca_file: '{pem}', server_name: agents.lan}}}}",
        f"{{kind: edge, endpoints: ['grpc://a:1'], tls: {{cert_file: '{client.cert}', key_file: '{client.key}'}}}}",
    ):
        assert _edge_pool_policy(tmp_path, edge).pools["edge"].kind == "edge", edge
    refused = [
        ("{kind: edge, endpoints: ['grpc://10.0.0.9:50061']}", "edge.endpoints.0: grpc://10.0.0.9:50061 is a worker "
         "on another host in an edge pool, over plaintext gRPC: private prompts would cross the network unencrypted"),
        ("{kind: edge, endpoints: ['grpc://127.0.0.1:1', 'dns://agents:50061']}", "edge.endpoints.1: dns://agents"),
        ("{kind: edge, endpoints: ['grpc://a:1'], tls: {ca_file: /nonexistent/ca.pem}}",
         "edge.tls.ca_file: ca_file '/nonexistent/ca.pem' does not exist"),
        # (a review) a body that is no certificate, another certificate's key, a FIFO (its read blocked the load
        # forever), an empty server name, `localhost.` (resolved by the network's DNS, not /etc/hosts)
        (f"{{kind: edge, endpoints: ['grpc://a:1'], tls: {{ca_file: '{junk}'}}}}", "holds no certificate OpenSSL reads"),
        (f"{{kind: edge, endpoints: ['grpc://a:1'], tls: {{cert_file: '{client.cert}', key_file: '{other.key}'}}}}",
         "edge.tls.key_file: key_file"),
        (f"{{kind: edge, endpoints: ['grpc://a:1'], tls: {{ca_file: '{fifo}'}}}}", "is no regular file"),
        ("{kind: edge, endpoints: ['grpc://a:1'], tls: {server_name: ''}}", "server_name"),
        ("{kind: edge, endpoints: ['grpc://localhost.:1']}", "over plaintext gRPC"),
        (f"{{kind: edge, endpoints: ['grpc://a:1'], tls: {{ca_file: '{tmp_path / 'policy.yaml'}'}}}}", "is no PEM file"),
        (f"{{kind: edge, endpoints: ['grpc://a:1'], tls: {{cert_file: '{pem}'}}}}", "cert_file and key_file go together"),
        (f"{{kind: edge, endpoints: ['dns://agents:1'], tls: {{ca_file: '{pem}'}}}}", "edge.tls.server_name: dns://"),
        ("{kind: edge, endpoints: ['https://10.0.0.9'], trust_remote_http: true, tls: {}}", "an HTTP server's TLS"),
        ("{kind: edge, endpoints: ['grpc://a:1'], tls: {}, plaintext_grpc: true}", "remove one of the two"),
        ("{kind: edge, endpoints: ['grpc://a:1'], plaintext_grpc: 'yes'}", "plaintext_grpc"),
    ]  # fmt: skip
    for edge, said in refused:
        with pytest.raises(PolicyError, match=re.escape(said)):
            _edge_pool_policy(tmp_path, edge)
    with pytest.raises(PolicyError, match="plaintext_grpc is an edge pool's"):
        _edge_pool_policy(tmp_path, "{kind: edge, endpoints: ['grpc://127.0.0.1:1']}",
                          "{kind: cloud, endpoints: ['grpc://h:2'], plaintext_grpc: true}")  # fmt: skip


def _laughs(levels: int) -> str:
    """A billion laughs: each anchor a list of nine aliases of the one before (9**levels values in under 1 KB)."""
    return "anchors:\n" + "".join(
        f"  - &a{i} [" + ", ".join([f"*a{i - 1}"] * 9 if i else ["lol"] * 9) + "]\n" for i in range(levels)
    )


@pytest.mark.parametrize(
    ("where", "levels"),
    [
        ("  cloud: {kind: cloud, endpoints: ['grpc://h:2'], profile: {scorers: [{type: *a6}]}}\n", 7),
        ("  cloud: {kind: cloud, endpoints: ['grpc://h:2']}\n  x: {kind: edge, endpoints: *a7}\n", 8),
        ("  cloud: {kind: cloud, endpoints: ['grpc://h:2']}\nprivacy: {known_tags: *a7}\n", 8),
    ],
)
def test_a_billion_laughs_is_refused_at_once_in_a_line(where, levels):
    """A kilobyte of aliases was cheap to parse, then validated and written whole into its error: 34 MB into one
    log line and /readyz, and the gateway's every request held for seconds (one more level: gigabytes; a review)."""
    import time

    text = _laughs(levels) + "version: 1\npools:\n  edge: {kind: edge, endpoints: ['grpc://127.0.0.1:1']}\n" + where
    text += "rules:\n" + PRIVATE_FIRST + "  - {name: d, route: cloud}\n"
    started = time.perf_counter()
    with pytest.raises(PolicyError, match="stands for over 200,000 values") as refused:
        parse_policy(text, "p.yaml")
    assert time.perf_counter() - started < 1.0 and len(str(refused.value)) < 300


def test_a_value_in_a_message_is_shown_cut_and_problems_are_counted_past_twenty():
    """A wrong value is shown in a few characters, never written out whole first; a file of 1,000 problems lists 20
    and says how many more (340,000 lines for a 680 KB list of numbers; a review)."""
    big = "version: 1\n" + POOLS + "privacy: {known_tags: [" + ", ".join(["1"] * 1000) + "]}\n"
    big += "rules:\n" + PRIVATE_FIRST + "  - {name: d, route: cloud}\n"
    with pytest.raises(PolicyError) as refused:
        parse_policy(big, "p.yaml")
    lines = str(refused.value).splitlines()
    assert len(lines) == 21 and lines[-1].endswith("and 980 more problems"), lines[-3:]
    value = "[[1, 2, 3, 4, 5, 6], [" + ", ".join(["7"] * 100) + "]]"
    nested = "version: 1\npools:\n  cloud: {kind: cloud, endpoints: ['grpc://h:2'], profile: {scorers: [{type: "
    nested += value + "}]}}\nrules: [{name: d, route: cloud}]\n"
    with pytest.raises(
        PolicyError, match=r"`type` is one name of .*, not \[\[1, 2, 3, 4, \.\.\.\], \[7, 7, 7, 7, \.\.\.\]\]"
    ) as e:
        parse_policy(nested, "p.yaml")
    assert len(str(e.value)) < 200
