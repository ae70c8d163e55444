"""The per-device token of the local agent: written by the agent to a file only its user can read, read by the SDK.

A web page the user visits can reach 127.0.0.1 too; it cannot read this file.
The path is `$TANDEM_LOCAL_TOKEN_FILE`, else `~/.tandem/local-agent.token`.
The agent keeps an existing token (so a running app's token stays good across
restarts) when the file is a regular file of its own user with mode 0600;
anything else is replaced by a fresh token, written atomically.
"""

import hashlib
import hmac
import os
import re
import secrets
import stat
from pathlib import Path

TOKEN_ENV = "TANDEM_LOCAL_TOKEN_FILE"
TOKEN_BYTES = 32
# The agent proves it holds the token before the SDK sends it anything private: the SDK's health probe carries a
# fresh nonce and no token, and the agent answers HMAC(token, nonce). A program that took the agent's port first
# (another user's, on a shared machine) gets neither the token nor a prompt.
CHALLENGE_HEADER = "X-Tandem-Challenge"
CHALLENGE = re.compile(r"[0-9a-f]{32,128}")


def new_challenge() -> str:
    return secrets.token_hex(16)


def proof(token: str, challenge: str) -> str:
    """What the agent answers a challenge with: only a holder of the token can compute it."""
    return hmac.new(token.encode(), b"tandem-local-agent:" + challenge.encode(), hashlib.sha256).hexdigest()


def proves(token: str, challenge: str, answered: object) -> bool:
    return isinstance(answered, str) and hmac.compare_digest(answered, proof(token, challenge))


def token_file() -> Path:
    return Path(os.environ.get(TOKEN_ENV) or Path.home() / ".tandem" / "local-agent.token")


def read_token(path: Path | None = None) -> str | None:
    """The token, or None when there is no readable token file (no local agent has run as this user)."""
    path = path or token_file()
    try:
        token = path.read_text().strip()
    except OSError:
        return None
    return token or None


def load_or_create(path: Path | None = None) -> str:
    """The agent side: reuse a safe existing token, else write a new one with mode 0600."""
    path = path or token_file()
    try:
        info = path.lstat()
        if stat.S_ISREG(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o600:
            token = path.read_text().strip()
            if len(token) >= 32:
                return token
    except OSError:
        pass
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.unlink(missing_ok=True)  # left by a process killed here
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "w") as f:
        f.write(token + "\n")
    os.replace(temporary, path)
    return token
