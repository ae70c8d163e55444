"""A worker's TLS from its environment: refused in words when half set or unreadable, never plaintext by mistake."""

import os

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
        ({"TANDEM_TLS_CERT_FILE": "/nonexistent.pem", "TANDEM_TLS_KEY_FILE": "{key}"}, "does not exist"),
        ({"TANDEM_TLS_CERT_FILE": "{text}", "TANDEM_TLS_KEY_FILE": "{key}"}, "no PEM file"),
        ({"TANDEM_TLS_CERT_FILE": "{cert}", "TANDEM_TLS_KEY_FILE": "{key}", "TANDEM_TLS_CLIENT_CA_FILE": "/x"}, "/x"),
        # (a review) a key of another certificate, a body that is no certificate, a FIFO that would block the read
        (
            {"TANDEM_TLS_CERT_FILE": "{cert}", "TANDEM_TLS_KEY_FILE": "{other_key}"},
            "TANDEM_TLS_KEY_FILE: .* is no unencrypted key of the certificate",
        ),
        (
            {"TANDEM_TLS_CERT_FILE": "{cert}", "TANDEM_TLS_KEY_FILE": "{key}", "TANDEM_TLS_CLIENT_CA_FILE": "{junk}"},
            "TANDEM_TLS_CLIENT_CA_FILE: .* holds no certificate",
        ),
        ({"TANDEM_TLS_CERT_FILE": "{fifo}", "TANDEM_TLS_KEY_FILE": "{key}"}, "is no regular file"),
    ],
)
def test_half_a_tls_setting_or_an_unreadable_file_stops_the_worker_with_the_variable_named(tmp_path, env, said):
    authority = Authority(tmp_path)
    issued, other = authority.issue("worker", dns_names=("localhost",)), authority.issue("other")
    text, junk, fifo = tmp_path / "notes.txt", tmp_path / "junk.pem", tmp_path / "fifo"
    text.write_text("not a certificate")
    junk.write_text("-----BEGIN CERTIFICATE-----\nxx\n-----END CERTIFICATE-----\n")
    os.mkfifo(fifo)
    paths = {"cert": issued.cert, "key": issued.key, "text": text, "other_key": other.key, "junk": junk, "fifo": fifo}
    with pytest.raises(SystemExit, match=said):
        server_tls({name: value.format(**paths) for name, value in env.items()})
