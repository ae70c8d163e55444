"""TLS files as the gateway's policy and a worker's environment name them: checked before gRPC reads them, so a bad
one is said with its name, where gRPC fails every handshake (or every bind) naming no file."""

import os
import ssl


def _pem_file_problem(path: str | None) -> str | None:
    """Why `path` is no PEM file to read (missing, unreadable, a directory, or a FIFO whose read would block the
    reader forever), or None."""
    if path is None:
        return None
    try:
        if not os.path.isfile(path):
            return f"{path!r} is no regular file" if os.path.exists(path) else f"{path!r} does not exist"
        with open(path, "rb") as f:
            head = f.read(4096)
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        return f"{path!r} cannot be read: {getattr(exc, 'strerror', None) or exc}"
    return None if b"-----BEGIN" in head else f"{path!r} is no PEM file (no -----BEGIN line)"


def _roots_problem(path: str | None) -> str | None:
    """Whether `path` holds certificates OpenSSL reads (a CA file); None when it does, or is None."""
    if path is None:
        return None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=path)
    except (ssl.SSLError, OSError) as exc:
        return f"{path!r} holds no certificate OpenSSL reads: {exc}"
    return None


def _key_pair_problem(cert_path: str | None, key_path: str | None) -> str | None:
    """Whether the key is the certificate's, unencrypted, as OpenSSL reads them; None when it is (or both are None)."""
    if cert_path is None or key_path is None:
        return None
    try:  # an encrypted key asks for a password: refused at once, no prompt on the terminal
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path, password=lambda: b"")
    except (ssl.SSLError, OSError) as exc:
        return f"{key_path!r} is no unencrypted key of the certificate {cert_path!r}: {exc}"
    return None


Named = tuple[str, str | None]  # (what the caller calls the file: a policy field, a variable; its path or None)


def tls_files_problem(roots: Named, cert: Named, key: Named) -> tuple[str, str] | None:
    """The first thing wrong with these TLS files, as (the file's name, what is wrong), or None: each given one a
    readable PEM file, the roots certificates OpenSSL reads, the key the certificate's and unencrypted."""
    for name, path in (roots, cert, key):
        if (problem := _pem_file_problem(path)) is not None:
            return name, problem
    if (problem := _roots_problem(roots[1])) is not None:
        return roots[0], problem
    if (problem := _key_pair_problem(cert[1], key[1])) is not None:
        return key[0], problem
    return None


def read_files(*paths: str | None) -> tuple[bytes | None, ...]:
    """Each file's bytes (None for None), as gRPC takes certificates and keys."""

    def read(path: str | None) -> bytes | None:
        if path is None:
            return None
        with open(path, "rb") as f:
            return f.read()

    return tuple(read(path) for path in paths)
