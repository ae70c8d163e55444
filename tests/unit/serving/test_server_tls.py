"""A worker's TLS from its environment: refused in words when half set or unreadable, never plaintext by mistake."""

import pytest

from serving.worker_service import server_tls
from tests.certs import Authority


def test_no_tls_variables_is_plaintext_and_a_certificate_with_its_key_is_tls(tmp_path):
    assert server_tls({}) is None
    issued = Authority(tmp_path).issue("worker", dns_names=("localhost",))
    assert server_tls({"TANDEM_TLS_CERT_FILE": str(issued.cert), "TANDEM_TLS_KEY_FILE": str(issued.key)}) is not None


@pytest.mark.parametrize(
    ("env", "said"),
    [
        ({"TANDEM_TLS_CERT_FILE": "{cert}"}, "TANDEM_TLS_CERT_FILE and TANDEM_TLS_KEY_FILE go together"),
        ({"TANDEM_TLS_KEY_FILE": "{key}"}, "TANDEM_TLS_CERT_FILE and TANDEM_TLS_KEY_FILE go together"),
        ({"TANDEM_TLS_CLIENT_CA_FILE": "{cert}"}, "asks clients for certificates over TLS"),
        ({"TANDEM_TLS_CERT_FILE": "/nonexistent.pem", "TANDEM_TLS_KEY_FILE": "{key}"}, "cannot read it"),
        ({"TANDEM_TLS_CERT_FILE": "{text}", "TANDEM_TLS_KEY_FILE": "{key}"}, "no PEM file"),
        ({"TANDEM_TLS_CERT_FILE": "{cert}", "TANDEM_TLS_KEY_FILE": "{key}", "TANDEM_TLS_CLIENT_CA_FILE": "/x"}, "/x"),
    ],
)
def test_half_a_tls_setting_or_an_unreadable_file_stops_the_worker_with_the_variable_named(tmp_path, env, said):
    issued = Authority(tmp_path).issue("worker", dns_names=("localhost",))
    text = tmp_path / "notes.txt"
    text.write_text("not a certificate")
    paths = {"cert": issued.cert, "key": issued.key, "text": text}
    with pytest.raises(SystemExit, match=said):
        server_tls({name: value.format(**paths) for name, value in env.items()})
