"""A model reference: a local directory, `demo://…`, or `s3://bucket/path/model[@sha256:DIGEST]`; and the checks
every name read from a manifest, an address or a TANDEM_MODEL_* variable passes."""

import os
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

from serving.manifest_paths import unsafe_name

ENTRY_FILE = ".tandem-entry.json"  # in a cache entry: the manifest and the install stamps
LAST_USED_FILE = ".last-used"
PART_BYTES = 16 * 2**20  # one ranged GET
HASH_CHUNK = 8 * 2**20
# What a gateway fetches of a model (`--model s3://…`): it tokenizes and renders the chat template. A name ending in
# `/` is a folder, all of it. The template's own files were left out, and every chat request of a checkpoint saved
# today (its template in chat_template.jinja) was a 400, or rendered with an older template (a review).
TOKENIZER_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "additional_chat_templates/",
)


class StoreError(Exception):
    """A reference that cannot be resolved; the message says why and what to do."""


_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def is_sha256_hex(value: object) -> bool:
    """Exactly 64 lowercase hex digits: the only form a digest may take in a path, an object key or a reference."""
    return isinstance(value, str) and _SHA256_HEX.fullmatch(value) is not None


def checked_digest(value: object, where: str) -> str:
    """A digest read from `where` (an object, a file, a name), without surrounding whitespace; StoreError if it
    is not a SHA-256 hex digest, before it can become part of a path, a key or a reference."""
    digest = value.strip() if isinstance(value, str) else value
    if not is_sha256_hex(digest):
        raise StoreError(f"{where} holds {_shown(value)}, not a sha256 digest (64 lowercase hex digits)")
    return digest


def whole_number_from_env(name: str, what: str, least: int, unset: str) -> int | None:
    """The variable `name` as a whole number, `least` or more; None where it is unset. Anything else (`10GB`, `1e3`,
    `-1`, an empty value) is StoreError naming the variable, not a traceback: every command with --model reads it."""
    text = os.environ.get(name)
    if text is None:
        return None
    if not (text.isascii() and text.isdigit()) or int(text) < least:
        raise StoreError(f"{name}={text!r}: use {what}, {least} or more (unset: {unset})")
    return int(text)


def _shown(value: object, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def checked_name(name: object, where: str) -> str:
    """A manifest's file name, when it is a normalized relative POSIX path that cannot leave its folder by its
    spelling (serving/manifest_paths.py); else StoreError. Symlinks already in a folder are checked where the name
    meets the folder: `file_in`."""
    problem = unsafe_name(name)
    if problem is None:
        return name
    raise StoreError(f"{where}: unsafe path {_shown(name)} in the manifest ({problem})")


def file_in(directory: Path, name: str, where: str) -> Path:
    """`directory / name`, checked: a safe name (`checked_name`) that, following any symlink already there,
    stays inside `directory`; else StoreError. Every manifest path is joined to a folder through this."""
    path = directory / checked_name(name, where)
    try:
        inside = directory.resolve() in path.resolve().parents
    except (OSError, RuntimeError):  # a symlink loop (RuntimeError before Python 3.13)
        inside = False
    if not inside:
        raise StoreError(f"{where}: unsafe path {name!r} in the manifest (it leads outside {directory})")
    return path


@dataclass(frozen=True)
class ModelRef:
    bucket: str
    prefix: str  # the model's prefix in the bucket, no trailing slash
    digest: str | None  # manifest digest (hex); None: the latest pushed

    @classmethod
    def parse(cls, text: str) -> "ModelRef | None":
        """The reference, or None for a local path."""
        if not text.startswith("s3://"):
            return None
        address, at, pin = text.partition("@")
        if "?" in address or "#" in address:  # a URL's query and fragment: dropped, they named another model
            raise StoreError(f"{text!r}: an s3:// reference holds no '?' or '#' (s3://bucket/path/to/model)")
        parsed = urlparse(address)
        prefix = parsed.path.strip("/")
        if not parsed.netloc or not prefix:
            raise StoreError(f"{text!r}: expected s3://bucket/path/to/model[@sha256:<digest>]")
        digest = None
        if at and not pin:  # `model@$PIN` with the variable unset: not the latest push, silently
            raise StoreError(
                f"{text!r}: nothing after @: pin it @sha256:<64 lowercase hex digits>, or leave out the @ for the "
                "latest push"
            )
        if pin:
            algorithm, _, digest = pin.partition(":")
            if algorithm != "sha256" or not is_sha256_hex(digest):
                raise StoreError(f"{text!r}: the pin must be @sha256:<64 lowercase hex digits>")
        return cls(parsed.netloc, prefix, digest)

    def __post_init__(self) -> None:
        if self.digest is not None and not is_sha256_hex(self.digest):  # a backstop: callers check at the source
            raise StoreError(f"s3://{self.bucket}/{self.prefix}: digest {_shown(self.digest)} is not a sha256 digest")

    def pinned(self, digest: str) -> "ModelRef":
        return ModelRef(self.bucket, self.prefix, digest)

    def key(self, *parts: str) -> str:
        return "/".join([self.prefix, *parts])

    def __str__(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" + (f"@sha256:{self.digest}" if self.digest else "")
